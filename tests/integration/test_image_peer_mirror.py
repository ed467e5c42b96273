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

import secrets
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.modules import image_pull
from module_runner import run_module
from peer_registries import REGISTRY, REPOSITORY_PATH, USER, Registry, TamperedPeer, TokenEndpoint, free_port, push_image

docker = pytest.importorskip('docker')
pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(REGISTRY is None, reason='needs docker-registry (scripts/setup installs it)')]


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
    repository, digest = push_image(engine, folder, central.address, password, layers=3, layer_bytes=256 * 1024)
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
    dead = '127.0.0.1:%d' % free_port()
    result = _pull(fleet, [dead])
    assert not result.get('failed'), result
    assert result['source'] == 'registry' and [error['mirror'] for error in result['mirror_errors']] == [dead]
    assert fleet['name'] in result['image']['repo_digests']


def test_mirrors_need_a_digest(fleet):
    result = run_module(image_pull, {'name': fleet['name'].split('@')[0] + ':t', 'mirrors': [fleet['proxy'].address]})
    assert result['failed'] and 'SGLPD-IMG-041' in result['msg']
