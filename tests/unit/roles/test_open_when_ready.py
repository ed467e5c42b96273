# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ready gate's opener (roles/sglang_service/files/open-when-ready), a router unit's ExecStartPost.

It runs under /bin/sh against a real HTTP server on loopback that answers 503 a given number of
times, then 200, with a stand-in ``nft`` first on PATH that records its arguments.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time

import pytest

OPENER = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'sglang_service', 'files',
                      'open-when-ready')


class Readiness(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first ``not_ready`` requests, then 200 (the router's /readiness)."""

    not_ready = 0
    seen = 0

    # The name http.server calls.
    def do_GET(self):  # pylint: disable=invalid-name
        type(self).seen += 1
        status = 503 if type(self).seen <= type(self).not_ready else 200
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args):  # pylint: disable=arguments-differ
        return  # quiet


@pytest.fixture(name='readiness')
def fixture_readiness():
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Readiness)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def run_opener(tmp_path, url, timeout):
    calls = tmp_path / 'nft-calls'
    fake = tmp_path / 'bin' / 'nft'
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@" >> %s\n' % calls)
    fake.chmod(0o755)
    env = dict(os.environ, PATH='%s:%s:%s' % (fake.parent, os.path.dirname(sys.executable), os.environ['PATH']))
    began = time.monotonic()
    result = subprocess.run(['/bin/sh', OPENER, 'sglang_pd_gate_sglang_router', url, str(timeout)],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    return result, time.monotonic() - began, calls.read_text() if calls.exists() else ''


def test_the_gate_opens_once_the_service_answers_200(tmp_path, readiness):
    Readiness.not_ready, Readiness.seen = 3, 0
    url = 'http://127.0.0.1:%d/readiness' % readiness.server_address[1]
    # The wait allowed is far longer than any run: "ready after" (not "not ready after") is the claim.
    result, _took, calls = run_opener(tmp_path, url, 3600)
    assert result.returncode == 0 and result.stderr == ''
    assert result.stdout.startswith('open-when-ready: %s ready after ' % url)
    assert result.stdout.endswith('open-when-ready: gate sglang_pd_gate_sglang_router opened\n')
    assert Readiness.seen == 4
    assert calls == 'delete table inet sglang_pd_gate_sglang_router\n'


def test_the_gate_opens_when_the_wait_runs_out_and_says_so(tmp_path, readiness):
    Readiness.not_ready, Readiness.seen = 10 ** 6, 0
    url = 'http://127.0.0.1:%d/readiness' % readiness.server_address[1]
    result, took, calls = run_opener(tmp_path, url, 2)
    assert result.returncode == 0
    assert 'open-when-ready: %s not ready after 2 s; opening the port anyway' % url in result.stderr
    assert calls == 'delete table inet sglang_pd_gate_sglang_router\n'
    assert took >= 2  # it waited the 2 s it was given (run_opener's 60 s timeout is the safety net)


def test_the_usage_is_refused_without_three_arguments(tmp_path):
    result = subprocess.run(['/bin/sh', OPENER, 'table-only'], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and 'usage: open-when-ready TABLE URL TIMEOUT' in result.stderr
