# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""sglang_pd_pair_probe against two real stand-in processes (prefill and decode on loopback).

A good pair passes; a wrong bootstrap port, an unreachable prefill and a room
mismatch each fail with a message naming the pair.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._pair_probe import (
    PairProbe,
    PairProbeError,
    bootstrap_host_of,
    pair_name,
)
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_pd_pair_probe
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from module_runner import run_module, run_module_stdout

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the stand-in needs Python 3.10 or later")

STANDIN_DIR = Path(__file__).resolve().parents[3] / 'standin'
MODEL = 'glm-5.2-fp8'
KEY = 'pair-probe-key'
# Decode waits this long for an unreachable prefill (SGLang's SGLANG_DISAGGREGATION_WAITING_TIMEOUT).
DECODE_WAIT = '2'


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, mode, log_dir, model_dir, **more_env):
        self.mode = mode
        self.port, self.bootstrap_port = free_port(), free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.log_path = log_dir / ('%s-%d.log' % (mode, self.port))
        env = dict(os.environ, PYTHONPATH=str(STANDIN_DIR), SGLANG_STANDIN_WARMUP_SECS='0',
                   SGLANG_DISAGGREGATION_WAITING_TIMEOUT=DECODE_WAIT, **more_env)
        with self.log_path.open('wb') as out:
            self.proc = subprocess.Popen(
                [sys.executable, '-m', 'sglang.launch_server', '--disaggregation-mode', mode, '--host', '127.0.0.1',
                 '--port', str(self.port), '--disaggregation-bootstrap-port', str(self.bootstrap_port),
                 '--model-path', str(model_dir), '--served-model-name', MODEL, '--api-key', KEY],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 10
        while True:
            assert self.proc.poll() is None, 'stand-in exited: %s' % self.log_path.read_text()
            try:
                socket.create_connection(('127.0.0.1', self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, 'stand-in did not listen: %s' % self.log_path.read_text()
                time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture(name='pair', scope='module')
def fixture_pair(tmp_path_factory, standin_model_dir):
    """One prefill and one decode stand-in, shared by the tests (the probe changes nothing)."""
    log_dir = tmp_path_factory.mktemp('pair')
    prefill, decode = Server('prefill', log_dir, standin_model_dir), Server('decode', log_dir, standin_model_dir)
    yield prefill, decode
    prefill.stop()
    decode.stop()


def args(prefill, decode, **extra):
    values = dict(prefill_url=prefill.url, decode_url=decode.url, bootstrap_port=prefill.bootstrap_port, api_key=KEY,
                  timeout=20)
    values.update(extra)
    return values


def named(prefill, decode, port=None, host='127.0.0.1'):
    return 'prefill %s (bootstrap %s:%s) -> decode %s' % (prefill.url, host, port or prefill.bootstrap_port, decode.url)


@pytest.fixture(name='broken_long_pair', scope='module')
def fixture_broken_long_pair(tmp_path_factory, standin_model_dir):
    """A prefill whose KV transfers longer than 1024 pages fail (the stand-in's long_transfer_fails fault), and a decode."""
    log_dir = tmp_path_factory.mktemp('broken-long-pair')
    prefill = Server('prefill', log_dir, standin_model_dir, SGLANG_STANDIN_KV_FAULT='long_transfer_fails',
                     SGLANG_STANDIN_KV_FAULT_MAX_PAGES='1024')
    decode = Server('decode', log_dir, standin_model_dir)
    yield prefill, decode
    prefill.stop()
    decode.stop()


def test_the_long_probe_sends_a_prompt_of_8192_words_and_asks_256_tokens(pair):
    prefill, decode = pair
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, long=True))
    assert not result.get('failed'), result['msg']
    assert result['long'] is True
    # The stand-in counts whitespace words as tokens: the instruction's 7 words and the 8192 of the list.
    assert result['usage']['prompt_tokens'] == 8192 + 7
    assert result['usage']['completion_tokens'] == 256


def test_a_broken_long_transfer_passes_the_short_probe_and_fails_the_long_one(broken_long_pair):
    prefill, decode = broken_long_pair
    short = run_module(sglang_pd_pair_probe, args(prefill, decode))
    assert not short.get('failed'), short['msg']
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, long=True))
    assert result['failed'] and result['changed'] is False
    assert result['msg'].startswith('long probe (8192-word prompt, max_tokens 256) of PD pair %s, bootstrap_room %s: '
                                    'decode answered HTTP 500: ' % (named(prefill, decode), result['room']))
    assert 'Failed to get kvcache from prefill instance' in result['msg'] and result['msg'].endswith('[SGLPD-PRB-002]')


