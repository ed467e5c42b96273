"""Registries for the image-from-peers tests and bench: the real docker-registry (central, proxy), a token endpoint, a tampered peer.

The central registry asks for a Bearer token, as Azure Container Registry does: the Distribution
registry's proxy mode logs in upstream only through a token endpoint (it does not answer Basic
challenges, as an htpasswd registry sends: distribution/distribution issue 3153), so the token
endpoint here checks the user and password and hands out tokens, and the central registry
(``auth: silly``) asks for one on every request. All on 127.0.0.1, where the engine allows plain HTTP.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

REGISTRY = shutil.which('docker-registry')
USER = 'peers'
# Pushed by the tests and the bench themselves, to their own central registry (not an image set-up builds).
REPOSITORY_PATH = 'peer-fanout/unified'


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _answers(address):
    try:
        with urllib.request.urlopen('http://%s/v2/' % address, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # 401: the central registry answers, it wants a login
    except OSError:
        return False


class Registry:
    """One docker-registry process on 127.0.0.1 (the engine allows plain HTTP to localhost registries)."""

    def __init__(self, folder, name, extra):
        self.address = '127.0.0.1:%d' % free_port()
        self.log = os.path.join(folder, name + '.log')
        self.config = os.path.join(folder, name + '.yml')
        config = {'version': 0.1, 'log': {'level': 'info'},
                  'storage': {'filesystem': {'rootdirectory': os.path.join(folder, name)}, 'delete': {'enabled': True}},
                  'http': {'addr': self.address}}
        config.update(extra)
        with open(self.config, 'w', encoding='utf-8') as handle:
            json.dump(config, handle)  # JSON is YAML
        os.chmod(self.config, 0o600)
        with open(self.log, 'wb') as log:
            self.process = subprocess.Popen([REGISTRY, 'serve', self.config], stdout=log, stderr=subprocess.STDOUT)
        for _attempt in range(50):
            if _answers(self.address):
                return
            time.sleep(0.1)
        raise AssertionError('docker-registry %s did not answer on %s' % (name, self.address))

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)

    def blob_bytes(self):
        """Bytes of blobs served (GET, 200), from the access log."""
        with open(self.log, encoding='utf-8', errors='replace') as handle:
            text = handle.read()
        return sum(int(size) for size in re.findall(
            r'"GET /v2/%s/blobs/sha256:[0-9a-f]{64} HTTP/1\.1" 200 (\d+) ' % re.escape(REPOSITORY_PATH), text))

    def blob_gets(self):
        """How many times each blob was served (GET, 200), from the access log."""
        with open(self.log, encoding='utf-8', errors='replace') as handle:
            text = handle.read()
        served = re.findall(r'"GET /v2/%s/blobs/(sha256:[0-9a-f]{64}) HTTP/1\.1" 200 ' % re.escape(REPOSITORY_PATH), text)
        return {digest: served.count(digest) for digest in set(served)}


class TokenEndpoint(http.server.ThreadingHTTPServer):
    """A token endpoint: a token for the right user and password (HTTP Basic), 401 for anything else."""

    def __init__(self, password):
        self.expected = 'Basic ' + base64.b64encode(('%s:%s' % (USER, password)).encode()).decode()
        self.granted = 0
        self.refused = 0
        super().__init__(('127.0.0.1', 0), TokenHandler)
        self.url = 'http://127.0.0.1:%d/token' % self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


class TokenHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.headers.get('Authorization') != self.server.expected:
            self.server.refused += 1
            self.send_response(401)
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        self.server.granted += 1
        body = json.dumps({'token': secrets.token_hex(16), 'expires_in': 300}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class TamperedPeer(http.server.ThreadingHTTPServer):
    """A peer that answers the right manifest (read from the honest proxy) and wrong bytes for every blob."""

    def __init__(self, honest):
        self.honest = honest
        self.blob_requests = 0
        super().__init__(('127.0.0.1', 0), TamperedHandler)
        self.address = '127.0.0.1:%d' % self.server_address[1]


class TamperedHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _answer(self, body, content_type='application/octet-stream', extra=None):
        self.send_response(200)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(body)))
        self.send_header('Docker-Distribution-API-Version', 'registry/2.0')
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        return body

    def _body(self):
        if '/blobs/' in self.path:
            self.server.blob_requests += 1
            return self._answer(secrets.token_bytes(4096))
        if '/manifests/' in self.path:
            request = urllib.request.Request('http://%s%s' % (self.server.honest, self.path),
                                             headers={'Accept': self.headers.get('Accept', '*/*')})
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
                return self._answer(body, response.headers['Content-Type'],
                                    {'Docker-Content-Digest': response.headers['Docker-Content-Digest']})
        return self._answer(b'{}', 'application/json')

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.wfile.write(self._body())

    def do_HEAD(self):  # noqa: N802
        self._body()


def push_image(engine, folder, central, password, layers, layer_bytes):
    """Build an image of LAYERS layers of random bytes, push it to the registry CENTRAL, remove it here.

    Returns (repository, digest): the engine no longer holds the image, so the next pull fetches it.
    """
    build = os.path.join(folder, 'build')
    os.makedirs(build, exist_ok=True)
    for index in range(layers):
        with open(os.path.join(build, 'layer%d' % index), 'wb') as handle:
            handle.write(secrets.token_bytes(layer_bytes))
    with open(os.path.join(build, 'Dockerfile'), 'w', encoding='utf-8') as handle:
        handle.write('FROM scratch\n' + ''.join('COPY layer%d /layer%d\n' % (index, index) for index in range(layers)))
    repository = '%s/%s' % (central, REPOSITORY_PATH)
    image = engine.images.build(path=build, tag=repository + ':t', rm=True)[0]
    digest = None
    for event in engine.api.push(repository, tag='t', stream=True, decode=True,
                                 auth_config={'username': USER, 'password': password}):
        if 'error' in event:
            raise RuntimeError(event['error'])
        digest = event.get('aux', {}).get('Digest', digest)
    if not digest:
        raise RuntimeError('the push returned no digest')
    engine.images.remove(image.id, force=True)
    return repository, digest
