# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""model_stage against a real local HTTP server (with Range support) and a real rsync daemon.

The HTTP server serves a fixture model directory from a thread and logs every request
(path, query string, Range header, status, bytes sent), so the tests see what was fetched.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _model_weights as mw
from ansible_collections.mindverse.sglang_pd.plugins.modules import model_stage
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from model_fixtures import free_port, make_model_dir, manifest_of, shard_name, wait_for_port, write_bytes
from module_runner import run_module, run_module_stdout

SAS = 'sv=2024-11-04&se=2026-12-31T00%3A00%3A00Z&sp=r&sig=Zm9vYmFyc2VjcmV0c2lnbmF0dXJl%2Bx%3D'
SHARD = shard_name(2, 3)


# ----------------------------------------------------------------- the HTTP source
class ModelFileHandler(BaseHTTPRequestHandler):
    """GET of files under the server's ``root``; ``Range: bytes=K-`` answered with 206 unless told not to."""

    def do_GET(self):  # noqa: N802 - the name http.server calls
        server = self.server
        parts = urlsplit(self.path)
        name = unquote(parts.path).lstrip('/')
        entry = dict(name=name, query=parts.query, range=self.headers.get('Range'), status=404, sent=0)
        server.requests.append(entry)
        data = server.content_of(name)
        if data is None:
            self.send_error(404)
            return
        start = self.range_start()
        if start is not None and start >= len(data):
            entry['status'] = 416
            self.send_error(416)
            return
        entry['status'] = 206 if start is not None else 200
        body = data[start or 0:]
        self.send_response(entry['status'])
        self.send_header('Content-Length', str(len(body)))
        if start is not None:
            self.send_header('Content-Range', 'bytes %d-%d/%d' % (start, len(data) - 1, len(data)))
        self.end_headers()
        self.wfile.write(body)
        entry['sent'] = len(body)

    def range_start(self):
        match = re.match(r'^bytes=(\d+)-$', self.headers.get('Range') or '')
        if not match or not self.server.honour_range:
            return None
        return int(match.group(1))

    def log_message(self, *args):  # keep the test output clean
        pass


class ModelFileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root):
        super().__init__(('127.0.0.1', 0), ModelFileHandler)
        self.root = root
        self.requests = []
        self.honour_range = True
        self.replacements = {}  # name -> bytes served instead of the file

    @property
    def url(self):
        return 'http://127.0.0.1:%d/weights/glm' % self.server_address[1]

    def content_of(self, name):
        prefix = 'weights/glm/'
        if not name.startswith(prefix):
            return None
        name = name[len(prefix):]
        if name in self.replacements:
            return self.replacements[name]
        path = os.path.join(self.root, name)
        if '..' in name.split('/') or not os.path.isfile(path):
            return None
        with open(path, 'rb') as handle:
            return handle.read()


@pytest.fixture
def source(tmp_path):
    """The model files the server serves: (root, {name: bytes})."""
    root = str(tmp_path / 'blob' / 'glm')
    return root, make_model_dir(root, extra_files={'extra/chat_template.jinja': b'{{ messages }}\n'})


@pytest.fixture
def server(source):
    srv = ModelFileServer(source[0])
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


@pytest.fixture
def files(source):
    return source[1]


@pytest.fixture
def target(tmp_path):
    return str(tmp_path / 'models' / 'glm')


@pytest.fixture
def cache_path(tmp_path):
    return str(tmp_path / 'cache' / 'model-hashes.json')


def stage_args(target, files, cache_path, **extra):
    return dict(dict(path=target, manifest=manifest_of(files), cache=cache_path), **extra)


def url_args(server, target, files, cache_path, **extra):
    return stage_args(target, files, cache_path, url=server.url, url_query=SAS, **extra)


def leftovers(path):
    """Hidden files (partial copies) anywhere under ``path``."""
    found = []
    for dummy, dummy_dirs, names in os.walk(path):
        found.extend(name for name in names if name.startswith('.'))
    return found


def assert_staged(target, files):
    for name, data in files.items():
        full = os.path.join(target, *name.split('/'))
        with open(full, 'rb') as handle:
            assert handle.read() == data, name
        assert os.stat(full).st_mode & 0o777 == 0o644
    assert leftovers(target) == []
    assert mw.verify_dir(target, mw.parse_manifest(manifest_of(files)))['problems'] == []


def assert_secret_free(result):
    text = repr(result)
    for part in ('Zm9vYmFyc2VjcmV0c2lnbmF0dXJl', 'sig=', SAS):
        assert part not in text


