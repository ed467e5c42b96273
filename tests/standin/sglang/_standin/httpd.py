"""HTTP/1.1 server of the stand-in: keep-alive, chunked streaming and a graceful drain."""

from __future__ import annotations

import contextlib
import hmac
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import urlsplit

from sglang import __version__
from sglang._standin import replies
from sglang._standin.load import InFlight, load_body
from sglang._standin.pd import FAKE_BOOTSTRAP_HOST, bootstrap_requests, bootstrap_rooms
from sglang._standin.receiver import receive_kv
from sglang._standin.replies import RequestError, error_body
from sglang._standin.state import ServerState, log

IDLE_TIMEOUT_SECS = 30.0
MAX_BODY_BYTES = 16 * 1024 * 1024
# Endpoints SGLang guards with --admin-api-key when it is set.
ADMIN_PATHS = frozenset({"/flush_cache"})


class StandinHTTPServer(ThreadingHTTPServer):
    """Threading HTTP server that can close idle keep-alive connections on shutdown.

    Handler threads are not daemons, so server_close() waits for in-flight requests.
    """

    daemon_threads = False
    block_on_close = True
    # SGLang serves HTTP with uvicorn, whose listen backlog is 2048 (socketserver's is 5): a
    # busy or hung real server queues connections instead of refusing them, and so does this one.
    request_queue_size = 2048

    def __init__(self, state: ServerState) -> None:
        host = state.args.host
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.state = state
        self.draining = False
        self.in_flight = InFlight()
        self._lock = threading.Lock()
        self._idle: set[socket.socket] = set()
        super().__init__((host, state.args.port), StandinHandler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup (slow on hosts without DNS)."""
        TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def mark_idle(self, conn: socket.socket) -> bool:
        """Record that conn waits for its next request; False when draining (close it)."""
        with self._lock:
            if self.draining:
                return False
            self._idle.add(conn)
            return True

    def mark_busy(self, conn: socket.socket) -> None:
        """Record that conn is no longer idle (a request arrived, or it is closing)."""
        with self._lock:
            self._idle.discard(conn)

    def drain(self) -> None:
        """Refuse further requests and wake idle keep-alive connections so they close."""
        with self._lock:
            self.draining = True
            for conn in self._idle:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RD)
            self._idle.clear()


class StandinHandler(BaseHTTPRequestHandler):
    """Routes of the SGLang server that the collection uses."""

    server: StandinHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = f"sglang-standin/{__version__}"
    timeout = IDLE_TIMEOUT_SECS

    # --- connection handling -------------------------------------------------

    def handle_one_request(self) -> None:
        """Serve one request; between requests the connection counts as idle."""
        if not self.server.mark_idle(self.connection):
            self.close_connection = True
            return
        try:
            super().handle_one_request()
        finally:
            self.server.mark_busy(self.connection)

    def parse_request(self) -> bool:
        """A request line arrived: the connection is busy until it is answered."""
        self.server.mark_busy(self.connection)
        return super().parse_request()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """One line per request: method, path, status."""
        status = int(code) if isinstance(code, int) else code
        log(f"{self.client_address[0]} {self.command} {self.path} {status}")

    def log_message(self, format: str, *args: Any) -> None:  # pylint: disable=redefined-builtin
        """Other server messages (timeouts, bad requests) go to stdout too."""
        log(f"{self.client_address[0]} {format % args}")

    # --- responses -----------------------------------------------------------

    def _headers(self, status: int, content_type: str, extra: dict[str, str]) -> None:
        """Status line and headers; Connection: close while draining."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in extra.items():
            self.send_header(name, value)
        if self.server.draining:
            self.close_connection = True
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()

    def _send(self, status: int, body: bytes = b"", content_type: str = "text/plain; charset=utf-8") -> None:
        """A complete response with Content-Length."""
        self._headers(status, content_type, {"Content-Length": str(len(body))})
        self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        """A JSON response."""
        self._send(status, json.dumps(data).encode(), "application/json")

    def _error(self, status: int, message: str, error_type: str | None = None) -> None:
        """A JSON error response in SGLang's shape."""
        self._json(status, error_body(status, message, error_type))

    def _stream(self, payloads: Iterable[str]) -> bool:
        """Server-sent events, chunked (HTTP/1.0 clients: until close); False if the client went away."""
        chunked = self.request_version != "HTTP/1.0"
        if not chunked:
            self.close_connection = True
        self._headers(200, "text/event-stream", {"Cache-Control": "no-cache", "Transfer-Encoding": "chunked"} if chunked else {})
        delay = self.server.state.token_delay_secs
        try:
            for payload in payloads:
                event = f"data: {payload}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event) if chunked else event)
                if delay and payload != replies.DONE:
                    time.sleep(delay)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
            return False
        return True

    # --- routing -------------------------------------------------------------

    def _authorized(self, path: str) -> bool:
        """SGLang's API-key rules; answers 401 and returns False when the request lacks its key.

        /health* and /metrics are open; admin endpoints want --admin-api-key when it is set
        (else --api-key); every other endpoint wants --api-key when it is set.
        """
        args = self.server.state.args
        if path.startswith(("/health", "/metrics")):
            return True
        wanted = (args.admin_api_key or args.api_key) if path in ADMIN_PATHS else args.api_key
        given = self.headers.get("Authorization", "")
        if not wanted or hmac.compare_digest(given.encode(), f"Bearer {wanted}".encode()):
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:  # pylint: disable=invalid-name
        """GET routes."""
        if not self._authorized(urlsplit(self.path).path):
            return
        routes: dict[str, Callable[[], None]] = {
            "/health": self._health,
            "/health_generate": self._health,
            "/get_server_info": lambda: self._json(200, self.server.state.server_info()),
            "/get_model_info": self._model_info,
            "/v1/models": self._models,
            "/metrics": self._metrics,
            "/get_load": lambda: self._json(200, load_body(self.server.in_flight.value)),
        }
        route = routes.get(urlsplit(self.path).path)
        if route is None:
            self._error(404, f"no route GET {self.path}")
        else:
            route()

    def do_POST(self) -> None:  # pylint: disable=invalid-name
        """POST routes; the body is always read first so keep-alive stays in sync."""
        try:
            body = self._read_body()
        except RequestError as exc:
            self.close_connection = True
            self._error(exc.status, str(exc))
            return
        path = urlsplit(self.path).path
        if not self._authorized(path):
            return
        if path == "/flush_cache":
            self._send(200, b"Cache flushed.\n")
        elif path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            self._generation(path, body)
        else:
            self._error(404, f"no route POST {self.path}")

    def _read_body(self) -> bytes:
        """The request body, by Content-Length."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise RequestError("chunked request bodies are not supported by the stand-in; send Content-Length", 411)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError as exc:
            raise RequestError("invalid Content-Length") from exc
        if not 0 <= length <= MAX_BODY_BYTES:
            raise RequestError(f"Content-Length must be between 0 and {MAX_BODY_BYTES}", 413)
        return self.rfile.read(length)

    # --- endpoints -----------------------------------------------------------

    def _health(self) -> None:
        """GET /health and /health_generate, as SGLang 0.5.14 answers both (http_server.py).

        503 while shutting down (SIGTERM) or starting (the warm-up); otherwise one token is
        pushed through the scheduler (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is on by default):
        200 once it comes out, 503 when none did within SGLANG_HEALTH_CHECK_TIMEOUT. In PD mode
        that token uses SGLang's fake bootstrap host: the health check never reaches a peer.
        """
        state = self.server.state
        if state.exiting or not state.ready():
            self._send(503)
            return
        if state.one_token(state.health_timeout_secs):
            self._send(200)
            return
        log(f"Health check failed. Server couldn't get a response from detokenizer for last {state.health_timeout_secs:g} seconds.")
        self._send(503)

    def _model_info(self) -> None:
        """GET /get_model_info."""
        args = self.server.state.args
        self._json(200, {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path, "is_generation": True})

    def _models(self) -> None:
        """GET /v1/models."""
        args = self.server.state.args
        card = {"id": args.served_model_name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                "root": args.model_path, "max_model_len": None}
        self._json(200, {"object": "list", "data": [card]})

    def _metrics(self) -> None:
        """GET /metrics: a few Prometheus lines; SGLang mounts the route only with --enable-metrics."""
        state = self.server.state
        if not state.args.enable_metrics:
            self._json(404, {"detail": "Not Found"})
            return
        labels = f'model_name="{state.args.served_model_name}",mode="{state.mode}"'
        text = (
            "# HELP sglang:num_requests_total Generation requests served by the stand-in.\n"
            "# TYPE sglang:num_requests_total counter\n"
            f"sglang:num_requests_total{{{labels}}} {state.requests_served}\n"
            "# HELP sglang:num_running_reqs Running requests.\n"
            "# TYPE sglang:num_running_reqs gauge\n"
            f"sglang:num_running_reqs{{{labels}}} {self.server.in_flight.value}\n"
            "# HELP sglang:num_queue_reqs Queued requests.\n"
            "# TYPE sglang:num_queue_reqs gauge\n"
            f"sglang:num_queue_reqs{{{labels}}} 0\n"
        )
        self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _generation(self, path: str, raw: bytes) -> None:
        """POST /generate, /v1/completions, /v1/chat/completions."""
        state = self.server.state
        if not state.ready():
            self._error(503, "the server is warming up")
            return
        try:
            with self.server.in_flight:
                # A stalled scheduler: the request waits (the client's timeout ends it), HTTP still answers.
                state.one_token(None)
                body = json.loads(raw or b"null")
                if not isinstance(body, dict):
                    raise RequestError("the request body must be a JSON object")
                if state.mode == "prefill":
                    for room in bootstrap_rooms(body):
                        state.rooms.add(room, _prompt_tokens(path, state.mode, body))
                elif state.mode == "decode":
                    self._check_prefill(body)
                served = self._answer(path, body)
        except RequestError as exc:
            self._error(exc.status, str(exc), exc.error_type)
            return
        except ValueError as exc:  # JSON or UTF-8 decoding
            self._error(400, f"invalid JSON body: {exc}")
            return
        if served:
            state.count_request()

    def _check_prefill(self, body: dict[str, Any]) -> None:
        """Decode: receive the KV of each room the request names from its prefill (receiver.py), or fail with 500."""
        state = self.server.state
        rid = str(body.get("rid") or uuid.uuid4().hex)  # SGLang's rid when the request has none
        for host, port, room in bootstrap_requests(body, state.args.disaggregation_bootstrap_port):
            if host == FAKE_BOOTSTRAP_HOST:
                continue  # SGLang's fake transfer (_is_fake_transfer): no peer is asked
            tokens = receive_kv(host, port, room, rid, state.decode_settings, lambda line: log(f"error: {line}"))
            if room is not None:
                state.count_kv_transfer()
                log(f"received the KV cache of bootstrap_room {room} ({tokens} tokens) from {host}:{port}")

    def _answer(self, path: str, body: dict[str, Any]) -> bool:
        """Write the reply in the endpoint's shape; True when it was delivered."""
        state = self.server.state
        model = state.args.served_model_name
        stream = body.get("stream") is True
        if path == "/v1/chat/completions":
            reply = replies.chat_reply(state.mode, body)
            if stream:
                return self._stream(replies.chat_stream(reply, model, replies.include_usage(body)))
            self._json(200, replies.chat_response(reply, model))
        elif path == "/v1/completions":
            many = replies.completion_replies(state.mode, body)
            if stream:
                return self._stream(replies.completion_stream(many, model, replies.include_usage(body)))
            self._json(200, replies.completion_response(many, model))
        else:
            many, batched = replies.generate_replies(state.mode, body)
            if stream and batched:
                raise RequestError("the stand-in does not stream batched /generate requests")
            if stream:
                return self._stream(replies.generate_stream(many[0]))
            answers = [replies.generate_response(r) for r in many]
            self._json(200, answers if batched else answers[0])
        return True


def _prompt_tokens(path: str, mode: str, body: dict[str, Any]) -> int:
    """The prompt tokens of a request: the KV cache prefill computes and sends decode."""
    if path == "/v1/chat/completions":
        return replies.chat_reply(mode, body).prompt_tokens
    many = replies.completion_replies(mode, body) if path == "/v1/completions" else replies.generate_replies(mode, body)[0]
    return sum(reply.prompt_tokens for reply in many)
