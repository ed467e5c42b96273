# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""No worker joins a router without a passing pair probe: the gate in site.yml, a rolled restart and scale-out.

The real SMG router (smg 1.13.0, the successor of sglang-router) runs in PD mode on loopback
over a prefill and a decode stand-in (tests/standin). Each path's own tasks, read from the
collection's files, run with ansible-runner against an inventory of these local processes:

- site.yml's first start: the play of playbooks/stages/workers.yml that probes the workers
  this run started, then the registration the router stage makes (here the sglang_router
  role's register entry point: the router stage itself starts a service, which needs a node);
- a rolled restart: the probe and register tasks of roles/sglang_roll/tasks/batch.yml, in order,
  for a batch whose workers are out of the routers and healthy again (the restart itself needs
  a node);
- scale-out: the post_tasks of playbooks/scale_out.yml's play that registers the new workers.

The broken pair is a new prefill whose KV transfers longer than 1024 pages fail (the stand-in's
long_transfer_fails fault): its short probe passes, its long probe fails, the run stops with
the pair named, and the router's /workers never lists it. A good new decode passes both probes
and is registered; only the pairs of the changed worker carry KV (once per pair per change).
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml
from playbook_runner import REPO, run_playbook
from local_pd import Standin, free_port, start_smg, stop

pytest.importorskip('ansible_runner')
pytest.importorskip('smg', reason='the SMG router (pip package smg, pinned in requirements-test.txt) is not installed')
pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason='the stand-in needs Python 3.10 or later')

LONG_FAULT = {'SGLANG_STANDIN_KV_FAULT': 'long_transfer_fails', 'SGLANG_STANDIN_KV_FAULT_MAX_PAGES': '1024'}


def standin(mode, log_dir, model_dir, monkeypatch, **env):
    """A stand-in of MODE on a free port, with ENV (a fault) in its environment only."""
    with monkeypatch.context() as scoped:
        for name, value in env.items():
            scoped.setenv(name, value)
        # Decode gives up on a KV that does not come after 5 s (SGLANG_DISAGGREGATION_WAITING_TIMEOUT).
        scoped.setenv('SGLANG_DISAGGREGATION_WAITING_TIMEOUT', '5')
        return Standin(mode, free_port(), log_dir, model_dir)


def get_json(url, path):
    host, port = url.rsplit('/', 1)[-1].split(':')
    client = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        client.request('GET', path)
        return json.loads(client.getresponse().read())
    finally:
        client.close()


def kv_transfers(server):
    return get_json(server.url, '/get_server_info')['standin_kv_transfers']


class Router:
    """SMG in PD mode over PREFILL and DECODE, on loopback."""

    def __init__(self, prefill, decode, log_dir):
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.log_path = log_dir / 'smg.log'
        self.proc = start_smg(prefill, [decode], self.port, self.log_path,
                              ['--worker-startup-timeout-secs', '10', '--worker-startup-check-interval', '1'])
        deadline = time.monotonic() + 30
        while len(self.urls()) < 2:
            assert time.monotonic() < deadline, 'SMG did not list its workers: %s' % self.log_path.read_text()[-2000:]
            time.sleep(0.2)

    def urls(self):
        try:
            return sorted(worker['url'] for worker in get_json(self.url, '/workers')['workers'])
        except (OSError, ValueError, KeyError):
            return []


@pytest.fixture(name='fleet', scope='module')
def fixture_fleet(tmp_path_factory, standin_model_dir):
    """A serving prefill and decode behind the router; a broken and a good new worker started per test."""
    log_dir = tmp_path_factory.mktemp('gate')
    with pytest.MonkeyPatch.context() as monkeypatch:
        prefill = standin('prefill', log_dir, standin_model_dir, monkeypatch)
        decode = standin('decode', log_dir, standin_model_dir, monkeypatch)
        router = Router(prefill, decode, log_dir)
        started = [prefill, decode]

        def new(mode, **env):
            started.append(standin(mode, log_dir, standin_model_dir, monkeypatch, **env))
            return started[-1]

        yield dict(router=router, prefill=prefill, decode=decode, new=new, dir=log_dir)
    for proc in [router.proc] + [server.proc for server in started]:
        stop(proc)


