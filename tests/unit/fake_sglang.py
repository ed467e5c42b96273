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


class SmgRouterApp(App):
    """SMG 1.13.0 (the ``smg`` package, successor of sglang-router), as observed on the real router.

    How it was observed: smg 1.13.0 installed from the package index into its own virtualenv,
    ``python -m smg.launch_router --pd-disaggregation --host 127.0.0.1 ... --prefill URL PORT
    --decode URL --worker-startup-check-interval 1`` against tests/standin prefill and decode
    servers on loopback, driven with curl and a 50 ms polling script (the same set-up as
    tests/integration/test_smg_router.py, which runs the module against it). It answered:

    * ``GET /workers``: ``{"workers": [...], "total": N, "stats": {"prefill_count": P,
      "decode_count": D, "regular_count": R}}``, each worker with ``id`` (a UUID), ``url``,
      ``worker_type``, ``is_healthy``, ``status`` (``ready``, or ``draining`` for about 5 s after
      its DELETE) and, for prefill only, ``bootstrap_port``. A worker whose registration still
      runs is NOT listed.
    * ``POST /workers``: 202 ``{"status": "accepted", "worker_id": ID, "url": URL, "location":
      "/workers/ID", "message": "Worker addition queued for background processing"}``. Again for a
      URL whose registration runs: 409 ``{"error": "Worker creation already in progress for URL
      'URL' with ID ID. Poll GET /workers/ID.", "code": "WORKER_CREATE_IN_PROGRESS"}``; for a
      registered URL: 409 ``WORKER_ALREADY_EXISTS``, naming the ID likewise.
    * ``GET /workers/{id}`` of a registration that runs: 200, a placeholder (``worker_type``
      ``regular`` whatever was posted, ``status`` ``pending``, ``is_healthy`` false) with
      ``"job_status": {"job_type": "AddWorker", "worker_url": URL, "status": "processing",
      "message": null, "timestamp": <unix s>}``. When the job fails (a worker that does not
      answer /health, once --worker-startup-timeout-secs has passed), 404 ``{"error": "Worker ID
      not found", "code": "WORKER_NOT_FOUND"}`` at once: no ``failed`` job_status ever showed, and
      the reason was only in the router's log (``Failed job: type=AddWorker, worker=URL, error=...``).
      An id that is not a UUID: 400 ``BAD_REQUEST``.
    * ``DELETE /workers/{id}`` of a listed worker: 202 ``{"status": "accepted", "worker_id": ID,
      "message": "Worker removal queued for background processing"}``; listed as ``draining``
      (``job_status`` RemoveWorker processing), then gone. Of a registration that runs: 202 as
      well, but its RemoveWorker job fails at once (``job_status`` RemoveWorker ``failed``, "Workflow
      failed at step find_workers_to_remove: Step failed: find_workers_to_remove - Worker URL not
      found", the placeholder still ``pending``) and the registration goes on: the worker was listed,
      under the same id, as soon as a server answered at its URL.
    * With ``--control-plane-api-keys id:name:role:key``: without a key 401 "Missing or invalid
      Authorization header", with an unknown key 401 "Invalid authentication token" (text/plain);
      a ``user`` key may GET, but POST and DELETE answer 403 "Admin role required for this control
      plane operation" (text/plain).

    Time is counted in ``GET /workers`` requests (like ``RouterV03App``): a registration ends with
    the ``register_after``-th one after its POST (never if None), with a listed worker unless its URL
    is in ``unreachable``; a removal ends with the ``remove_after``-th (at once if 0).
    ``registering`` are registrations already running when the fake starts. ``control_plane_keys``
    maps each key to its role.
    """

    version = '1.13.0'
    placeholder_type = 'regular'

    def __init__(self, workers=(), registering=(), unreachable=(), register_after=2, remove_after=1,
                 control_plane_keys=None):
        super().__init__()
        self.workers = []
        self.registrations = {}  # id -> {'spec', 'gets_left', 'job_status'}
        self.removals = {}  # id -> GET /workers left until the worker is gone
        self.unreachable = set(unreachable)
        self.register_after = register_after
        self.remove_after = remove_after
        self.control_plane_keys = control_plane_keys or {}
        for spec in workers:
            self._register(str(uuid.uuid4()), dict(spec))
        for spec in registering:
            self._start_registration(dict(spec))

    # -- auth
    def unauthorised(self, request):
        if not self.control_plane_keys:
            return None
        header = request.headers.get('Authorization') or ''
        if not header.startswith('Bearer '):
            return self._text(401, 'Missing or invalid Authorization header')
        role = self.control_plane_keys.get(header[len('Bearer '):])
        if role is None:
            return self._text(401, 'Invalid authentication token')
        if role != 'admin' and request.method != 'GET':
            return self._text(403, 'Admin role required for this control plane operation')
        return None

    @staticmethod
    def _text(status, text):
        return Reply(status, text, content_type='text/plain; charset=utf-8')

    # -- state
    @staticmethod
    def _job(job_type, url, status, message=None):
        return dict(job_type=job_type, worker_url=url, status=status, message=message, timestamp=int(time.time()))

    def _register(self, worker_id, spec):
        worker = dict(id=worker_id, model_id='glm-test', url=spec['url'], worker_type=spec.get('worker_type', 'regular'),
                      connection_mode='http', runtime_type='sglang', priority=50, cost=1.0, is_healthy=True,
                      status='ready', load=0, http2=False)
        if worker['worker_type'] == 'prefill':
            worker['bootstrap_port'] = spec.get('bootstrap_port')
        self.workers.append(worker)

    def _start_registration(self, spec):
        worker_id = str(uuid.uuid4())
        self.registrations[worker_id] = dict(spec=spec, gets_left=self.register_after,
                                             job_status=self._job('AddWorker', spec['url'], 'processing'))
        return worker_id

    def _end_registration(self, worker_id):
        registration = self.registrations.pop(worker_id)
        if registration['spec']['url'] not in self.unreachable:
            self._register(worker_id, registration['spec'])

    def _tick(self):
        for worker_id, registration in list(self.registrations.items()):
            if registration['gets_left'] is not None:
                registration['gets_left'] -= 1
                if registration['gets_left'] <= 0:
                    self._end_registration(worker_id)
        for worker_id in list(self.removals):
            self.removals[worker_id] -= 1
            if self.removals[worker_id] <= 0:
                self._drop(worker_id)

    def _drop(self, worker_id):
        self.removals.pop(worker_id, None)
        self.workers = [w for w in self.workers if w['id'] != worker_id]

    def registered(self, url):
        return next((w for w in self.workers if w['url'] == url), None)

    def registration_id(self, url):
        return next((i for i, r in self.registrations.items() if r['spec']['url'] == url), None)

    def listed(self):
        return sorted((w['url'], w['worker_type']) for w in self.workers)

    # -- answers
    def placeholder(self, worker_id):
        registration = self.registrations[worker_id]
        return dict(id=worker_id, url=registration['spec']['url'], worker_type=self.placeholder_type,
                    connection_mode='http', runtime_type='unspecified', priority=50, cost=1.0,
                    max_connection_attempts=20, is_healthy=False, status='pending', load=0, http2=False,
                    job_status=registration['job_status'])

    @staticmethod
    def not_found(worker_id):
        return Reply(404, {'error': 'Worker %s not found' % worker_id, 'code': 'WORKER_NOT_FOUND'})

    def route(self, request):
        if request.path == '/workers' and request.method == 'GET':
            self._tick()
            stats = dict(('%s_count' % t, len([w for w in self.workers if w['worker_type'] == t]))
                         for t in ('prefill', 'decode', 'regular'))
            return Reply(200, dict(workers=[dict(w) for w in self.workers], total=len(self.workers), stats=stats))
        if request.path == '/workers' and request.method == 'POST':
            return self.post(request.json())
        if request.path.startswith('/workers/'):
            worker_id = request.path[len('/workers/'):]
            try:
                uuid.UUID(worker_id)
            except ValueError:
                return Reply(400, {'error': "Invalid worker_id '%s' (expected UUID)." % worker_id, 'code': 'BAD_REQUEST'})
            if request.method == 'GET':
                return self.get(worker_id)
            if request.method == 'DELETE':
                return self.delete(worker_id)
        return super().route(request)

    def post(self, spec):
        worker = self.registered(spec['url'])
        if worker is not None:
            return Reply(409, {'error': "Worker already exists at URL '%s' with ID %s. Use PUT /workers/%s to replace "
                                        "or PATCH /workers/%s to update." % ((spec['url'],) + (worker['id'],) * 3),
                               'code': 'WORKER_ALREADY_EXISTS'})
        running = self.registration_id(spec['url'])
        if running is not None:
            return self.post_while_registering(running, spec)
        worker_id = self._start_registration(spec)
        return Reply(202, dict(status='accepted', worker_id=worker_id, url=spec['url'],
                               location='/workers/%s' % worker_id,
                               message='Worker addition queued for background processing'))

    def post_while_registering(self, worker_id, spec):
        return Reply(409, {'error': "Worker creation already in progress for URL '%s' with ID %s. Poll GET /workers/%s."
                                    % (spec['url'], worker_id, worker_id), 'code': 'WORKER_CREATE_IN_PROGRESS'})

    def get(self, worker_id):
        worker = next((w for w in self.workers if w['id'] == worker_id), None)
        if worker is not None:
            return Reply(200, dict(worker))
        if worker_id in self.registrations:
            return Reply(200, self.placeholder(worker_id))
        return self.not_found(worker_id)

    def delete(self, worker_id):
        worker = next((w for w in self.workers if w['id'] == worker_id), None)
        if worker is not None:
            worker.update(status='draining', is_healthy=False,
                          job_status=self._job('RemoveWorker', worker['url'], 'processing'))
            self.removals[worker_id] = self.remove_after
            if self.remove_after == 0:
                self._drop(worker_id)
        elif worker_id in self.registrations:
            url = self.registrations[worker_id]['spec']['url']
            self.registrations[worker_id]['job_status'] = self._job(
                'RemoveWorker', url, 'failed', 'Workflow failed at step find_workers_to_remove: Step failed: '
                'find_workers_to_remove - Worker %s not found' % url)
        else:
            return self.not_found(worker_id)
        return Reply(202, dict(status='accepted', worker_id=worker_id,
                               message='Worker removal queued for background processing'))


