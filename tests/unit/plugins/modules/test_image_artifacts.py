# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""image_artifacts against the real Docker engine, with tiny images made by ``docker import``.

No image is pulled: images are imported from tarballs built here, and everything the tests
create is removed at the end. The one image with several layers (whiteouts, an opaque directory,
symlinks) is built from a Dockerfile on the base image set-up builds; only its RUN steps start
containers (the builder's, without network).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import threading
import uuid
from pathlib import Path

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _artifact_checks as checks
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _image_artifacts as ia
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _image_verify
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._image_layers import (
    LayerReader,
    LayersUnavailable,
    docker_abs_path,
    image_layer_dirs,
    local_socket_path,
)
from ansible_collections.mindverse.sglang_pd.plugins.modules import image_artifacts
from image_names import image_exists, setup_image
from module_runner import run_module

docker = pytest.importorskip('docker')

SITE = '/opt/venv/lib/python3.10/site-packages'
ROUTER = SITE + '/sglang_router'
ROUTER_PY = ROUTER + '/router.py'
ROUTER_SO = ROUTER + '/sglang_router_rs.abi3.so'
ENGINE_SO = SITE + '/mooncake/engine.cpython-310-x86_64-linux-gnu.so'
POOL_PY = SITE + '/sglang/srt/mem_cache/cp_layersplit_pool.py'


def md5(data):
    return hashlib.md5(data).hexdigest()


def blob(seed, size):
    return random.Random(seed).randbytes(size)


# The two source images of the unified build, in miniature. BASE's router.py
# uses the new keyword; CA's does not; their .so files differ.
BASE_FILES = {
    ROUTER_PY: (b'from sglang_router_rs import Router as _Router\n'
                b'class Router:\n'
                b'    def __init__(self, prefill_group_ids=None):\n'
                b'        self._r = _Router(prefill_group_ids=prefill_group_ids)\n'),
    ROUTER + '/launch_router.py': b'# base launch_router\n',
    ROUTER + '/mini_lb.py': b'# base mini_lb\n',
    ROUTER + '/router_args.py': b'# base router_args: prefill_group_ids\n',
    ROUTER_SO: blob('base-router-so', 300_000),
    ROUTER + '/base_only.py': b'# only in BASE\n',
    ROUTER + '/base_only_dir/helper.py': b'# only in BASE, in a sub-directory\n',
    ENGINE_SO: blob('official-engine', 200_000),
    POOL_PY: b'# cp layer-split pool\n' * 50,
    SITE + '/engine_link.so': ('symlink', 'mooncake/engine.cpython-310-x86_64-linux-gnu.so'),
}
CA_FILES = {
    ROUTER_PY: (b'from sglang_router_rs import Router as _Router\n'
                b'class Router:\n'
                b'    def __init__(self):\n'
                b'        self._r = _Router()\n'),
    ROUTER + '/launch_router.py': b'# cache-aware launch_router\n',
    ROUTER + '/mini_lb.py': b'# cache-aware mini_lb\n',
    ROUTER + '/router_args.py': b'# cache-aware router_args\n',
    ROUTER_SO: blob('ca-router-so', 420_000),
    ROUTER + '/ca_only.py': b'# only in CA\n',
    ENGINE_SO: blob('ca-engine', 100_000),
}
ENGINE_V3 = blob('engine-v3', 250_000)


def image_tar(files):
    """A tarball of ``files`` with every parent directory (root-owned)."""
    buf = io.BytesIO()
    dirs = set()
    for path in files:
        parts = path.strip('/').split('/')[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add('/'.join(parts[:i]))
    with tarfile.open(fileobj=buf, mode='w') as out:
        for name in sorted(dirs):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            out.addfile(info)
        for path, content in sorted(files.items()):
            info = tarfile.TarInfo(path.strip('/'))
            if content is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                out.addfile(info)
            elif isinstance(content, tuple):
                info.type = tarfile.SYMTYPE
                info.linkname = content[1]
                out.addfile(info)
            else:
                info.size = len(content)
                info.mode = 0o755 if path.endswith('.so') else 0o644
                out.addfile(info, io.BytesIO(content))
    return buf.getvalue()


class ImageFactory:
    """Imports images from tarballs and removes everything it made."""

    def __init__(self, client):
        self.client = client
        self.repository = 'sglang-pd-unit/%s' % uuid.uuid4().hex[:12]
        self.ids = set()
        self.count = 0

    def make(self, files, changes=None, tag=None):
        self.count += 1
        tag = tag or 'img%d' % self.count
        self.client.api.import_image_from_data(
            image_tar(files), repository=self.repository, tag=tag, changes=changes)
        ref = '%s:%s' % (self.repository, tag)
        self.track(self.client.images.get(ref).id)
        return ref

    def ref(self, tag):
        return '%s:%s' % (self.repository, tag)

    def track(self, image_id):
        if image_id:
            self.ids.add(image_id)

    def transient_containers(self):
        """Containers made from this factory's images (the modules must leave none)."""
        for image in self.client.images.list(name=self.repository):
            self.ids.add(image.id)
        found = self.client.containers.list(all=True)
        return [c for c in found if c.attrs.get('Image') in self.ids]

    def cleanup(self):
        for image in self.client.images.list(name=self.repository):
            self.ids.add(image.id)
        for container in self.transient_containers():
            container.remove(force=True)
        # Children first: newest images were built on top of older ones.
        for image_id in sorted(self.ids, key=self._created, reverse=True):
            try:
                self.client.images.remove(image_id, force=True, noprune=False)
            except docker.errors.NotFound:
                pass

    def _created(self, image_id):
        try:
            return self.client.images.get(image_id).attrs.get('Created', '')
        except docker.errors.NotFound:
            return ''


@pytest.fixture(scope='module')
def docker_client():
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # pylint: disable=broad-except
        pytest.skip('no Docker daemon answers: %s' % exc)
    yield client
    client.close()


@pytest.fixture(scope='module')
def images(docker_client):
    factory = ImageFactory(docker_client)
    factory.make(BASE_FILES, changes=['CMD ["/bin/sh"]', 'ENV FOO=bar'], tag='base')
    factory.make(CA_FILES, changes=['CMD ["/bin/sh"]'], tag='ca')
    tampered = dict(BASE_FILES)
    flipped = bytearray(ENGINE_V3)
    flipped[1234] ^= 0x01
    tampered[ENGINE_SO] = bytes(flipped)
    good = dict(BASE_FILES)
    good[ENGINE_SO] = ENGINE_V3
    factory.make(good, tag='good')
    factory.make(tampered, tag='tampered')
    factory.make(BASE_FILES, tag='nocmd')
    v1 = dict(BASE_FILES)
    v1[ROUTER_SO] = CA_FILES[ROUTER_SO]  # the failed v1 recipe: only the .so replaced
    factory.make(v1, changes=['CMD ["/bin/sh"]'], tag='v1')
    yield factory
    factory.cleanup()
    assert not docker_client.images.list(name=factory.repository)


@pytest.fixture(params=['auto', 'archive'])
def read_via(request):
    """Run a test once with each way of reading: the layers where possible, and the archive API."""
    return request.param


def verify(images, tag, artifacts, tmp_path, **extra):
    check_mode = extra.pop('_check', False)
    args = dict(image=images.ref(tag), artifacts=artifacts, cache_dir=str(tmp_path / 'cache'))
    args.update(extra)
    return run_module(image_artifacts, args, check_mode=check_mode)


# ---------------------------------------------------------------- pure helpers

@pytest.mark.parametrize('value, algorithm, expected', [
    ('0E1B8FDD2D39E007B58C3E1711EC398B', 'md5', '0e1b8fdd2d39e007b58c3e1711ec398b'),
    ('84946bbb', 'md5', '84946bbb'),
    ('84946bbb...', 'md5', '84946bbb'),
    ('84946bbb\u2026', 'md5', '84946bbb'),
    ('sha256:2d7471420f60', 'sha256', '2d7471420f60'),
])
def test_normalize_digest_accepts(value, algorithm, expected):
    assert checks.normalize_digest(value, algorithm) == expected


@pytest.mark.parametrize('value, algorithm', [
    ('8494', 'md5'),                   # shorter than 8
    ('84946bbz', 'md5'),               # not hex
    ('0' * 33, 'md5'),                 # longer than md5
    ('', 'md5'),
    ('...', 'sha256'),
])
def test_normalize_digest_refuses(value, algorithm):
    with pytest.raises(checks.ArtifactError, match='at least 8 hex'):
        checks.normalize_digest(value, algorithm)


def grep_c(data, pattern):
    lines = data.split(b'\n')
    if lines and lines[-1] == b'':
        lines.pop()
    return sum(1 for line in lines if pattern in line)


@pytest.mark.parametrize('seed', range(40))
def test_line_match_counter_equals_grep_c_for_any_chunking(seed):
    rnd = random.Random(seed)
    pattern = rnd.choice([b'ab', b'prefill_group_ids', b'a', b'xyzxyz'])
    alphabet = b'ab\nxyz_' + pattern
    data = bytes(rnd.choice(alphabet) for dummy in range(rnd.randint(0, 3000)))
    if rnd.random() < 0.5:
        data += pattern  # match on a last line without newline
    counter = checks.LineMatchCounter(pattern)
    pos = 0
    while pos < len(data):
        step = rnd.randint(1, 40)
        counter.update(data[pos:pos + step])
        pos += step
    assert counter.finish() == grep_c(data, pattern)


def test_prefetcher_blocks_chunks_and_keeps_order():
    chunks = [bytes([i % 256]) * 100_000 for i in range(40)]
    assert b''.join(ia.Prefetcher(iter(chunks))) == b''.join(chunks)


def test_prefetcher_raises_the_producer_error():
    def broken():
        yield b'x' * 10
        raise OSError('connection reset')

    with pytest.raises(OSError, match='connection reset'):
        list(ia.Prefetcher(broken()))


def test_prefetcher_close_stops_an_endless_stream():
    closed = []

    def endless():
        while True:
            yield b'y' * 65536

    prefetch = ia.Prefetcher(endless(), close=lambda: closed.append(True))
    next(iter(prefetch))
    # close() returning is the claim (an endless stream that it did not stop would hold it forever);
    # the join's timeout is only the safety net.
    closer = threading.Thread(target=prefetch.close, daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive() and closed == [True]


def test_manifest_errors_are_reported_together_before_reading():
    with pytest.raises(checks.ArtifactError) as err:
        checks.normalize_manifest([
            dict(path='relative/file', md5=None),
            dict(path='/a', md5='1234'),
            dict(path='/b', state='absent', md5='0e1b8fdd'),
            dict(path='/c', text_count=[dict(pattern='', count=0)]),
        ])
    text = str(err.value)
    for needle in ('relative/file', "/a: expected md5 '1234'", '/b: state=absent', '/c: text_count'):
        assert needle in text


# ---------------------------------------------------------------- against Docker

@pytest.mark.docker
def test_full_and_prefix_md5_and_sha256(images, tmp_path, read_via):
    so = CA_FILES[ROUTER_SO]
    result = verify(images, 'ca', [
        dict(path=ROUTER_SO, md5=md5(so)),
        dict(path=ROUTER_SO, md5=md5(so)[:8] + '...', sha256=hashlib.sha256(so).hexdigest()),
        dict(path=ROUTER + '/ca_only.py'),
    ], tmp_path, read_via=read_via)
    assert result['passed'] is True and not result.get('failed')
    full, prefix, present = result['artifacts']
    assert (full['match'], prefix['match'], present['match']) == ('full', 'prefix', 'present')
    assert full['md5'] == md5(so) and full['size'] == len(so)
    assert prefix['sha256'] == hashlib.sha256(so).hexdigest()
    assert present['md5'] == md5(CA_FILES[ROUTER + '/ca_only.py'])
    assert result['changed'] is False and result['cached'] is False


@pytest.mark.docker
def test_tampered_byte_fails_naming_file_expected_and_found(images, tmp_path, read_via):
    tampered = bytearray(ENGINE_V3)
    tampered[1234] ^= 0x01
    result = verify(images, 'tampered', [dict(path=ENGINE_SO, md5=md5(ENGINE_V3))], tmp_path, read_via=read_via)
    assert result['failed'] is True and result['passed'] is False
    assert ENGINE_SO in result['msg']
    assert md5(ENGINE_V3) in result['msg'] and md5(bytes(tampered)) in result['msg']
    assert result['failures'] == ['%s: md5 expected %s, found %s.' % (
        ENGINE_SO, md5(ENGINE_V3), md5(bytes(tampered)))]
    assert result['artifacts'][0]['match'] == 'mismatch'
    good = verify(images, 'good', [dict(path=ENGINE_SO, md5=md5(ENGINE_V3))], tmp_path, read_via=read_via)
    assert good['passed'] is True


@pytest.mark.docker
def test_absent_and_unexpected_files(images, tmp_path, read_via):
    result = verify(images, 'ca', [
        dict(path=ROUTER + '/base_only.py', state='absent'),
        dict(path=POOL_PY, md5='485081e3'),
        dict(path=ROUTER + '/ca_only.py', state='absent'),
    ], tmp_path, read_via=read_via, fail_on_mismatch=False)
    assert result.get('failed') is None and result['passed'] is False
    removed, missing, unexpected = result['artifacts']
    assert removed['match'] == 'removed' and removed['ok'] is True
    assert missing['match'] == 'absent' and missing['present'] is False
    assert unexpected['match'] == 'unexpected'
    assert result['failures'] == [
        '%s: expected present with md5 485081e3, found no such file in the image.' % POOL_PY,
        '%s: expected absent, found a file of %d bytes in the image.' % (
            ROUTER + '/ca_only.py', len(CA_FILES[ROUTER + '/ca_only.py'])),
    ]


@pytest.mark.docker
def test_text_count_like_grep_c(images, tmp_path, read_via):
    check = [dict(path=ROUTER_PY, text_count=[dict(pattern='prefill_group_ids', count=0)])]
    base = verify(images, 'base', check, tmp_path, read_via=read_via)
    assert base['failed'] is True
    assert base['failures'] == [
        "%s: lines containing 'prefill_group_ids' expected 0, found 2." % ROUTER_PY]
    ca = verify(images, 'ca', check, tmp_path, read_via=read_via)
    assert ca['passed'] is True
    assert ca['artifacts'][0]['text_counts'] == [
        dict(pattern='prefill_group_ids', expected=0, found=0, ok=True)]


def unified_manifest():
    """What the unified_image role checks: CA's router package, no new keyword."""
    return [
        dict(path=ROUTER_PY, md5=md5(CA_FILES[ROUTER_PY]),
             text_count=[dict(pattern='prefill_group_ids', count=0)]),
        dict(path=ROUTER_SO, md5=md5(CA_FILES[ROUTER_SO])),
        dict(path=ROUTER + '/router_args.py', md5=md5(CA_FILES[ROUTER + '/router_args.py'])),
    ]


@pytest.mark.docker
def test_v1_style_build_is_caught(images, tmp_path, read_via):
    result = verify(images, 'v1', unified_manifest(), tmp_path, read_via=read_via)
    assert result['failed'] is True
    by_path = dict((a['path'], a) for a in result['artifacts'])
    assert by_path[ROUTER_SO]['match'] == 'full'  # the .so alone looks right ...
    assert by_path[ROUTER_PY]['match'] == 'mismatch'  # ... the wrapper does not
    assert by_path[ROUTER_PY]['text_counts'][0]['found'] == 2
    assert by_path[ROUTER + '/router_args.py']['match'] == 'mismatch'
    assert "%s: lines containing 'prefill_group_ids' expected 0, found 2." % ROUTER_PY in result['failures']
    assert ROUTER_PY in result['msg']


@pytest.mark.docker
def test_symlink_is_followed_and_directory_cannot_be_hashed(images, tmp_path, read_via):
    result = verify(images, 'good', [
        dict(path=SITE + '/engine_link.so', md5=md5(ENGINE_V3)),
        dict(path=ROUTER, md5='0e1b8fdd'),
        dict(path=ROUTER),
    ], tmp_path, read_via=read_via, fail_on_mismatch=False)
    link, hashed_dir, plain_dir = result['artifacts']
    assert link['match'] == 'full' and link['link_target'] == ENGINE_SO
    assert hashed_dir['match'] == 'not_file' and 'found a directory' in result['failures'][0]
    assert plain_dir['match'] == 'present' and plain_dir['type'] == 'directory'
    assert len(result['failures']) == 1


@pytest.mark.docker
def test_image_without_cmd_is_read_with_placeholder(images, tmp_path, read_via):
    result = verify(images, 'nocmd', [dict(path=ROUTER_SO, md5=md5(BASE_FILES[ROUTER_SO]))], tmp_path, read_via=read_via)
    assert result['passed'] is True


@pytest.mark.docker
def test_cache_hit_skips_the_image(images, tmp_path, monkeypatch):
    check = [dict(path=ROUTER_SO, md5=md5(CA_FILES[ROUTER_SO])),
             dict(path=ROUTER_PY, text_count=[dict(pattern='prefill_group_ids', count=0)])]
    first = verify(images, 'ca', check, tmp_path)
    assert first['cached'] is False and first['passed'] is True

    def no_container(*args, **kwargs):
        raise AssertionError('a cached verification must not create a container')

    monkeypatch.setattr(ia, 'create_transient_container', no_container)
    second = verify(images, 'ca', check, tmp_path)
    assert second['cached'] is True and second['artifacts'] == first['artifacts']
    assert first['read_via'] in ('layers', 'archive') and second['read_via'] is None
    assert second['cache_path'] == first['cache_path']
    # Another manifest is another cache entry.
    monkeypatch.undo()
    other = verify(images, 'ca', check[:1], tmp_path)
    assert other['cached'] is False and other['cache_path'] != first['cache_path']
    # use_cache=false reads the image again.
    again = verify(images, 'ca', check, tmp_path, use_cache=False)
    assert again['cached'] is False


@pytest.mark.docker
def test_check_mode_reads_but_does_not_write_cache(images, tmp_path):
    check = [dict(path=ROUTER_SO, md5=md5(CA_FILES[ROUTER_SO]))]
    result = verify(images, 'ca', check, tmp_path, _check=True)
    assert result['passed'] is True and result['changed'] is False
    assert not (tmp_path / 'cache').exists()


@pytest.mark.docker
def test_failed_result_is_cached_too(images, tmp_path, read_via):
    check = [dict(path=ENGINE_SO, md5=md5(ENGINE_V3))]
    first = verify(images, 'tampered', check, tmp_path, read_via=read_via)
    second = verify(images, 'tampered', check, tmp_path, read_via=read_via)
    assert first['failed'] and second['failed'] and second['cached'] is True
    assert second['failures'] == first['failures']


@pytest.mark.docker
def test_unwritable_cache_dir_warns_and_carries_on(images, tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    result = verify(images, 'ca', [dict(path=ROUTER_SO)], tmp_path, cache_dir=str(blocker / 'cache'))
    assert result['passed'] is True


@pytest.mark.docker
def test_invalid_manifest_fails_before_docker(images, tmp_path, monkeypatch):
    monkeypatch.setattr(image_artifacts, 'verify_image', lambda *a, **k: pytest.fail('Docker was contacted'))
    result = verify(images, 'ca', [dict(path=ROUTER_SO, md5='8494')], tmp_path)
    assert result['failed'] is True and 'at least 8 hex' in result['msg']


@pytest.mark.docker
def test_missing_image_fails_with_advice(images, tmp_path):
    result = verify(images, 'no-such-tag', [dict(path=ROUTER_SO)], tmp_path)
    assert result['failed'] is True
    assert 'not present on this Docker host' in result['msg'] and 'pull it first' in result['msg']


@pytest.mark.docker
def test_no_transient_container_is_left(images):
    assert images.transient_containers() == []


# ---------------------------------------------------------------- layers and archive, side by side

# Docker's path rules (ResolvePath): cleaned, a trailing '/' or '/.' kept.
@pytest.mark.parametrize('path, expected', [
    ('/', '/'),
    ('//data//sub/x.txt', '/data/sub/x.txt'),
    ('/data/../..', '/'),
    ('/usr/bin/..', '/usr'),
    ('/data/', '/data/'),
    ('/data/.', '/data/.'),
    ('/data/./', '/data/./'),
    ('/.', '/.'),
])
def test_docker_abs_path(path, expected):
    assert docker_abs_path(path) == expected


@pytest.mark.parametrize('docker_host, environ, expected', [
    (None, None, '/var/run/docker.sock'),
    ('unix:///run/user/1000/docker.sock', None, '/run/user/1000/docker.sock'),
    (None, 'unix:///srv/docker.sock', '/srv/docker.sock'),
    ('tcp://10.0.0.5:2376', None, None),
    (None, 'ssh://node-1', None),
])
def test_local_socket_path(monkeypatch, docker_host, environ, expected):
    if environ is None:
        monkeypatch.delenv('DOCKER_HOST', raising=False)
    else:
        monkeypatch.setenv('DOCKER_HOST', environ)
    assert local_socket_path(docker_host) == expected


A_V1 = blob('layer-a-v1', 300_000)
A_V2 = blob('layer-a-v2', 9 * 1024 * 1024 + 123)  # more than two read buffers
KEPT_TXT = b'alpha prefill_group_ids\nbeta\nprefill_group_ids gamma'
# Layer 1 writes A and B; layer 2 replaces A; layer 3 deletes B, removes and recreates
# /data/opaque (an opaque directory) and adds symlinks; layer 4 adds to the opaque directory.
LAYERED_DOCKERFILE = """FROM {base}
COPY layer1/ /data/
COPY layer2/ /data/
RUN rm /data/b.txt \
 && rm -rf /data/opaque && mkdir /data/opaque && printf 'new\\n' > /data/opaque/new.txt \
 && ln -s ../data/a.bin /data/link-a && ln -s /data/a.bin /data/abs-link && ln -s link-a /data/link-chain \
 && ln -s /data/opaque /data/opaque-link && ln -s ../../../../data/kept.txt /data/up-link \
 && ln -s nowhere /data/dangling && ln -s loop /data/loop
RUN printf 'later\\n' > /data/opaque/later.txt
"""
LAYERED_CONTEXT = {
    '/layer1/a.bin': A_V1,
    '/layer1/b.txt': b'file B\n',
    '/layer1/kept.txt': KEPT_TXT,
    '/layer1/opaque/old.txt': b'old\n',
    '/layer1/opaque/keep.txt': b'hidden by the opaque directory\n',
    '/layer1/sub/x.txt': b'x\n',
    '/layer2/a.bin': A_V2,
}
LAYERED_MANIFEST = [
    dict(path='/data/a.bin', md5=md5(A_V2)),
    dict(path='/data/b.txt', md5=md5(b'file B\n')),
    dict(path='/data/b.txt', state='absent'),
    dict(path='/data/kept.txt', text_count=[dict(pattern='prefill_group_ids', count=2)]),
    dict(path='/data/opaque/old.txt', state='absent'),
    dict(path='/data/opaque/keep.txt'),
    dict(path='/data/opaque/new.txt', md5=md5(b'new\n')),
    dict(path='/data/opaque/later.txt', md5=md5(b'later\n')),
    dict(path='/data/opaque'),
    dict(path='/data/link-a', md5=md5(A_V2)),
    dict(path='/data/abs-link', md5=md5(A_V2)),
    dict(path='/data/link-chain', md5=md5(A_V2)),
    dict(path='/data/opaque-link'),
    dict(path='/data/opaque-link/new.txt', md5=md5(b'new\n')),
    dict(path='/data/up-link', md5=md5(KEPT_TXT)),
    dict(path='/data/dangling'),
    dict(path='/data/sub/x.txt', md5=md5(b'x\n')),
    dict(path='/etc/os-release'),
    dict(path='/bin/sh'),
]
# Every way a path can go: through symlinks, whiteouts, the opaque directory, and paths
# Docker refuses (an element that is not a directory, a symlink loop).
STAT_PATHS = sorted({a['path'] for a in LAYERED_MANIFEST} | {
    '/', '/data', '/data/', '/data/.', '/data/opaque/', '/data/opaque-link/', '/data/opaque-link/.',
    '/data/opaque-link/../kept.txt', '/data/../data/sub/./x.txt', '//data//sub/x.txt', '/data/nope',
    '/data/nope/x', '/data/dangling/', '/data/loop', '/data/loop/x', '/data/a.bin/', '/data/a.bin/x',
    '/data/a.bin/x/y', '/bin', '/bin/', '/usr/bin/..',
})


@pytest.fixture(scope='module')
def layered_image(docker_client):
    """An image of several layers on the base image that set-up builds; removed afterwards."""
    base = setup_image('SGLANG_PD_BASE_IMAGE')
    if not image_exists(base):
        pytest.skip('the base image %s is not on this Docker host (make setup builds it)' % base)
    context = dict(LAYERED_CONTEXT, **{'/Dockerfile': LAYERED_DOCKERFILE.format(base=base).encode()})
    tag = 'pd-artifacts-test-layers:%s' % uuid.uuid4().hex[:12]
    image, dummy = docker_client.images.build(
        fileobj=io.BytesIO(image_tar(context)), custom_context=True, tag=tag,
        pull=False, rm=True, forcerm=True, network_mode='none')
    yield tag
    docker_client.images.remove(image.id, force=True)
    assert not docker_client.images.list(name=tag)


@pytest.fixture(scope='module')
def layer_reader(docker_client, layered_image):
    """A LayerReader over the layered image; the test is skipped when the layers cannot be read."""
    if local_socket_path() is None:
        pytest.skip('the Docker daemon is not on a local unix socket')
    try:
        return LayerReader(image_layer_dirs(docker_client.api.inspect_image(layered_image)))
    except LayersUnavailable as exc:
        pytest.skip('the image layers cannot be read here: %s' % exc)


def by_index(result):
    """The artifacts of a module result, by the path of their manifest entry (absent ones marked)."""
    return dict(('%s:%s' % (a['path'], a['state']), a) for a in result['artifacts'])


@pytest.mark.docker
def test_layers_and_archive_give_the_same_results(layered_image, layer_reader):
    args = dict(image=layered_image, artifacts=LAYERED_MANIFEST, cache_dir='', compute_sha256=True,
                fail_on_mismatch=False)
    layers = run_module(image_artifacts, dict(args, read_via='auto'))
    archive = run_module(image_artifacts, dict(args, read_via='archive'))
    assert (layers['read_via'], archive['read_via']) == ('layers', 'archive')
    assert layers['artifacts'] == archive['artifacts']
    assert layers['failures'] == archive['failures'] == [
        '/data/b.txt: expected present with md5 %s, found no such file in the image.' % md5(b'file B\n'),
        '/data/opaque/keep.txt: expected present, found no such file in the image.',
        '/data/dangling: expected present, found a dangling symlink to /data/nowhere in the image.',
    ]
    found = by_index(layers)
    assert found['/data/a.bin:present']['size'] == len(A_V2)  # layer 2 replaced layer 1's A
    assert found['/data/a.bin:present']['sha256'] == hashlib.sha256(A_V2).hexdigest()
    assert found['/data/b.txt:absent']['match'] == 'removed'  # deleted in layer 3 (a whiteout)
    assert found['/data/opaque/old.txt:absent']['match'] == 'removed'  # under the opaque directory
    assert found['/data/opaque/later.txt:present']['match'] == 'full'  # layer 4 merges over layer 3
    assert found['/data/kept.txt:present']['text_counts'][0]['found'] == 2
    assert [found['/data/%s:present' % n]['link_target'] for n in ('link-a', 'abs-link', 'link-chain')] \
        == ['/data/a.bin'] * 3
    assert found['/data/up-link:present']['link_target'] == '/data/kept.txt'  # '..' stops at the root
    assert found['/data/opaque-link:present']['type'] == 'directory'
    assert found['/data/dangling:present']['type'] == 'dangling symlink'
    assert found['/bin/sh:present']['link_target'] == '/usr/bin/dash'


def stat_or_error(stat, path, errors):
    """``stat(path)``, or 'error' when it raises one of ``errors``."""
    try:
        return stat(path)
    except errors:
        return 'error'


@pytest.mark.docker
def test_layer_stat_answers_as_the_archive_api(docker_client, layered_image, layer_reader):
    container_id = ia.create_transient_container(docker_client, ia.get_local_image(docker_client, layered_image))
    try:
        archive = ia.ArchiveReader(docker_client, container_id)
        expected = dict((p, stat_or_error(archive.stat, p, docker.errors.DockerException)) for p in STAT_PATHS)
    finally:
        ia.remove_container(docker_client, container_id)
    found = dict((p, stat_or_error(layer_reader.stat, p, checks.ArtifactError)) for p in STAT_PATHS)
    # '/' is the one path where the container's own top layer answers.
    for stats in (expected, found):
        stats['/'].pop('size')
    assert found == expected
    assert expected['/data/loop'] == expected['/data/a.bin/x'] == 'error'


@pytest.mark.docker
@pytest.mark.parametrize('path', ['/data/loop', '/data/a.bin/x'])
def test_paths_docker_refuses_fail_both_ways(layered_image, layer_reader, read_via, path):
    result = run_module(image_artifacts, dict(image=layered_image, artifacts=[dict(path=path)],
                                              cache_dir='', read_via=read_via))
    assert result['failed'] is True and 'passed' not in result


COLLECTIONS = str(Path(image_artifacts.__file__).parents[5])
PROCESS = """import atexit, sys
atexit.register(lambda: sys.stderr.write('docker SDK imported: %s\\n' % ('docker' in sys.modules)))
from ansible_collections.mindverse.sglang_pd.plugins.modules import image_artifacts
image_artifacts.main()
"""


def run_module_process(args, tmp_path):
    """Run the module in its own Python process, as Ansible does; return (result, SDK imported)."""
    args_file = tmp_path / 'args.json'
    args_file.write_text(json.dumps(dict(ANSIBLE_MODULE_ARGS=args)), encoding='utf-8')
    done = subprocess.run([sys.executable, '-c', PROCESS, str(args_file)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS), check=False, timeout=300)
    return json.loads(done.stdout), 'docker SDK imported: True' in done.stderr


@pytest.mark.docker
def test_layers_and_cache_need_no_docker_sdk(layered_image, layer_reader, tmp_path):
    args = dict(image=layered_image, artifacts=[dict(path='/data/link-a', md5=md5(A_V2))],
                cache_dir=str(tmp_path / 'cache'))
    first, first_sdk = run_module_process(args, tmp_path)
    cached, cached_sdk = run_module_process(args, tmp_path)
    archive, archive_sdk = run_module_process(dict(args, read_via='archive', use_cache=False), tmp_path)
    assert first['passed'] and cached['passed'] and archive['passed']
    assert (first['read_via'], first['cached'], first_sdk) == ('layers', False, False)
    assert (cached['read_via'], cached['cached'], cached_sdk) == (None, True, False)
    assert (archive['read_via'], archive_sdk) == ('archive', True)


@pytest.mark.docker
def test_unreadable_layers_fall_back_to_the_archive_api(images, tmp_path, monkeypatch):
    def unreadable(attrs):
        raise LayersUnavailable('the layer directory cannot be read here')

    monkeypatch.setattr(_image_verify, 'image_layer_dirs', unreadable)
    result = verify(images, 'ca', [dict(path=ROUTER_SO, md5=md5(CA_FILES[ROUTER_SO]))], tmp_path)
    assert result['read_via'] == 'archive' and result['passed'] is True


@pytest.mark.docker
def test_a_failed_layer_read_falls_back_to_the_archive_api(images, tmp_path, monkeypatch):
    def failing_read(self, path):
        raise LayersUnavailable('cannot read %s: Input/output error' % path)

    monkeypatch.setattr(LayerReader, 'chunks', failing_read)
    result = verify(images, 'ca', [dict(path=ROUTER_SO, md5=md5(CA_FILES[ROUTER_SO]))], tmp_path)
    assert result['read_via'] == 'archive' and result['passed'] is True