def test_a_good_pair_passes(pair):
    prefill, decode = pair
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, max_latency_ms=10000))
    assert not result.get('failed'), result['msg']
    assert result['changed'] is False
    assert result['pair'] == named(prefill, decode)
    assert result['content'].startswith('standin reply from decode:')
    assert result['model'] == MODEL  # read from decode's /v1/models
    assert 0 < result['latency_ms'] < 10000
    assert 0 <= result['room'] <= 2 ** 63 - 1
    assert (result['decode_status'], result['prefill_status']) == (200, 200)


def test_check_mode_runs_the_probe_and_a_given_room_is_sent(pair):
    prefill, decode = pair
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, room=77, model=MODEL), check_mode=True)
    assert not result.get('failed'), result['msg']
    assert result['changed'] is False and result['room'] == 77 and result['content']


@pytest.mark.parametrize('wrong', ['closed', 'http-port'])
def test_a_wrong_bootstrap_port_fails_naming_the_pair(pair, wrong):
    prefill, decode = pair
    port = free_port() if wrong == 'closed' else prefill.port
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, bootstrap_port=port, model=MODEL))
    assert result['failed'] and result['changed'] is False
    assert result['msg'].startswith('PD pair %s, bootstrap_room %s: decode answered HTTP 500: '
                                    % (named(prefill, decode, port), result['room']))
    assert '127.0.0.1:%d' % port in result['msg']  # decode's own error text names the address
    assert '--disaggregation-bootstrap-port' in result['msg']
    assert result['decode_status'] == 500


def test_an_unreachable_prefill_fails_naming_the_pair(pair):
    prefill, decode = pair
    # TEST-NET-1 (RFC 5737) is never routed: decode cannot reach a prefill registered there.
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, bootstrap_host='192.0.2.1', model=MODEL))
    assert result['failed']
    assert named(prefill, decode, host='192.0.2.1') in result['msg']
    assert 'decode answered HTTP 500' in result['msg']
    assert 'cannot reach the prefill bootstrap server at 192.0.2.1:%d' % prefill.bootstrap_port in result['msg']


def test_a_room_mismatch_fails_naming_the_pair_and_the_room(pair):
    prefill, decode = pair

    class Mismatch(PairProbe):
        """Sends room A to prefill and room B to decode (a router that lost track of a room)."""

        def dispatch(self, body):
            answers = {}
            to_prefill = dict(body, bootstrap_room=self.room + 1)
            thread = threading.Thread(target=self._send, args=('prefill', self.prefill_url, to_prefill, answers))
            thread.start()
            self._send('decode', self.decode_url, body, answers)
            thread.join()
            return answers, 0.5

    probe = Mismatch(prefill.url, decode.url, prefill.bootstrap_port, room=1000, model=MODEL, api_key=KEY, timeout=20)
    with pytest.raises(PairProbeError) as err:
        probe.run()
    assert err.value.msg.startswith('PD pair %s, bootstrap_room 1000: decode answered HTTP 500:' % named(prefill, decode))
    assert 'refused bootstrap_room 1000' in err.value.msg
    assert err.value.result['pair'] == named(prefill, decode)


def test_a_decode_that_never_answers_fails_on_the_timeout(pair):
    prefill, _decode = pair
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(('127.0.0.1', 0))
        silent.listen(8)
        url = 'http://127.0.0.1:%d' % silent.getsockname()[1]
        result = run_module(sglang_pd_pair_probe, dict(prefill_url=prefill.url, decode_url=url, model=MODEL,
                                                       bootstrap_port=prefill.bootstrap_port, api_key=KEY, timeout=1))
    assert result['failed']
    assert result['msg'].startswith('PD pair prefill %s (bootstrap 127.0.0.1:%d) -> decode %s'
                                    % (prefill.url, prefill.bootstrap_port, url))
    assert 'decode got no answer' in result['msg']


def test_a_latency_over_the_limit_fails(pair):
    prefill, decode = pair
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, model=MODEL, max_latency_ms=0.001))
    assert result['failed'] and 'more than max_latency_ms 0.001' in result['msg']
    assert named(prefill, decode) in result['msg'] and result['latency_ms'] > 0


def test_a_wrong_api_key_fails_with_decodes_error(pair):
    prefill, decode = pair
    result = run_module(sglang_pd_pair_probe, args(prefill, decode, model=MODEL, api_key='wrong'))
    assert result['failed'] and 'decode answered HTTP 401' in result['msg']