class RouterV032JobsApp(SmgRouterApp):
    """sglang-router 0.3.2 where it differs from ``SmgRouterApp``, as observed on the real router.

    Observed like ``SmgRouterApp`` (``python -m sglang_router.launch_router --pd-disaggregation``,
    sglang-router 0.3.2 from the package index, --worker-startup-timeout-secs 5): the 202 answer and
    ``GET /workers/{id}`` are shaped alike (its workers have no ``status`` field, which the module
    does not read), but the placeholder's ``worker_type`` is ``unknown``, a
    second POST of a URL whose registration runs answers 202 with the same id (no 409), and a failed
    registration stays on ``GET /workers/{id}`` with its reason: ``"job_status": {"job_type":
    "AddWorker", "status": "failed", "message": "Workflow failed at step detect_connection_mode: Step
    failed: detect_connection_mode - Both HTTP and gRPC health checks failed for URL: ..."}``.
    """

    version = '0.3.2'
    placeholder_type = 'unknown'

    def _end_registration(self, worker_id):
        registration = self.registrations[worker_id]
        url = registration['spec']['url']
        if url not in self.unreachable:
            super()._end_registration(worker_id)
            return
        registration['gets_left'] = None
        registration['job_status'] = self._job(
            'AddWorker', url, 'failed', 'Workflow failed at step detect_connection_mode: Step failed: '
            'detect_connection_mode - Both HTTP and gRPC health checks failed for %s: HTTP: Health check failed: '
            'error sending request for url (%s/health), gRPC: gRPC failed (tried SGLang and vLLM): gRPC connection '
            'failed: transport error' % (url, url))

    def post_while_registering(self, worker_id, spec):
        return Reply(202, dict(status='accepted', worker_id=worker_id, url=spec['url'],
                               location='/workers/%s' % worker_id,
                               message='Worker addition queued for background processing'))


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