# ----------------------------------------------------------------- from a URL
def test_stages_every_file_from_the_url_with_the_query_string(server, files, target, cache_path):
    result = run_module(model_stage, url_args(server, target, files, cache_path))
    assert result.get('failed') is None, result
    assert result['changed'] is True
    assert result['copied'] == sorted(files)
    assert result['bytes_copied'] == sum(len(data) for data in files.values())
    assert (result['present'], result['source']) == (0, 'url')
    assert sorted(request['name'] for request in server.requests) == ['weights/glm/' + name for name in sorted(files)]
    assert all(request['query'] == SAS and request['range'] is None for request in server.requests)
    assert_staged(target, files)
    assert_secret_free(result)


def test_a_second_run_changes_nothing_and_contacts_nobody(server, files, target, cache_path):
    run_module(model_stage, url_args(server, target, files, cache_path))
    server.requests.clear()
    again = run_module(model_stage, url_args(server, target, files, cache_path))
    assert again['changed'] is False
    assert (again['copied'], again['bytes_copied'], again['present'], again['source']) == ([], 0, len(files), None)
    assert server.requests == []
    # Nor does it need a source at all.
    bare = run_module(model_stage, stage_args(target, files, cache_path))
    assert bare['changed'] is False and bare['present'] == len(files)


def test_only_missing_or_wrong_files_are_fetched(server, files, target, cache_path):
    run_module(model_stage, url_args(server, target, files, cache_path))
    os.unlink(os.path.join(target, 'config.json'))
    data = bytearray(files[SHARD])
    data[-1] ^= 0x01
    write_bytes(os.path.join(target, SHARD), bytes(data))  # same size, wrong content
    server.requests.clear()
    result = run_module(model_stage, url_args(server, target, files, cache_path))
    assert result['copied'] == ['config.json', SHARD]
    assert result['present'] == len(files) - 2
    assert [request['name'] for request in server.requests] == ['weights/glm/config.json', 'weights/glm/' + SHARD]
    assert_staged(target, files)


def test_resumes_a_partial_download_with_a_range_request(server, files, target, cache_path):
    done = 1000
    write_bytes(os.path.join(target, '.%s.partial' % SHARD), files[SHARD][:done])
    result = run_module(model_stage, url_args(server, target, files, cache_path))
    assert result.get('failed') is None, result
    (request,) = [r for r in server.requests if r['name'].endswith(SHARD)]
    assert (request['range'], request['status'], request['sent']) == ('bytes=%d-' % done, 206,
                                                                      len(files[SHARD]) - done)
    assert request['query'] == SAS
    assert_staged(target, files)


def test_starts_over_when_the_server_ignores_the_range(server, files, target, cache_path):
    server.honour_range = False
    write_bytes(os.path.join(target, '.%s.partial' % SHARD), b'stale bytes of an older download')
    result = run_module(model_stage, url_args(server, target, files, cache_path))
    assert result.get('failed') is None, result
    (request,) = [r for r in server.requests if r['name'].endswith(SHARD)]
    assert (request['range'], request['status'], request['sent']) == (
        'bytes=32-', 200, len(files[SHARD]))
    assert_staged(target, files)


def test_a_resumed_file_that_does_not_match_is_fetched_again_from_the_start(server, files, target, cache_path):
    write_bytes(os.path.join(target, '.%s.partial' % SHARD), b'\0' * 512)  # the wrong prefix
    result = run_module(model_stage, url_args(server, target, files, cache_path))
    assert result.get('failed') is None, result
    shard_requests = [(r['range'], r['status']) for r in server.requests if r['name'].endswith(SHARD)]
    assert shard_requests == [('bytes=512-', 206), (None, 200)]
    assert_staged(target, files)


def test_a_complete_partial_is_checked_without_a_request(server, files, target, cache_path):
    write_bytes(os.path.join(target, '.%s.partial' % SHARD), files[SHARD])
    result = run_module(model_stage, url_args(server, target, files, cache_path))
    assert SHARD in result['copied']
    assert not [r for r in server.requests if r['name'].endswith(SHARD)]
    assert_staged(target, files)


def test_wrong_bytes_from_the_source_fail_and_leave_nothing(server, files, target, cache_path):
    wrong = b'x' * 100
    server.replacements[SHARD] = wrong
    result = run_module(model_stage, url_args(server, target, files, cache_path))
    assert result['failed'] is True
    assert result['msg'] == '%s from %s/%s: expected sha256 %s size %d, found sha256 %s size %d [SGLPD-MDL-002]' % (
        SHARD, server.url, SHARD, hashlib.sha256(files[SHARD]).hexdigest(), len(files[SHARD]),
        hashlib.sha256(wrong).hexdigest(), len(wrong))
    assert not os.path.exists(os.path.join(target, SHARD))
    assert leftovers(target) == []
    # The files before it were copied, reported and cached.
    before = sorted(name for name in files if name < SHARD)
    assert result['copied'] == before
    cache = mw.HashCache(cache_path)
    assert all(cache.get(os.path.join(target, name), os.stat(os.path.join(target, name))) for name in before)
    assert_secret_free(result)


