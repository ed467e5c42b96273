# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""The PD path watcher (plugins/module_utils/_pd_watch.py) against the real SMG router and stand-ins.

One prefill and two decode stand-ins behind SMG on loopback; the watcher runs as its service
does (``python -m ...._pd_watch``, every 4 s, 3 s probe timeout, out after 2 failed rounds). The
first decode is then cut from the prefill's bootstrap server (the stand-in's partition file:
its connections there time out, as behind a dropping firewall rule) while its /health_generate
stays green, as SGLang's does. The watcher takes it out of the router within 15 s, writes that
in its state and metrics, and registers it again once the path heals; the other decode is never
touched.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from local_pd import LocalPd

pytest.importorskip('smg', reason='the SMG router (pip package smg, pinned in requirements-test.txt) is not installed')
pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason='the stand-in needs Python 3.10 or later')

WATCH = 'ansible_collections.mindverse.sglang_pd.plugins.module_utils._pd_watch'
BOUND = 15.0


def decode_urls(fleet):
    return sorted(w['url'] for w in fleet.workers() if w['worker_type'] == 'decode')


def wait_for(condition, seconds, what):
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < seconds, 'not within %g s: %s' % (seconds, what)
        time.sleep(0.2)
    return time.monotonic() - began


def test_a_decode_cut_from_the_prefill_leaves_the_router_within_15_s_and_comes_back(tmp_path, standin_model_dir):
    partition = tmp_path / 'partition'
    fleet = LocalPd(tmp_path / 'fleet', standin_model_dir, decodes=2,
                    decode_env={0: {'SGLANG_STANDIN_PARTITION_FILE': str(partition)}},
                    router_args=['--health-check-endpoint', '/health_generate', '--health-check-interval-secs', '2',
                                 '--health-check-timeout-secs', '2', '--health-failure-threshold', '2'])
    try:
        fleet.wait_healthy()
        cut, other = fleet.decodes[0].url, fleet.decodes[1].url
        state_path, metrics_path = tmp_path / 'watch.json', tmp_path / 'watch.prom'
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        fleet.popen([sys.executable, '-m', WATCH, '--router', fleet.router_url, '--state', str(state_path),
                     '--metrics', str(metrics_path), '--lock', str(tmp_path / 'fleet.lock'),
                     '--interval', '4', '--probe-timeout', '3'], tmp_path / 'watch.log', env)
        wait_for(state_path.exists, 30, 'the watcher wrote its state (its log: %s)' % (tmp_path / 'watch.log'))
        time.sleep(8)
        assert decode_urls(fleet) == sorted([cut, other]), 'a healthy path was taken out'

        partition.touch()
        took = wait_for(lambda: cut not in decode_urls(fleet), 30, 'the cut decode left the router')
        assert took <= BOUND, 'the cut decode left the router after %.1f s' % took
        assert decode_urls(fleet) == [other]
        print('the cut decode left the router after %.1f s' % took)
        state = json.loads(state_path.read_text())
        assert [h['url'] for h in state['held_out']] == [cut]
        assert '-> decode %s' % cut in state['held_out'][0]['reason']
        assert 'sglang_pd_watch_held_out{decode="%s"} 1' % cut in metrics_path.read_text()

        partition.unlink()
        back = wait_for(lambda: cut in decode_urls(fleet), 30, 'the healed decode came back')
        assert back <= BOUND, 'the healed decode came back after %.1f s' % back
        print('the healed decode came back after %.1f s' % back)
        wait_for(lambda: not json.loads(state_path.read_text())['held_out'], 10, 'the state shows nothing held out')
        assert 'sglang_pd_watch_held_out' not in metrics_path.read_text().replace('# HELP sglang_pd_watch_held_out', '') \
            .replace('# TYPE sglang_pd_watch_held_out', '')
    finally:
        fleet.close()
