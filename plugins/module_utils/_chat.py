# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""An OpenAI-compatible chat completion probe (private: the API may change)."""

from __future__ import annotations

import json
import time

from ansible.module_utils.common.text.converters import to_text

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import (
    TRANSPORT_ERRORS,
    HttpClient,
    HttpRequestError,
    describe_error,
    excerpt,
    normalise_url,
    round_seconds,
)

CHAT_PATH = '/v1/chat/completions'
MODELS_PATH = '/v1/models'
DEFAULT_MESSAGES = [{'role': 'user', 'content': 'Say hello in one short sentence.'}]


class ChatProbeError(Exception):
    def __init__(self, msg, **result):
        super().__init__(msg)
        self.msg = msg
        self.result = result


def split_base_url(url):
    """Return the server base URL, accepting ``…``, ``…/v1`` or ``…/v1/chat/completions``."""
    base = normalise_url(url)
    for suffix in (CHAT_PATH, '/v1'):
        if base.endswith(suffix):
            return base[:-len(suffix)]
    return base


def _content_of(obj):
    """Text of a message or delta; ``content`` may be null or a list of parts."""
    value = obj.get('content') if isinstance(obj, dict) else None
    if value is None:
        return ''
    if isinstance(value, list):
        return ''.join(p.get('text') or '' for p in value if isinstance(p, dict))
    return to_text(value)