def test_a_missing_file_on_the_server_fails_naming_it(server, files, target, cache_path):
    manifest_files = dict(files, **{'not-on-the-server.bin': b'zz'})
    result = run_module(model_stage, url_args(server, target, manifest_files, cache_path))
    assert result['failed'] is True
    assert result['msg'] == 'not-on-the-server.bin: cannot fetch from %s/not-on-the-server.bin: HTTP 404 Not Found [SGLPD-MDL-002]' % (
        server.url)


def test_an_unreachable_url_fails_naming_the_file_and_url_but_not_the_query(files, target, cache_path):
    base = 'http://127.0.0.1:%d/weights/glm' % free_port()
    result = run_module(model_stage, stage_args(target, files, cache_path, url=base, url_query='?' + SAS, timeout=5))
    assert result['failed'] is True
    assert result['msg'].startswith('config.json: cannot fetch from %s/config.json: ' % base)
    assert 'refused' in result['msg'].lower()
    assert_secret_free(result)
    assert result['copied'] == [] and not os.path.exists(os.path.join(target, 'config.json'))


def test_the_printed_result_never_holds_the_query(files, target, cache_path, capsys):
    base = 'http://127.0.0.1:%d/weights/glm' % free_port()
    printed = run_module_stdout(model_stage, stage_args(target, files, cache_path, url=base, url_query=SAS,
                                                        timeout=5), capsys)
    assert printed['failed'] is True
    assert_secret_free(printed)


def test_the_scrubber_hides_the_query_and_its_values():
    scrub = model_stage.Scrubber(SAS)
    text = 'GET /x?%s failed; signature Zm9vYmFyc2VjcmV0c2lnbmF0dXJl+x= expired at 2026-12-31T00:00:00Z' % SAS
    cleaned = scrub(text)
    assert_secret_free(cleaned)
    assert '2026-12-31T00:00:00Z' not in cleaned
    assert model_stage.Scrubber('')('nothing to hide') == 'nothing to hide'


def test_refuses_to_start_without_enough_free_space(server, files, target, cache_path):
    margin = model_stage.free_bytes_at(target) + (1 << 40)  # far above what the disk frees meanwhile
    result = run_module(model_stage, url_args(server, target, files, cache_path, free_margin_bytes=margin))
    assert result['failed'] is True
    need = sum(len(data) for data in files.values())
    match = re.match(r'^(.*) needs (\d+) bytes free for (\d+) file\(s\) \(\+ margin (\d+)\), has (\d+) \[SGLPD-MDL-002\]$', result['msg'])
    assert match, result['msg']
    assert (match.group(1), int(match.group(2)), int(match.group(3)), int(match.group(4))) == (
        target, need, len(files), margin)
    assert server.requests == []
    assert not os.path.exists(target)
    assert result['copied'] == []


def test_free_space_counts_what_partials_already_hold(server, files, target, cache_path):
    write_bytes(os.path.join(target, '.%s.partial' % SHARD), files[SHARD][:1000])
    result = run_module(model_stage, url_args(server, target, files, cache_path,
                                              # Far above what the disk frees meanwhile (other jobs' temp files).
                                              free_margin_bytes=model_stage.free_bytes_at(target) + (1 << 40)))
    need = sum(len(data) for data in files.values()) - 1000
    assert ' needs %d bytes free for %d file(s)' % (need, len(files)) in result['msg']


def test_check_mode_reports_what_it_would_copy_and_writes_nothing(server, files, target, cache_path):
    os.makedirs(target)
    write_bytes(os.path.join(target, 'config.json'), files['config.json'])
    result = run_module(model_stage, url_args(server, target, files, cache_path), check_mode=True)
    assert result['changed'] is True
    assert result['copied'] == sorted(name for name in files if name != 'config.json')
    assert (result['present'], result['source']) == (1, 'url')
    assert server.requests == []
    assert os.listdir(target) == ['config.json']
    assert not os.path.exists(cache_path)