def test_the_api_key_is_never_echoed(pair, capsys):
    prefill, decode = pair
    out = run_module_stdout(sglang_pd_pair_probe, args(prefill, decode, bootstrap_port=free_port(), model=MODEL), capsys)
    assert out['failed'] and KEY not in json.dumps(out)


@pytest.mark.parametrize('extra, message', [
    (dict(room=-1), 'room must be between 0 and 2**63 - 1'),
    (dict(bootstrap_port=0), 'bootstrap_port must be a TCP port'),
    (dict(timeout=0), 'timeout must be greater than 0'),
])
def test_invalid_options_are_refused(extra, message):
    values = dict(prefill_url='http://p:1', decode_url='http://d:2', bootstrap_port=8998)
    values.update(extra)
    result = run_module(sglang_pd_pair_probe, values)
    assert result['failed'] and message in result['msg']


@pytest.mark.parametrize('url, host', [
    ('http://10.0.0.11:30100', '10.0.0.11'),
    ('http://prefill-0.example:30100/v1', 'prefill-0.example'),
    ('http://[fd00::11]:30100/', 'fd00::11'),
])
def test_bootstrap_host_is_the_prefill_urls_host(url, host):
    assert bootstrap_host_of(url) == host


def test_pair_name_brackets_ipv6():
    assert pair_name('http://[fd00::11]:1', 'fd00::11', 8998, 'http://d:2') == \
        'prefill http://[fd00::11]:1 (bootstrap [fd00::11]:8998) -> decode http://d:2'


def test_pairs_are_probed_in_one_call_and_every_failure_is_named(pair):
    prefill, decode = pair
    closed = free_port()
    good = dict(prefill_url=prefill.url, decode_url=decode.url, bootstrap_port=prefill.bootstrap_port)
    pairs = [good, dict(good, bootstrap_port=closed), dict(good, room=77), dict(good, api_key='wrong')]
    result = run_module(sglang_pd_pair_probe, dict(pairs=pairs, api_key=KEY, model=MODEL, timeout=20, parallel=2))
    assert result['failed'] and result['changed'] is False
    assert [probe['failed'] for probe in result['results']] == [False, True, False, True]
    assert [probe['pair'] for probe in result['results']] == [named(prefill, decode), named(prefill, decode, closed),
                                                              named(prefill, decode), named(prefill, decode)]
    assert result['results'][2]['room'] == 77 and result['results'][0]['content']
    assert result['msg'].startswith('2 of 4 prefill -> decode pairs failed: PD pair %s' % named(prefill, decode, closed))
    assert ' | PD pair %s' % named(prefill, decode) in result['msg'] and 'decode answered HTTP 401' in result['msg']


def test_pairs_that_all_pass_return_each_result_in_order(pair):
    prefill, decode = pair
    pairs = [dict(prefill_url=prefill.url, decode_url=decode.url, bootstrap_port=prefill.bootstrap_port, room=room)
             for room in (1, 2, 3)]
    result = run_module(sglang_pd_pair_probe, dict(pairs=pairs, api_key=KEY, timeout=20, max_latency_ms=10000))
    assert not result.get('failed'), result['msg']
    assert [probe['room'] for probe in result['results']] == [1, 2, 3]
    assert all(probe['model'] == MODEL and not probe['failed'] for probe in result['results'])


def test_a_pairs_key_is_never_echoed(pair, capsys):
    prefill, decode = pair
    pairs = [dict(prefill_url=prefill.url, decode_url=decode.url, bootstrap_port=free_port(), api_key=KEY)]
    out = run_module_stdout(sglang_pd_pair_probe, dict(pairs=pairs, model=MODEL, timeout=20), capsys)
    assert out['failed'] and KEY not in json.dumps(out)


@pytest.mark.parametrize('values, message', [
    (dict(pairs=[dict(prefill_url='http://p:1', decode_url='http://d:2', bootstrap_port=0)]),
     'pairs[0] (prefill http://p:1 -> decode http://d:2): bootstrap_port must be a TCP port'),
    (dict(pairs=[dict(prefill_url='http://p:1', decode_url='http://d:2', bootstrap_port=1, room=-1)]),
     'room must be between 0 and 2**63 - 1'),
    (dict(pairs=[], parallel=0), 'parallel must be 1 or more'),
    (dict(pairs=[], prefill_url='http://p:1', decode_url='http://d:2', bootstrap_port=1), 'mutually exclusive'),
    (dict(prefill_url='http://p:1'), 'parameters are required together'),
    (dict(timeout=5), 'one of the following is required: pairs, prefill_url'),
])
def test_invalid_pairs_options_are_refused(values, message):
    result = run_module(sglang_pd_pair_probe, values)
    assert result['failed'] and message in result['msg']