def inventory(fleet, tmp_path, prefills, decodes, plans=None):
    """PREFILLS and DECODES ({host: stand-in}) and the router r0, all on this machine."""
    local = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable,
             'sglang_pd_service_address': '127.0.0.1', 'sglang_service_config_dir': str(tmp_path / 'etc')}

    def host(name, server, mode):
        workers = [dict({'port': server.port}, **({'bootstrap_port': server.bootstrap_port} if mode == 'prefill' else {}))]
        return {'sglang_pd_%s_workers' % mode: workers, **({'sglang_worker_restart_plan': plans[name]} if plans and name in plans else {})}

    return {'all': {'vars': local, 'children': {
        'sglang_prefill': {'hosts': {name: host(name, server, 'prefill') for name, server in prefills.items()}},
        'sglang_decode': {'hosts': {name: host(name, server, 'decode') for name, server in decodes.items()}},
        'sglang_router': {'hosts': {'r0': {'sglang_router_port': fleet['router'].port}}},
    }}}


def run(tmp_path, name, plays, hosts):
    """Run PLAYS; (rc, Ansible's output)."""
    playbook = tmp_path / (name + '.yml')
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    private = tmp_path / ('runner-' + name)
    private.mkdir()
    runner = run_playbook(private, playbook, hosts)
    return runner.rc, runner.stdout.read()


