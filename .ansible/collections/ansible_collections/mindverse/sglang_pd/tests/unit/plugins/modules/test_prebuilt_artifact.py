"""Tests of mindverse.sglang_pd.prebuilt_artifact: local verification, LFS pointers, downloads from 127.0.0.1."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _prebuilt_artifact as pa
from ansible_collections.mindverse.sglang_pd.plugins.modules import prebuilt_artifact

# Stands in for patches/mooncake/engine_v3.so (the real one is 67 MB); big enough to span chunks.
PAYLOAD = bytes(range(256)) * 9000 + b'engine_v3 tail'
PAYLOAD_MD5 = hashlib.md5(PAYLOAD).hexdigest()
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
ENGINE_V3_MD5 = '0e1b8fdd2d39e007b58c3e1711ec398b'
POINTER_OID = 'a3f5c1e2b4d6978800112233445566778899aabbccddeeff0011223344556677'
POINTER = ('version https://git-lfs.github.com/spec/v1\n'
           'oid sha256:%s\n'
           'size 70254592\n' % POINTER_OID).encode()


def run(capsys, args, check_mode=False):
    args = dict(args)
    if check_mode:
        args['_ansible_check_mode'] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            prebuilt_artifact.main()
    result = json.loads(capsys.readouterr().out)
    assert (exc.value.code != 0) == bool(result.get('failed'))
    return result


def write(path, data):
    with open(str(path), 'wb') as handle:
        handle.write(data)
    return str(path)


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests = None

    def do_GET(self):
        self.requests.append(self.path)
        super().do_GET()

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass


@pytest.fixture(name='server')
def fixture_server(tmp_path):
    """An http.server on 127.0.0.1 serving tmp_path/www; yields (base URL, served dir, request log)."""
    www = tmp_path / 'www'
    www.mkdir()
    requests = []
    handler = functools.partial(type('Handler', (_Handler,), {'requests': requests}), directory=str(www))
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs=dict(poll_interval=0.05), daemon=True)
    thread.start()
    try:
        yield 'http://127.0.0.1:%d' % httpd.server_address[1], www, requests
    finally:
        httpd.shutdown()
        httpd.server_close()


# --- local path --------------------------------------------------------------------------

@pytest.mark.parametrize('check_mode', [False, True])
def test_path_matches(tmp_path, capsys, check_mode):
    path = write(tmp_path / 'engine_v3.so', PAYLOAD)
    result = run(capsys, dict(path=path, md5=PAYLOAD_MD5.upper(), sha256=PAYLOAD_SHA256), check_mode=check_mode)
    assert result['changed'] is False
    assert (result['path'], result['md5'], result['sha256'], result['size']) == (path, PAYLOAD_MD5, PAYLOAD_SHA256, len(PAYLOAD))


def test_path_md5_mismatch(tmp_path, capsys):
    path = write(tmp_path / 'engine_v3.so', PAYLOAD)
    result = run(capsys, dict(path=path, md5=ENGINE_V3_MD5))
    assert result['failed'] is True
    assert 'has md5 %s, expected %s' % (PAYLOAD_MD5, ENGINE_V3_MD5) in result['msg']
    assert path in result['msg']


def test_path_sha256_mismatch(tmp_path, capsys):
    path = write(tmp_path / 'engine_v3.so', PAYLOAD)
    result = run(capsys, dict(path=path, md5=PAYLOAD_MD5, sha256='0' * 64))
    assert result['failed'] is True
    assert 'has sha256 %s, expected %s' % (PAYLOAD_SHA256, '0' * 64) in result['msg']


@pytest.mark.parametrize('sha256, same_object', [(None, False), (POINTER_OID, True)])
def test_lfs_pointer_is_refused(tmp_path, capsys, sha256, same_object):
    path = write(tmp_path / 'engine_v3.so', POINTER)
    args = dict(path=path, md5=ENGINE_V3_MD5)
    if sha256:
        args['sha256'] = sha256
    result = run(capsys, args)
    assert result['failed'] is True
    assert 'is a Git LFS pointer file' in result['msg']
    assert 'git lfs pull' in result['msg']
    assert 'oid sha256:' + POINTER_OID in result['msg']
    assert 'size 70254592 bytes' in result['msg']
    assert ('refer to the expected object' in result['msg']) is same_object


def test_path_missing(tmp_path, capsys):
    result = run(capsys, dict(path=str(tmp_path / 'absent.so'), md5=ENGINE_V3_MD5))
    assert result['failed'] is True
    assert 'does not exist' in result['msg']


@pytest.mark.parametrize('args, message', [
    (dict(md5='0e1b8fdd'), 'is not 32 hex digits'),
    (dict(md5=ENGINE_V3_MD5, sha256='abc'), 'is not 64 hex digits'),
])
def test_bad_pins(tmp_path, capsys, args, message):
    args['path'] = write(tmp_path / 'x.so', PAYLOAD)
    result = run(capsys, args)
    assert result['failed'] is True
    assert message in result['msg']


@pytest.mark.parametrize('args, message', [
    (dict(url='http://127.0.0.1:1/x.so'), 'missing parameter(s) required by \'url\': dest'),
    (dict(path='/x', url='http://127.0.0.1:1/x.so', dest='/tmp/x'), 'mutually exclusive'),
    (dict(), 'one of the following is required: path, url'),
])
def test_argument_rules(capsys, args, message):
    args['md5'] = ENGINE_V3_MD5
    result = run(capsys, args)
    assert result['failed'] is True
    assert message in result['msg']


@pytest.mark.parametrize('head, parsed', [
    (POINTER, dict(oid=POINTER_OID, size=70254592)),
    (b'version https://git-lfs.github.com/spec/v1\nsize 12\n', None),
    (b'\x7fELF\x02\x01\x01' + b'\0' * 64, None),
])
def test_parse_lfs_pointer(head, parsed):
    assert pa.parse_lfs_pointer(head) == parsed


# --- download ----------------------------------------------------------------------------

def test_download_then_idempotent(tmp_path, capsys, server):
    base, www, requests = server
    write(www / 'engine_v3.so', PAYLOAD)
    dest = str(tmp_path / 'engine_v3.so')
    args = dict(url=base + '/engine_v3.so', dest=dest, md5=PAYLOAD_MD5, sha256=PAYLOAD_SHA256)

    first = run(capsys, args)
    assert first['changed'] is True and first['downloaded'] is True
    assert (first['path'], first['md5'], first['sha256'], first['size']) == (dest, PAYLOAD_MD5, PAYLOAD_SHA256, len(PAYLOAD))
    with open(dest, 'rb') as handle:
        assert handle.read() == PAYLOAD
    assert requests == ['/engine_v3.so']
    mtime = os.stat(dest).st_mtime_ns

    second = run(capsys, args)
    assert second['changed'] is False and second['downloaded'] is False
    assert second['md5'] == PAYLOAD_MD5
    assert requests == ['/engine_v3.so']  # no second download
    assert os.stat(dest).st_mtime_ns == mtime
    assert sorted(os.listdir(str(tmp_path))) == ['engine_v3.so', 'www']


def test_download_into_directory_takes_the_url_file_name(tmp_path, capsys, server):
    base, www, dummy = server
    write(www / 'engine_v3.so', PAYLOAD)
    out = tmp_path / 'out'
    out.mkdir()
    result = run(capsys, dict(url=base + '/engine_v3.so', dest=str(out), md5=PAYLOAD_MD5))
    assert result['path'] == str(out / 'engine_v3.so')
    assert result['changed'] is True


def test_download_check_mode_downloads_nothing(tmp_path, capsys, server):
    base, www, requests = server
    write(www / 'engine_v3.so', PAYLOAD)
    dest = tmp_path / 'engine_v3.so'
    result = run(capsys, dict(url=base + '/engine_v3.so', dest=str(dest), md5=PAYLOAD_MD5), check_mode=True)
    assert result['changed'] is True and result['downloaded'] is False
    assert not dest.exists()
    assert requests == []


def test_download_md5_mismatch_leaves_dest_unchanged(tmp_path, capsys, server):
    base, www, dummy = server
    write(www / 'engine_v3.so', PAYLOAD)
    dest = write(tmp_path / 'engine_v3.so', b'old engine')
    result = run(capsys, dict(url=base + '/engine_v3.so', dest=dest, md5=ENGINE_V3_MD5))
    assert result['failed'] is True
    assert 'has md5 %s, expected %s' % (PAYLOAD_MD5, ENGINE_V3_MD5) in result['msg']
    assert 'left unchanged' in result['msg']
    with open(dest, 'rb') as handle:
        assert handle.read() == b'old engine'
    assert sorted(os.listdir(str(tmp_path))) == ['engine_v3.so', 'www']


def test_download_replaces_a_stale_dest(tmp_path, capsys, server):
    base, www, requests = server
    write(www / 'engine_v3.so', PAYLOAD)
    dest = write(tmp_path / 'engine_v3.so', b'old engine')
    result = run(capsys, dict(url=base + '/engine_v3.so', dest=dest, md5=PAYLOAD_MD5))
    assert result['changed'] is True and requests == ['/engine_v3.so']
    with open(dest, 'rb') as handle:
        assert handle.read() == PAYLOAD


def test_download_of_an_lfs_pointer_is_refused(tmp_path, capsys, server):
    base, www, dummy = server
    write(www / 'engine_v3.so', POINTER)
    dest = tmp_path / 'engine_v3.so'
    result = run(capsys, dict(url=base + '/engine_v3.so', dest=str(dest), md5=ENGINE_V3_MD5))
    assert result['failed'] is True
    assert 'the download from %s/engine_v3.so is a Git LFS pointer file' % base in result['msg']
    assert 'git lfs pull' in result['msg']
    assert not dest.exists()


def test_download_http_error(tmp_path, capsys, server):
    base, dummy, dummy2 = server
    result = run(capsys, dict(url=base + '/missing.so', dest=str(tmp_path / 'x.so'), md5=ENGINE_V3_MD5))
    assert result['failed'] is True
    assert 'answered 404' in result['msg']
    assert not (tmp_path / 'x.so').exists()
