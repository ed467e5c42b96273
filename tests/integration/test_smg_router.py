# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""sglang_router_workers against the real SMG router (smg 1.13.0) in PD mode on loopback.

SMG starts with one prefill and one decode stand-in (tests/standin) and two control-plane
keys, an admin and a user one. The module, run in-process as Ansible would, registers a
third server and removes it, reports a server SMG cannot reach with SMG's answer rather than
a timeout, follows a registration still running (409 WORKER_CREATE_IN_PROGRESS) and removes
it once it ends, registers a server started with --api-key by the worker_api_key it is given,
and says plainly that a user-role key may not change workers.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_router_workers
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from local_pd import Standin, free_port, start_smg, stop
from module_runner import run_module

pytest.importorskip('smg', reason='the SMG router (pip package smg, pinned in requirements-test.txt) is not installed')
pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason='the stand-in needs Python 3.10 or later')

ADMIN_KEY = 'smg-admin-secret'
USER_KEY = 'smg-user-secret'
WORKER_KEY = 'worker-secret'
# SMG drops a registration whose server has not answered /health within this many seconds.
STARTUP_TIMEOUT = 6


class Smg:
    """SMG in PD mode on loopback over PREFILL and DECODE, with an admin and a user control-plane key."""

    def __init__(self, prefill, decode, log_dir):
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.log_path = log_dir / 'smg.log'
        self.proc = start_smg(prefill, [decode], self.port, self.log_path, [
            '--worker-startup-timeout-secs', str(STARTUP_TIMEOUT), '--worker-startup-check-interval', '1',
            '--control-plane-api-keys', 'deploy:Deployer:admin:%s' % ADMIN_KEY, 'read:Reader:user:%s' % USER_KEY])
        self.wait_for_start_up_workers()

    def wait_for_start_up_workers(self, seconds=20):
        deadline = time.monotonic() + seconds
        while True:
            result = self.module(state='query')
            if not result.get('failed') and result['counts']['total'] == 2:
                return
            assert time.monotonic() < deadline, 'SMG did not list its workers: %s' % result
            time.sleep(0.2)

    def module(self, api_key=ADMIN_KEY, **args):
        return run_module(sglang_router_workers, dict(url=self.url, api_key=api_key, **args))

    def urls(self):
        return sorted(w['url'] for w in self.module(state='query')['workers'])


@pytest.fixture(name='fleet', scope='module')
def fixture_fleet(tmp_path_factory, standin_model_dir):
    log_dir = tmp_path_factory.mktemp('smg')
    prefill = Standin('prefill', free_port(), log_dir, standin_model_dir)
    decode = Standin('decode', free_port(), log_dir, standin_model_dir)
    router = Smg(prefill, decode, log_dir)
    started = [prefill, decode]
    yield router, prefill, decode, started, log_dir, standin_model_dir
    for proc in [router.proc] + [s.proc for s in started]:
        stop(proc)


def test_a_decode_server_is_registered_then_removed(fleet):
    router, prefill, decode, started, log_dir, model_dir = fleet
    extra = Standin('decode', free_port(), log_dir, model_dir)
    started.append(extra)
    workers = [dict(url=extra.url, worker_type='decode')]

    added = router.module(state='present', workers=workers, wait_timeout=30)
    assert not added.get('failed'), added['msg']
    assert added['changed'] is True and added['counts']['decode'] == 2
    assert added['pending'] == [] and added['registration_failures'] == []
    again = router.module(state='present', workers=workers)
    assert again['changed'] is False

    removed = router.module(state='absent', workers=workers, wait_timeout=30)
    assert not removed.get('failed'), removed['msg']
    assert removed['changed'] is True and removed['removed'] == workers
    assert router.urls() == sorted([prefill.url, decode.url])


