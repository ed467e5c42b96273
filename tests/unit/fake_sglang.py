# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Fake SGLang servers and routers on a real local HTTP server (127.0.0.1, free port).

Each fake is an "app" with a ``handle(request) -> Reply`` method; ``FakeServer`` runs
it in a thread with ``http.server``. Apps record every request they receive.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

import pytest


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch):
    """The fakes listen on 127.0.0.1: never send their traffic through a proxy.

    Import this fixture into a test module to make it apply there.
    """
    for name in ('http_proxy', 'https_proxy', 'all_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('no_proxy', '127.0.0.1,localhost')
    monkeypatch.setenv('NO_PROXY', '127.0.0.1,localhost')


class Request:
    def __init__(self, method, path, headers, body):
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body.decode('utf-8'))

    def __repr__(self):
        return '<%s %s>' % (self.method, self.path)


class Reply:
    """``body`` (bytes/str/JSON-able) or ``stream`` (iterable of bytes, written and flushed one by one)."""

    def __init__(self, status=200, body=None, content_type='application/json', stream=None, delay=0.0):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.stream = stream
        self.delay = delay


def _encode(body):
    if body is None:
        return b''
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode('utf-8')
    return json.dumps(body).encode('utf-8')


def _make_handler(app):
    class Handler(BaseHTTPRequestHandler):
        def _handle(self):
            length = int(self.headers.get('Content-Length') or 0)
            body = self.rfile.read(length) if length else b''
            request = Request(self.command, self.path, dict(self.headers), body)
            with app.lock:
                app.requests.append(request)
                reply = app.handle(request)
            try:
                if reply.delay:
                    time.sleep(reply.delay)
                self.send_response(reply.status)
                self.send_header('Content-Type', reply.content_type)
                if reply.stream is None:
                    payload = _encode(reply.body)
                    self.send_header('Content-Length', str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                else:
                    self.send_header('Cache-Control', 'no-cache')
                    self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                    for piece in reply.stream:
                        self.wfile.write(piece)
                        self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        do_GET = do_POST = do_DELETE = do_PUT = _handle

        def log_message(self, format, *args):  # pylint: disable=redefined-builtin
            pass

    return Handler


class FakeServer:
    """``with FakeServer(app) as server: server.url``"""

    def __init__(self, app):
        self.app = app
        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), _make_handler(app))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.httpd.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class App:
    def __init__(self, api_key=None):
        self.lock = threading.RLock()
        self.requests = []
        self.api_key = api_key

    def calls(self, method=None):
        return [r for r in self.requests if method is None or r.method == method]

    def unauthorised(self, request):
        if self.api_key is None:
            return None
        if request.headers.get('Authorization') == 'Bearer %s' % self.api_key:
            return None
        return Reply(401, {'error': 'unauthorised'})

    def handle(self, request):
        return self.unauthorised(request) or self.route(request)

    def route(self, request):
        return Reply(404, 'Not Found', content_type='text/plain')


# ---------------------------------------------------------------- health
class HealthApp(App):
    """Answers ``fail_status`` to the first ``fail_times`` requests, then ``ok_status``."""

    def __init__(self, fail_times=0, fail_status=503, ok_status=200, path='/health_generate', **kwargs):
        super().__init__(**kwargs)
        self.fail_times = fail_times
        self.fail_status = fail_status
        self.ok_status = ok_status
        self.path = path

    def route(self, request):
        if request.path != self.path:
            return Reply(404, 'Not Found', content_type='text/plain')
        seen = len([r for r in self.requests if r.path == self.path])
        if self.fail_times is None or seen <= self.fail_times:
            return Reply(self.fail_status, 'server is starting', content_type='text/plain')
        return Reply(self.ok_status, b'')


# ---------------------------------------------------------------- routers
class RouterV03App(App):
    """sglang-router 0.3.x: UUID ids, flat worker_type, background registration.

    A POSTed worker is listed from the (``register_after`` + 1)-th GET /workers
    after the POST (at once if 0, never if None); a deleted one likewise after
    ``remove_after``.
    """

    version = '0.3.2'

    def __init__(self, workers=(), register_after=1, remove_after=0, **kwargs):
        super().__init__(**kwargs)
        self.workers = []
        self.pending = []  # [gets_left, action, worker]
        self.register_after = register_after
        self.remove_after = remove_after
        for w in workers:
            self._add(dict(w))

    def _add(self, spec):
        worker = dict(
            id=str(uuid.uuid4()),
            url=spec['url'],
            worker_type=spec.get('worker_type', 'regular'),
            is_healthy=spec.get('is_healthy', True),
            bootstrap_port=spec.get('bootstrap_port') if spec.get('worker_type') == 'prefill' else None,
            model_id='glm-test',
            priority=50,
            cost=1.0,
            load=0,
            connection_mode='Http',
        )
        self.workers.append(worker)

    def _tick(self):
        still = []
        for item in self.pending:
            item[0] -= 1
            if item[0] > 0:
                still.append(item)
            elif item[1] == 'add':
                self._add(item[2])
            else:
                self.workers = [w for w in self.workers if w is not item[2]]
        self.pending = still

    def render(self, worker):
        return dict(worker)

    def route(self, request):
        path = request.path
        if request.method == 'GET' and path == '/workers':
            self._tick()
            stats = dict(('%s_count' % t, len([w for w in self.workers if w['worker_type'] == t]))
                         for t in ('prefill', 'decode', 'regular'))
            return Reply(200, dict(workers=[self.render(w) for w in self.workers], total=len(self.workers),
                                   stats=stats))
        if request.method == 'POST' and path == '/workers':
            spec = request.json()
            if spec.get('worker_type') not in ('prefill', 'decode', 'regular') or not spec.get('url'):
                return Reply(400, {'error': 'bad worker config'})
            if self.register_after == 0:
                self._add(spec)
            elif self.register_after is not None:
                self.pending.append([self.register_after + 1, 'add', spec])
            return Reply(202, dict(status='accepted', worker_id=spec['url'],
                                   message='Worker addition queued for background processing'))
        if request.method == 'DELETE' and path.startswith('/workers/'):
            worker = self.find(path[len('/workers/'):])
            if worker is None:
                return Reply(404, {'error': 'worker not found'})
            if self.remove_after == 0:
                self.workers.remove(worker)
            else:
                self.pending.append([self.remove_after + 1, 'remove', worker])
            return Reply(202, dict(status='accepted', worker_id=worker['id']))
        return super().route(request)

    def find(self, worker_id):
        for w in self.workers:
            if w['id'] == worker_id:
                return w
        return None

    def listed(self):
        return sorted((w['url'], w['worker_type']) for w in self.workers)