def load(path):
    with open(os.path.join(REPO, path), encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def local_play(play):
    """A play of the collection as it is, become aside (these are local processes)."""
    return {key: value for key, value in play.items() if key != 'become'}


def named(plays_or_tasks, name):
    return next(item for item in plays_or_tasks if item.get('name') == name)


def pair(prefill, decode):
    return 'prefill %s (bootstrap 127.0.0.1:%d) -> decode %s' % (prefill.url, prefill.bootstrap_port, decode.url)


# ---------------------------------------------------------------- site.yml's first start
def site_plays():
    """workers.yml's probe of the started workers, then the registration of every worker (the router stage's)."""
    probe = local_play(named(load('playbooks/stages/workers.yml'),
                             'Probe the workers that started with every worker of the other mode before they are registered'))
    register = {'name': 'Register every worker of the inventory (what the router stage does next)', 'hosts': 'sglang_router',
                'gather_facts': False, 'tasks': [{
                    'name': 'Register the workers', 'ansible.builtin.include_role': {
                        'name': 'mindverse.sglang_pd.sglang_router', 'tasks_from': 'register'},
                    'vars': {'sglang_router_register_state': 'present', 'sglang_router_register_workers':
                             "{{ (groups['sglang_prefill'] | mindverse.sglang_pd.pd_workers(hostvars, 'prefill'))"
                             " + (groups['sglang_decode'] | mindverse.sglang_pd.pd_workers(hostvars, 'decode')) }}"}}]}
    return [probe, register]


SETTLED = {'p0': {'restart': [], 'unchanged': ['sglang-prefill']}, 'd0': {'restart': [], 'unchanged': ['sglang-decode']}}


def test_site_refuses_a_started_prefill_whose_long_transfer_fails(fleet, tmp_path):
    broken = fleet['new']('prefill', **LONG_FAULT)
    hosts = inventory(fleet, tmp_path, {'p0': fleet['prefill'], 'p1': broken}, {'d0': fleet['decode']}, SETTLED)
    rc, out = run(tmp_path, 'site', site_plays(), hosts)
    assert rc != 0, out
    assert 'its workers are not registered with any router' in out and '[SGLPD-PRB-003]' in out
    assert 'long probe (8192-word prompt, max_tokens 256) of PD pair %s' % pair(broken, fleet['decode']) in out
    assert broken.url not in fleet['router'].urls()
    assert fleet['router'].urls() == sorted([fleet['prefill'].url, fleet['decode'].url])  # nothing taken out


def test_site_probes_a_started_decode_short_and_long_then_registers_it(fleet, tmp_path):
    good = fleet['new']('decode')
    hosts = inventory(fleet, tmp_path, {'p0': fleet['prefill']}, {'d0': fleet['decode'], 'd1': good}, SETTLED)
    before = kv_transfers(fleet['decode'])
    rc, out = run(tmp_path, 'site-good', site_plays(), hosts)
    assert rc == 0, out
    assert '1 prefill -> decode pairs served a request (1 of them the long one)' in out
    assert kv_transfers(good) == 2  # the short and the long request, once
    assert kv_transfers(fleet['decode']) == before  # the unchanged pair p0 -> d0 is not probed again
    assert good.url in fleet['router'].urls()


# ---------------------------------------------------------------- a rolled restart
def roll_plays(batch_host):
    """The batch's probe and registration, as roles/sglang_roll/tasks/batch.yml runs them, for BATCH_HOST."""
    batch = named(load('roles/sglang_roll/tasks/batch.yml'), 'Restart the batch\'s workers')['block']
    steps = [named(batch, 'Probe the batch\'s workers with every worker of the other mode before they are registered'),
             named(batch, 'Register the batch\'s workers again')]
    assert batch.index(steps[0]) + 1 == batch.index(steps[1])  # the probe right before the registration
    workers = ("{{ (groups['sglang_prefill'] | select('equalto', inventory_hostname) | mindverse.sglang_pd.pd_workers(hostvars, 'prefill'))"
               " + (groups['sglang_decode'] | select('equalto', inventory_hostname) | mindverse.sglang_pd.pd_workers(hostvars, 'decode')) }}")
    return [{'name': 'A batch whose workers restarted and answer their health check again', 'hosts': batch_host,
             'gather_facts': False, 'tasks': [
                 {'name': 'The batch (what the batch entry point lists first)', 'ansible.builtin.set_fact': {
                     'sglang_roll_batch': {'hosts': [batch_host], 'workers': workers}}},
                 *steps]}]


def test_a_rolled_restart_does_not_register_a_worker_whose_pair_fails(fleet, tmp_path):
    broken = fleet['new']('prefill', **LONG_FAULT)  # p1 restarted into a broken long transfer, out of the router
    hosts = inventory(fleet, tmp_path, {'p0': fleet['prefill'], 'p1': broken}, {'d0': fleet['decode']})
    rc, out = run(tmp_path, 'roll', roll_plays('p1'), hosts)
    assert rc != 0, out
    assert '[SGLPD-PRB-003]' in out and 'long probe (8192-word prompt, max_tokens 256) of PD pair %s' % pair(broken, fleet['decode']) in out
    assert 'Register the batch\'s workers again' not in out.split('Stop before the workers of the failed pairs are registered')[-1]
    assert broken.url not in fleet['router'].urls()


# ---------------------------------------------------------------- scale-out
def scale_out_plays(new_hosts):
    play = named(load('playbooks/scale_out.yml'), 'Start the new workers and register them with the routers')
    tasks = json.loads(json.dumps(play['post_tasks']))
    for task in tasks:  # the file the play includes, relative to playbooks/ where it lives
        include = task.get('ansible.builtin.include_tasks')
        if include:
            include['file'] = os.path.join(REPO, 'playbooks', include['file'])
    return [{'name': play['name'], 'hosts': new_hosts, 'gather_facts': False, 'tasks': tasks}]


def test_scale_out_refuses_a_new_prefill_whose_long_transfer_fails(fleet, tmp_path):
    broken = fleet['new']('prefill', **LONG_FAULT)
    hosts = inventory(fleet, tmp_path, {'p0': fleet['prefill'], 'p1': broken}, {'d0': fleet['decode']})
    rc, out = run(tmp_path, 'scale-out', scale_out_plays('p1'), hosts)
    assert rc != 0, out
    assert '[SGLPD-PRB-003]' in out and 'long probe (8192-word prompt, max_tokens 256) of PD pair %s' % pair(broken, fleet['decode']) in out
    assert broken.url not in fleet['router'].urls()
    assert not (Path(tmp_path) / 'etc').exists()  # the routers' start-up workers not written either


class Down:
    """A worker of the inventory that does not run (its host is down): the router does not list it."""

    def __init__(self):
        self.port, self.bootstrap_port = free_port(), free_port()


def test_scale_out_probes_a_new_decode_short_and_long_then_registers_it(fleet, tmp_path):
    good = fleet['new']('decode')
    # px is down and not in the router: no counterpart of the new decode, so no pair with it is probed.
    hosts = inventory(fleet, tmp_path, {'p0': fleet['prefill'], 'px': Down()}, {'d0': fleet['decode'], 'd2': good})
    rc, out = run(tmp_path, 'scale-out-good', scale_out_plays('d2'), hosts)
    assert rc == 0, out
    assert '1 prefill -> decode pairs served a request (1 of them the long one)' in out
    assert kv_transfers(good) == 2
    assert good.url in fleet['router'].urls()