class ChatProbe:
    """Send one chat completion and measure it."""

    def __init__(self, client, url, model=None, messages=None, max_tokens=16, stream=False, require_usage=True,
                 timeout=60.0, expected_content=None, clock=time.monotonic):
        self.client = client
        self.base_url = split_base_url(url)
        self.chat_url = self.base_url + CHAT_PATH
        self.models_url = self.base_url + MODELS_PATH
        self.model = model
        self.messages = messages or DEFAULT_MESSAGES
        self.max_tokens = max_tokens
        self.stream = stream
        self.require_usage = require_usage
        self.timeout = float(timeout)
        self.expected_content = expected_content
        self.clock = clock
        self._deadline = None

    def _remaining(self):
        return max(self._deadline - self.clock(), 0.1)

    def _error(self, msg, **result):
        result.setdefault('url', self.chat_url)
        result.setdefault('model', self.model)
        return ChatProbeError(msg, **result)

    def resolve_model(self):
        try:
            resp = self.client.request('GET', self.models_url, timeout=self._remaining())
        except HttpRequestError as exc:
            raise self._error('No model given and the model list could not be read: %s.' % exc, url=self.models_url)
        if resp.status != 200:
            raise self._error('No model given: GET %s expected HTTP 200 with a model list, got HTTP %s: %r'
                              % (self.models_url, resp.status, resp.excerpt()), url=self.models_url, status=resp.status)
        try:
            data = resp.json()
        except ValueError as exc:
            raise self._error('No model given: %s' % exc, url=self.models_url, status=resp.status)
        models = data.get('data') if isinstance(data, dict) else None
        if not models or not isinstance(models[0], dict) or not models[0].get('id'):
            raise self._error('No model given: GET %s expected {"data": [{"id": ...}, ...]} with at least one model, '
                              'found %r. Set the model option.' % (self.models_url, resp.excerpt()),
                              url=self.models_url, status=resp.status)
        return models[0]['id']

    def request_body(self):
        body = dict(model=self.model, messages=self.messages, max_tokens=self.max_tokens, stream=self.stream)
        if self.stream:
            body['stream_options'] = {'include_usage': True}
        return body

    def run(self):
        start = self.clock()
        self._deadline = start + self.timeout
        if not self.model:
            self.model = self.resolve_model()
        body = self.request_body()
        try:
            resp = self.client.request('POST', self.chat_url, body=body, timeout=self._remaining(), stream=self.stream)
        except HttpRequestError as exc:
            raise self._error('POST %s (model %s): expected an HTTP answer within the %.1f s timeout, got none: %s.'
                              % (self.chat_url, self.model, self.timeout, exc.reason),
                              latency=round_seconds(self.clock() - start))
        if resp.status != 200:
            resp.close()
            raise self._error('POST %s (model %s): expected HTTP 200, got HTTP %s: %s'
                              % (self.chat_url, self.model, resp.status, excerpt(resp.text)),
                              status=resp.status, latency=round_seconds(self.clock() - start))
        if self.stream:
            result = self._read_stream(resp, start)
        else:
            result = self._read_plain(resp, start)
        result.update(status=resp.status, url=self.chat_url)
        result.setdefault('model', self.model)
        if self.require_usage and not result.get('usage'):
            where = ('the stream carried no chunk with "usage" (sent stream_options.include_usage=true)'
                     if self.stream else 'the response has no "usage" object')
            raise self._error('POST %s (model %s): expected token usage, but %s. Set require_usage=false to accept that.'
                              % (self.chat_url, self.model, where), **result)
        if self.expected_content is not None and self.expected_content not in result['content']:
            raise self._error('POST %s (model %s): expected the answer to contain %r, found %r.'
                              % (self.chat_url, self.model, self.expected_content, excerpt(result['content'])), **result)
        return result

    def _read_plain(self, resp, start):
        latency = round_seconds(self.clock() - start)
        try:
            data = resp.json()
        except ValueError as exc:
            raise self._error(to_text(exc), status=resp.status, latency=latency)
        if not isinstance(data, dict) or not isinstance(data.get('choices'), list):
            raise self._error('POST %s: expected a chat completion object with "choices", found %r.'
                              % (self.chat_url, resp.excerpt()), status=resp.status, latency=latency)
        choice = data['choices'][0] if data['choices'] and isinstance(data['choices'][0], dict) else {}
        return dict(
            latency=latency,
            ttft=latency,
            usage=data.get('usage') or {},
            content=_content_of(choice.get('message')),
            finish_reason=choice.get('finish_reason'),
            chunks=0,
            model=data.get('model') or self.model,
        )

    def _events(self, raw):
        """Yield the data of each server-sent event, checking the deadline between lines."""
        data_lines = []
        for line in raw:
            if self.clock() > self._deadline:
                raise HttpRequestError('POST', self.chat_url, 'the stream did not finish within %.1f s' % self.timeout)
            line = to_text(line, errors='surrogate_or_replace').rstrip('\r\n')
            if not line:
                if data_lines:
                    yield '\n'.join(data_lines)
                    data_lines = []
                continue
            if line.startswith(':'):
                continue
            field, _sep, value = line.partition(':')
            if field == 'data':
                data_lines.append(value[1:] if value.startswith(' ') else value)
        if data_lines:
            yield '\n'.join(data_lines)

    def _read_stream(self, resp, start):
        content = []
        usage = None
        chunks = 0
        ttft = None
        first_chunk = None
        finish_reason = None
        model = None
        done = False
        try:
            try:
                for data in self._events(resp.raw):
                    if data.strip() == '[DONE]':
                        done = True
                        break
                    now = self.clock() - start
                    try:
                        chunk = json.loads(data)
                    except ValueError as exc:
                        raise self._error('POST %s (model %s): stream chunk %d is not JSON (%s): %r'
                                          % (self.chat_url, self.model, chunks + 1, exc, excerpt(data)),
                                          status=resp.status, chunks=chunks, latency=round_seconds(now))
                    if not isinstance(chunk, dict):
                        raise self._error('POST %s (model %s): stream chunk %d is not a JSON object: %r'
                                          % (self.chat_url, self.model, chunks + 1, excerpt(data)),
                                          status=resp.status, chunks=chunks, latency=round_seconds(now))
                    if chunk.get('error'):
                        raise self._error('POST %s (model %s): the stream carried an error after %d chunks: %s'
                                          % (self.chat_url, self.model, chunks, excerpt(json.dumps(chunk['error']))),
                                          status=resp.status, chunks=chunks, latency=round_seconds(now))
                    chunks += 1
                    if first_chunk is None:
                        first_chunk = now
                    model = model or chunk.get('model')
                    if chunk.get('usage'):
                        usage = chunk['usage']
                    for choice in chunk.get('choices') or []:
                        if not isinstance(choice, dict):
                            continue
                        delta = choice.get('delta') or {}
                        piece = _content_of(delta)
                        if ttft is None and (piece or (isinstance(delta, dict) and delta.get('reasoning_content'))):
                            ttft = now
                        content.append(piece)
                        finish_reason = choice.get('finish_reason') or finish_reason
            except TRANSPORT_ERRORS as exc:
                raise HttpRequestError('POST', self.chat_url, describe_error(exc))
        except HttpRequestError as exc:
            raise self._error('POST %s (model %s): reading the stream failed after %d chunks: %s.'
                              % (self.chat_url, self.model, chunks, exc.reason),
                              status=resp.status, chunks=chunks, latency=round_seconds(self.clock() - start))
        finally:
            resp.close()
        latency = round_seconds(self.clock() - start)
        result = dict(latency=latency, usage=usage or {}, content=''.join(content), finish_reason=finish_reason,
                      chunks=chunks, model=model or self.model)
        if ttft is None:
            ttft = first_chunk if first_chunk is not None else latency
        result['ttft'] = round_seconds(ttft)
        if not chunks:
            content_type = resp.headers.get('Content-Type') or resp.headers.get('content-type')
            raise self._error('POST %s (model %s): expected a server-sent event stream (text/event-stream) of chat '
                              'completion chunks, found no data events (Content-Type %s).'
                              % (self.chat_url, self.model, content_type), status=resp.status, **result)
        if not done:
            raise self._error('POST %s (model %s): the stream ended after %d chunks without "data: [DONE]"; '
                              'the answer was cut off.' % (self.chat_url, self.model, chunks), status=resp.status, **result)
        return result


def run_chat_probe_module(module):
    """Entry point of the sglang_chat_probe module."""
    p = module.params
    client = HttpClient(timeout=p['timeout'], validate_certs=p['validate_certs'], api_key=p['api_key'])
    if p['timeout'] <= 0:
        module.fail_json(msg='timeout must be greater than 0, got %s. [SGLPD-ARG-001]' % p['timeout'])
    probe = ChatProbe(client, p['url'], model=p['model'], messages=p['messages'], max_tokens=p['max_tokens'],
                      stream=p['stream'], require_usage=p['require_usage'], timeout=p['timeout'],
                      expected_content=p['expected_content'])
    try:
        result = probe.run()
    except ChatProbeError as exc:
        module.fail_json(msg=exc.msg + ' [SGLPD-RTR-002]', changed=False, **exc.result)
    module.exit_json(changed=False, **result)
