"""Deterministic replies in SGLang's native (/generate) and OpenAI-compatible shapes.

The reply is ``standin reply from <mode>:`` followed by the words of the last
user message (or prompt) in reverse order, cut to ``max_tokens`` words.
Token counts are whitespace word counts.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"
DEFAULT_MAX_TOKENS = 128
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError", 503: "ServiceUnavailableError"}


class RequestError(ValueError):
    """A request the stand-in answers with an HTTP error status."""

    def __init__(self, message: str, status: int = 400, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


def error_body(status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    """SGLang's ErrorResponse shape (type: error_type, else the status's usual name)."""
    kind = error_type or _ERROR_TYPES.get(status, "Error")
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


@dataclass(frozen=True)
class Reply:
    """One generated answer."""

    words: tuple[str, ...]
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int

    @property
    def text(self) -> str:
        """The whole answer."""
        return " ".join(self.words)

    def pieces(self) -> list[str]:
        """The answer as streamed deltas, one word each."""
        return [word if i == 0 else f" {word}" for i, word in enumerate(self.words)]

    @property
    def usage(self) -> dict[str, int]:
        """OpenAI usage object."""
        done = len(self.words)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": done, "total_tokens": self.prompt_tokens + done}


def make_reply(mode: str, prompt: str, echo: str, max_words: int) -> Reply:
    """Build the deterministic reply to prompt, echoing echo's words reversed."""
    words = ["standin", "reply", "from", f"{mode}:", *reversed(echo.split())]
    finish = "length" if len(words) > max_words else "stop"
    return Reply(tuple(words[:max_words]), finish, len(prompt.split()))


def _max_words(body: Mapping[str, Any], keys: tuple[str, ...], default: int) -> int:
    """First of keys present in body, validated as a non-negative integer."""
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError(f"{key} must be a non-negative integer, got {value!r}")
        return value
    return default


def _ids_text(ids: list[Any]) -> str:
    """Token ids as words, so each id counts as one token."""
    return " ".join(str(i) for i in ids)


def _prompt_texts(prompt: Any, name: str) -> tuple[list[str], bool]:
    """Normalise a prompt (string, list of strings, token ids, lists of ids) to (texts, batched)."""
    if isinstance(prompt, str):
        return [prompt], False
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return [_ids_text(prompt)], False
        if all(isinstance(p, str) for p in prompt):
            return list(prompt), True
        if all(isinstance(p, list) for p in prompt):
            return [_ids_text(p) for p in prompt], True
    raise RequestError(f"{name} must be a string, a list of strings, a list of token ids or a list of such lists")


def _content_text(content: Any) -> str:
    """Text of a chat message content (a string or a list of parts)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise RequestError("message content must be a string or a list of content parts")


def chat_reply(mode: str, body: Mapping[str, Any]) -> Reply:
    """Reply to a /v1/chat/completions body."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError("messages must be a non-empty list of objects")
    texts = [_content_text(m.get("content")) for m in messages]
    last_user = next((t for m, t in zip(reversed(messages), reversed(texts), strict=True) if m.get("role") == "user"), "")
    limit = _max_words(body, ("max_completion_tokens", "max_tokens"), DEFAULT_MAX_TOKENS)
    return make_reply(mode, " ".join(texts), last_user, limit)


def completion_replies(mode: str, body: Mapping[str, Any]) -> list[Reply]:
    """Replies to a /v1/completions body, one per prompt."""
    texts, _batched = _prompt_texts(body.get("prompt"), "prompt")
    limit = _max_words(body, ("max_tokens",), DEFAULT_COMPLETION_MAX_TOKENS)
    return [make_reply(mode, text, text, limit) for text in texts]