class RouterV024App(RouterV03App):
    """sglang-router 0.2.4: no ``id`` field, the id is the percent-encoded URL;
    worker_type nested (``{"Prefill": {"bootstrap_port": 8998}}``) or capitalised."""

    version = '0.2.4'

    def render(self, worker):
        if worker['worker_type'] == 'prefill':
            wtype = {'Prefill': {'bootstrap_port': worker['bootstrap_port']}}
        else:
            wtype = worker['worker_type'].capitalize()
        return dict(url=worker['url'], worker_type=wtype, is_healthy=worker['is_healthy'], load=0)

    def find(self, worker_id):
        # The id must arrive percent-encoded, exactly as quote(url, safe='').
        for w in self.workers:
            if quote(w['url'], safe='') == worker_id:
                return w
        return None

    def route(self, request):
        reply = super().route(request)
        if request.method == 'DELETE' and reply.status == 202:
            reply.status = 200
            reply.body = {'status': 'success', 'message': 'Worker %s removed' % unquote(request.path[9:])}
        return reply


class LegacyRouterApp(App):
    """sglang-router 0.1.x: only /list_workers, no worker types."""

    version = '0.1.9'

    def __init__(self, urls=(), **kwargs):
        super().__init__(**kwargs)
        self.urls = list(urls)

    def route(self, request):
        if request.method == 'GET' and request.path == '/list_workers':
            return Reply(200, {'urls': self.urls})
        return super().route(request)


# ---------------------------------------------------------------- chat
class ChatApp(App):
    """An OpenAI-compatible /v1/chat/completions with SSE streaming."""

    def __init__(self, model='glm-test', content='Hello from the fake server.', usage=True, status=200,
                 models=None, chunk_delay=0.0, delay=0.0, malformed=False, truncate=False, **kwargs):
        super().__init__(**kwargs)
        self.model = model
        self.content = content
        self.usage = usage
        self.status = status
        self.models = [model] if models is None else models
        self.chunk_delay = chunk_delay
        self.delay = delay
        self.malformed = malformed
        self.truncate = truncate

    def usage_for(self, body):
        prompt = sum(len(str(m.get('content', '')).split()) for m in body.get('messages', []))
        completion = len(self.content.split())
        return dict(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)

    def route(self, request):
        if request.method == 'GET' and request.path == '/v1/models':
            return Reply(200, dict(object='list', data=[dict(id=m, object='model', owned_by='sglang')
                                                        for m in self.models]))
        if request.method != 'POST' or request.path != '/v1/chat/completions':
            return super().route(request)
        if self.status != 200:
            return Reply(self.status, dict(object='error', message='x' * 2000, code=self.status))
        if self.malformed:
            return Reply(200, '{"id": "cmpl-1", "choices": [', delay=self.delay)
        body = request.json()
        if body.get('stream'):
            return Reply(200, content_type='text/event-stream', stream=self.sse(body), delay=self.delay)
        return Reply(200, dict(
            id='cmpl-1', object='chat.completion', created=0, model=self.model,
            choices=[dict(index=0, message=dict(role='assistant', content=self.content), finish_reason='length')],
            usage=self.usage_for(body) if self.usage else None,
        ), delay=self.delay)

    def _event(self, chunk):
        return ('data: %s\n\n' % json.dumps(chunk)).encode('utf-8')

    def sse(self, body):
        base = dict(id='cmpl-1', object='chat.completion.chunk', created=0, model=self.model)
        yield self._event(dict(base, choices=[dict(index=0, delta=dict(role='assistant', content=''),
                                                   finish_reason=None)], usage=None))
        words = self.content.split(' ')
        for i, word in enumerate(words):
            if self.chunk_delay:
                time.sleep(self.chunk_delay)
            piece = word if i == 0 else ' ' + word
            yield self._event(dict(base, choices=[dict(index=0, delta=dict(content=piece), finish_reason=None)],
                                   usage=None))
        if self.truncate:
            return
        yield self._event(dict(base, choices=[dict(index=0, delta=dict(), finish_reason='length')], usage=None))
        include = (body.get('stream_options') or {}).get('include_usage')
        if include and self.usage:
            yield self._event(dict(base, choices=[], usage=self.usage_for(body)))
        yield b'data: [DONE]\n\n'