def test_an_unreachable_server_fails_with_smgs_answer_not_a_timeout(fleet):
    router = fleet[0]
    nowhere = 'http://127.0.0.1:%d' % free_port()
    began = time.monotonic()
    result = router.module(state='present', workers=[dict(url=nowhere, worker_type='decode')], wait_timeout=120)
    took = time.monotonic() - began
    assert result['failed'] is True
    [failure] = result['registration_failures']
    assert failure['url'] == nowhere
    assert 'accepted the registration of %s but it ended without a worker' % nowhere in result['msg']
    assert 'answered HTTP 404' in result['msg'] and 'WORKER_NOT_FOUND' in result['msg']
    assert '/workers/%s' % failure['id'] in failure['reason']
    assert 'within wait_timeout' not in result['msg']
    assert took < 60, 'the module waited %.0f s: it should stop once SMG drops the registration' % took
    assert nowhere not in router.urls()


def test_a_registration_in_progress_is_followed_and_removed_once_it_ends(fleet):
    router, prefill, decode, started, log_dir, model_dir = fleet
    port = free_port()
    late = [dict(url='http://127.0.0.1:%d' % port, worker_type='decode')]

    first = router.module(state='present', workers=late, wait_timeout=0)
    assert not first.get('failed'), first['msg']
    [pending] = first['pending']
    assert pending['job_status']['job_type'] == 'AddWorker'
    assert pending['job_status']['status'] in ('pending', 'processing')
    # POSTed again while it runs, SMG answers 409 WORKER_CREATE_IN_PROGRESS naming the same registration.
    second = router.module(state='present', workers=late, wait_timeout=0)
    assert [p['id'] for p in second['pending']] == [pending['id']]

    # The server comes up while SMG still probes it: SMG registers it, then the module removes it.
    started.append(Standin('decode', port, log_dir, model_dir))
    removed = router.module(state='absent', workers=[dict(late[0], id=pending['id'])], wait_timeout=30)
    assert not removed.get('failed'), removed['msg']
    assert removed['changed'] is True and removed['removed'] == late
    assert router.urls() == sorted([prefill.url, decode.url])


def test_a_server_that_requires_a_key_is_registered_with_the_worker_api_key(fleet):
    router, prefill, decode, started, log_dir, model_dir = fleet
    keyed = [Standin('decode', free_port(), log_dir, model_dir, api_key=WORKER_KEY),
             Standin('decode', free_port(), log_dir, model_dir, api_key=WORKER_KEY)]
    started.extend(keyed)
    # Without the key SMG's probes of the server's models answer 401 and the registration never ends.
    stuck = router.module(state='present', workers=[dict(url=keyed[0].url, worker_type='decode')], wait_timeout=4)
    assert stuck['failed'] is True
    assert [p['url'] for p in stuck['pending']] == [keyed[0].url]
    assert 'GET /v1/models 401' in keyed[0].log_path.read_text()

    workers = [dict(url=keyed[1].url, worker_type='decode')]
    added = router.module(state='present', workers=workers, worker_api_key=WORKER_KEY, wait_timeout=30)
    assert not added.get('failed'), added['msg']
    assert keyed[1].url in router.urls()
    assert WORKER_KEY not in json.dumps(added)
    removed = router.module(state='absent', workers=workers, wait_timeout=30)
    assert not removed.get('failed'), removed['msg']
    assert keyed[1].url not in router.urls()


def test_a_user_role_key_may_read_but_not_change_workers(fleet):
    router = fleet[0]
    read = router.module(api_key=USER_KEY, state='query')
    assert not read.get('failed'), read['msg']
    result = router.module(api_key=USER_KEY, state='present',
                           workers=[dict(url='http://127.0.0.1:%d' % free_port(), worker_type='decode')])
    assert result['failed'] is True and result['changed'] is False
    assert 'HTTP 403 (Admin role required for this control plane operation)' in result['msg']
    assert 'needs an api_key with the admin role' in result['msg']
    assert USER_KEY not in json.dumps(result)