def generate_replies(mode: str, body: Mapping[str, Any]) -> tuple[list[Reply], bool]:
    """Replies to a native /generate body and whether the request was batched."""
    name = "text" if body.get("text") is not None else "input_ids"
    texts, batched = _prompt_texts(body.get(name), name)
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise RequestError("sampling_params must be an object")
    limit = _max_words(params, ("max_new_tokens",), DEFAULT_MAX_TOKENS)
    return [make_reply(mode, text, text, limit) for text in texts], batched


def include_usage(body: Mapping[str, Any]) -> bool:
    """True when stream_options.include_usage is set."""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def new_id(prefix: str) -> str:
    """A fresh request id."""
    return f"{prefix}-{uuid.uuid4().hex}"


def _total_usage(replies: list[Reply]) -> dict[str, int]:
    """Usage summed over replies."""
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return {k: sum(r.usage[k] for r in replies) for k in keys}


def chat_response(reply: Reply, model: str) -> dict[str, Any]:
    """Non-streaming chat.completion object."""
    choice = {"index": 0, "message": {"role": "assistant", "content": reply.text}, "logprobs": None, "finish_reason": reply.finish_reason}
    return {"id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [choice], "usage": reply.usage}


def chat_stream(reply: Reply, model: str, with_usage: bool) -> Iterator[str]:
    """SSE payloads of a streaming chat completion, ending with the usage chunk (if asked) and [DONE]."""
    base = {"id": new_id("chatcmpl"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None) -> str:
        data = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])
        if with_usage:
            data["usage"] = None
        return json.dumps(data)

    yield chunk({"role": "assistant", "content": ""}, None)
    for piece in reply.pieces():
        yield chunk({"content": piece}, None)
    yield chunk({}, reply.finish_reason)
    if with_usage:
        yield json.dumps(dict(base, choices=[], usage=reply.usage))
    yield DONE


def completion_response(replies: list[Reply], model: str) -> dict[str, Any]:
    """Non-streaming text_completion object."""
    choices = [{"index": i, "text": r.text, "logprobs": None, "finish_reason": r.finish_reason} for i, r in enumerate(replies)]
    return {"id": new_id("cmpl"), "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": _total_usage(replies)}


def completion_stream(replies: list[Reply], model: str, with_usage: bool) -> Iterator[str]:
    """SSE payloads of a streaming text completion."""
    base = {"id": new_id("cmpl"), "object": "text_completion", "created": int(time.time()), "model": model}
    for index, reply in enumerate(replies):
        for piece in reply.pieces():
            yield json.dumps(dict(base, choices=[{"index": index, "text": piece, "logprobs": None, "finish_reason": None}]))
        yield json.dumps(dict(base, choices=[{"index": index, "text": "", "logprobs": None, "finish_reason": reply.finish_reason}]))
    if with_usage:
        yield json.dumps(dict(base, choices=[], usage=_total_usage(replies)))
    yield DONE


def _meta_info(reply: Reply, rid: str, completion_tokens: int, finished: bool) -> dict[str, Any]:
    """SGLang meta_info of a native reply."""
    finish: dict[str, Any] | None = None
    if finished:
        finish = {"type": "length", "length": completion_tokens} if reply.finish_reason == "length" else {"type": "stop", "matched": None}
    return {"id": rid, "finish_reason": finish, "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": completion_tokens, "cached_tokens": 0}


def generate_response(reply: Reply) -> dict[str, Any]:
    """Native /generate answer for one prompt."""
    return {"text": reply.text, "meta_info": _meta_info(reply, uuid.uuid4().hex, len(reply.words), True)}


def generate_stream(reply: Reply) -> Iterator[str]:
    """SSE payloads of a streaming /generate: cumulative text per word, then [DONE]."""
    rid = uuid.uuid4().hex
    pieces = reply.pieces()
    text = ""
    for i, piece in enumerate(pieces, start=1):
        text += piece
        yield json.dumps({"text": text, "meta_info": _meta_info(reply, rid, i, i == len(pieces))})
    if not pieces:
        yield json.dumps({"text": "", "meta_info": _meta_info(reply, rid, 0, True)})
    yield DONE