def test_without_a_source_it_fails_naming_the_files(files, target, cache_path):
    os.makedirs(target)
    for name, data in files.items():
        if name not in ('config.json', SHARD):
            write_bytes(os.path.join(target, *name.split('/')), data)
    result = run_module(model_stage, stage_args(target, files, cache_path))
    assert result['failed'] is True
    assert result['msg'] == ('2 file(s) of %s are missing or wrong and neither url nor peer is given: config.json, %s [SGLPD-MDL-002]'
                             % (target, SHARD))
    # The hashes of the files that were fine are kept for the next run.
    cached = mw.HashCache(cache_path)
    tokenizer = os.path.join(target, 'tokenizer.json')
    assert cached.get(tokenizer, os.stat(tokenizer)) == hashlib.sha256(files['tokenizer.json']).hexdigest()


def test_url_and_peer_are_mutually_exclusive(files, target, cache_path):
    result = run_module(model_stage, stage_args(target, files, cache_path, url='http://127.0.0.1:1/x',
                                                peer='127.0.0.1'))
    assert result['failed'] is True
    assert 'mutually exclusive' in result['msg']


def test_a_malformed_manifest_fails_with_its_line(target, cache_path):
    result = run_module(model_stage, dict(path=target, manifest='%s  12  ../escape\n' % ('a' * 64), cache=cache_path))
    assert result['failed'] is True
    assert 'line 1' in result['msg'] and 'contains ..' in result['msg']


# ----------------------------------------------------------------- from a peer's rsync daemon
@pytest.fixture
def peer(tmp_path, files):
    """A real ``rsync --daemon`` on 127.0.0.1 serving a verified copy as module ``model``."""
    rsync = shutil.which('rsync')
    if rsync is None:
        pytest.skip('rsync is not installed')
    copy = str(tmp_path / 'peer' / 'glm')
    for name, data in files.items():
        write_bytes(os.path.join(copy, *name.split('/')), data)
    port = free_port()
    config = tmp_path / 'rsyncd.conf'
    config.write_text('\n'.join([
        'use chroot = no',
        'uid = %d' % os.getuid(),
        'gid = %d' % os.getgid(),
        'pid file = %s' % (tmp_path / 'rsyncd.pid'),
        'log file = %s' % (tmp_path / 'rsyncd.log'),
        '[model]',
        '    path = %s' % copy,
        '    read only = yes',
        '',
    ]))
    daemon = subprocess.Popen([rsync, '--daemon', '--no-detach', '--config=%s' % config, '--port=%d' % port,
                               '--address=127.0.0.1'])
    try:
        wait_for_port(port)
        yield dict(port=port, log=str(tmp_path / 'rsyncd.log'))
    finally:
        daemon.terminate()
        daemon.wait(10)


def peer_args(peer, target, files, cache_path, **extra):
    extra.setdefault('peer_module', 'model')
    return stage_args(target, files, cache_path, peer='127.0.0.1', peer_port=peer['port'], **extra)


def test_stages_every_file_from_a_peer(peer, files, target, cache_path):
    result = run_module(model_stage, peer_args(peer, target, files, cache_path))
    assert result.get('failed') is None, result
    assert (result['changed'], result['source'], result['copied']) == (True, 'peer', sorted(files))
    assert_staged(target, files)
    again = run_module(model_stage, peer_args(peer, target, files, cache_path))
    assert (again['changed'], again['copied'], again['present']) == (False, [], len(files))


def test_a_peer_copy_continues_a_partial_file(peer, files, target, cache_path):
    write_bytes(os.path.join(target, '.%s.partial' % SHARD), files[SHARD][:2000])
    result = run_module(model_stage, peer_args(peer, target, files, cache_path))
    assert result.get('failed') is None, result
    assert_staged(target, files)


def test_an_unknown_peer_module_fails_naming_the_file_and_source(peer, files, target, cache_path):
    result = run_module(model_stage, peer_args(peer, target, files, cache_path, peer_module='nosuch'))
    assert result['failed'] is True
    assert result['msg'].startswith('config.json: cannot fetch from rsync://127.0.0.1:%d/nosuch: ' % peer['port'])
    assert 'nosuch' in result['msg']
    assert not os.path.isdir(target) or leftovers(target) == []


def test_an_unreachable_peer_fails_naming_the_file_and_source(files, target, cache_path):
    if shutil.which('rsync') is None:
        pytest.skip('rsync is not installed')
    port = free_port()
    result = run_module(model_stage, stage_args(target, files, cache_path, peer='127.0.0.1', peer_port=port,
                                                timeout=5))
    assert result['failed'] is True
    assert result['msg'].startswith('config.json: cannot fetch from rsync://127.0.0.1:%d/model: ' % port)
    assert 'refused' in result['msg'].lower()
