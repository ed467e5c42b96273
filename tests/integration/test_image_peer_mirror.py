"""The image from a peer: the real Distribution registry (Debian's docker-registry) twice, and this machine's engine.

A central registry with a login holds a small image of random layers; a second registry runs in
pull-through proxy mode with the central one's credentials in its own configuration only, as a
holder serves its peers (roles/sglang_image, serve_peers). The central registry asks for a
Bearer token, as Azure Container Registry does: the Distribution registry's proxy mode logs in
upstream only through a token endpoint (Basic challenges, as an htpasswd registry answers, are
not supported: distribution/distribution issue 3153), so a small token endpoint here checks the
user and password and hands out tokens, and the registry (``auth: silly``) asks for one on
every request. image_pull
pulls the image by digest through the proxy, again and again (the image removed in between),
and the central registry's access log shows each layer served once, to the proxy. A tampered
peer (a small HTTP server that answers the right manifest and wrong layer bytes) is refused by
the engine's digest check, and the pull goes on to the next mirror.
"""

from __future__ import annotations

import base64
import hashlib
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
import urllib.request

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.modules import image_pull
from module_runner import run_module

docker = pytest.importorskip('docker')
REGISTRY = shutil.which('docker-registry')
USER = 'peers'
REPOSITORY_PATH = 'sglang-pd-test/peer-image'
pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(REGISTRY is None, reason='needs docker-registry (scripts/setup installs it)')]


def _free_port():
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
        self.address = '127.0.0.1:%d' % _free_port()
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
        for _ in range(50):
            if _answers(self.address):
                return
            time.sleep(0.1)
        raise AssertionError('docker-registry %s did not answer on %s' % (name, self.address))

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)

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


@pytest.fixture(scope='module')
def engine():
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip('no Docker engine: %s' % exc)
    return client


@pytest.fixture(scope='module')
def fleet(tmp_path_factory, engine):
    """The central registry (login) holding the pushed image, and an honest pull-through proxy of it."""
    folder = str(tmp_path_factory.mktemp('peer-registries'))
    password = secrets.token_hex(16)
    tokens = TokenEndpoint(password)
    central = Registry(folder, 'central', {'auth': {'silly': {'realm': tokens.url, 'service': 'central'}}})
    proxy = Registry(folder, 'proxy', {'proxy': {'remoteurl': 'http://' + central.address, 'username': USER,
                                                 'password': password}})
    build = os.path.join(folder, 'build')
    os.makedirs(build)
    layers = []
    for index in range(3):
        content = secrets.token_bytes(256 * 1024)
        layers.append(hashlib.sha256(content).hexdigest())
        with open(os.path.join(build, 'layer%d' % index), 'wb') as handle:
            handle.write(content)
    with open(os.path.join(build, 'Dockerfile'), 'w', encoding='utf-8') as handle:
        handle.write('FROM scratch\n' + ''.join('COPY layer%d /layer%d\n' % (index, index) for index in range(3)))
    repository = '%s/%s' % (central.address, REPOSITORY_PATH)
    image, _ = engine.images.build(path=build, tag=repository + ':t', rm=True)
    auth = {'username': USER, 'password': password}
    digest = None
    for event in engine.api.push(repository, tag='t', stream=True, decode=True, auth_config=auth):
        assert 'error' not in event, event
        digest = event.get('aux', {}).get('Digest', digest)
    assert digest, 'the push returned no digest'
    engine.images.remove(image.id, force=True)
    yield {'central': central, 'proxy': proxy, 'name': repository + '@' + digest, 'password': password,
           'digest': digest, 'engine': engine, 'tokens': tokens}
    tokens.shutdown()
    for name in (repository + '@' + digest,):
        subprocess.run(['docker', 'image', 'rm', '-f', name], capture_output=True, check=False)
    proxy.stop()
    central.stop()


def _forget(fleet):
    """Remove every reference of the image from the engine, so that the next pull fetches it again."""
    engine = fleet['engine']
    try:
        image = engine.images.get(fleet['name'])
    except docker.errors.ImageNotFound:
        return
    engine.images.remove(image.id, force=True)


def _pull(fleet, mirrors):
    return run_module(image_pull, {'name': fleet['name'], 'username': USER, 'password': fleet['password'],
                                   'mirrors': mirrors, 'timeout': 120})


def _references(engine):
    return sorted(ref for image in engine.images.list() for ref in image.attrs.get('RepoDigests') or []
                  if REPOSITORY_PATH in ref)


def test_the_central_registry_serves_the_peer_once_however_many_pull_through_it(fleet):
    rounds = 4
    results = []
    for index in range(rounds):
        _forget(fleet)
        results.append(_pull(fleet, [fleet['proxy'].address]))
        if index == 0:
            first = fleet['central'].blob_gets()

    for result in results:
        assert not result.get('failed'), result
        assert result['changed'] is True and result['source'] == fleet['proxy'].address, result['mirror_errors']
        assert result['mirror_errors'] == []
        assert fleet['name'] in result['image']['repo_digests'], result
    # The pinned reference only: the peer's reference was removed.
    assert _references(fleet['engine']) == [fleet['name']]
    # The first pull through the proxy made it fetch every blob (3 layers and the config) from the central
    # registry: twice each, as measured here (docker-registry 2.8 in proxy mode reads a blob it does not hold
    # once for the client and once for its store). Every later pull was served from the proxy's store: the
    # central registry's count did not grow, and the later pulls read only the manifest there (recording the
    # pinned reference).
    assert len(first) == 4 and set(first.values()) <= {1, 2}, first
    assert fleet['central'].blob_gets() == first
    proxy = fleet['proxy'].blob_gets()
    assert len(proxy) == 4 and min(proxy.values()) >= rounds - 1 and max(proxy.values()) <= rounds, proxy
    assert fleet['tokens'].granted > 0 and fleet['tokens'].refused == 0


def test_the_peer_is_read_only(fleet):
    request = urllib.request.Request('http://%s/v2/%s/blobs/uploads/' % (fleet['proxy'].address, REPOSITORY_PATH),
                                     method='POST', data=b'')
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code in (401, 403, 405), refused.value.code


def test_a_tampered_peer_is_refused_and_the_next_one_serves(fleet):
    tampered = TamperedPeer(fleet['proxy'].address)
    thread = threading.Thread(target=tampered.serve_forever, daemon=True)
    thread.start()
    try:
        _forget(fleet)
        result = _pull(fleet, [tampered.address, fleet['proxy'].address])
    finally:
        tampered.shutdown()
    assert not result.get('failed'), result
    assert tampered.blob_requests > 0, 'the tampered peer was never asked for a layer'
    assert [error['mirror'] for error in result['mirror_errors']] == [tampered.address], result
    assert 'verif' in result['mirror_errors'][0]['error'].lower() or 'digest' in result['mirror_errors'][0]['error'].lower()
    assert result['source'] == fleet['proxy'].address
    assert fleet['name'] in result['image']['repo_digests']
    assert _references(fleet['engine']) == [fleet['name']]


def test_without_a_peer_that_serves_the_registry_does(fleet):
    _forget(fleet)
    dead = '127.0.0.1:%d' % _free_port()
    result = _pull(fleet, [dead])
    assert not result.get('failed'), result
    assert result['source'] == 'registry' and [error['mirror'] for error in result['mirror_errors']] == [dead]
    assert fleet['name'] in result['image']['repo_digests']


def test_mirrors_need_a_digest(fleet):
    result = run_module(image_pull, {'name': fleet['name'].split('@')[0] + ':t', 'mirrors': [fleet['proxy'].address]})
    assert result['failed'] and 'SGLPD-IMG-041' in result['msg']
