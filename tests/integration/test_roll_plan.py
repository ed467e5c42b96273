# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling restart's plan and batches (the sglang_roll role), evaluated by Ansible in check mode.

A small inventory on the local connection: each case plans a roll with the role's plan entry
point, as workers.yml, container_engine.yml and host_stack.yml do, then runs the batches in
check mode (the real playbooks/stages/roll_workers.yml for a worker roll), which only say what they
would restart. What the role decided is read from the run's events: the groups the hosts
joined, the plan, the refusal and the check-mode messages.
"""

from __future__ import annotations

import os
import sys

import pytest
import yaml

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CHECK = 'Assert every batch leaves the routers a prefill and a decode worker'
REPORT = 'Report the roll'
ROLL_GROUPS = ['sglang_roll_canary', 'sglang_roll_prefill', 'sglang_roll_decode', 'sglang_engine_roll', 'sglang_reboot_roll']


def _inventory():
    node = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'ansible_become': False}
    return {'all': {'vars': {'sglang_pd_image_repository': 'registry.example/sglang',
                             'sglang_pd_image_digest': 'sha256:' + 'a' * 64, 'sglang_pd_model_path': '/models/glm'},
                    'children': {'sglang_pd': {'children': {
                        'sglang_router': {'hosts': {'r0': {**node, 'sglang_pd_service_address': '10.0.0.9'}}},
                        'sglang_prefill': {'hosts': {'p0': {**node, 'sglang_pd_service_address': '10.0.0.10'},
                                                     'p1': {**node, 'sglang_pd_service_address': '10.0.0.11'}}},
                        'sglang_decode': {'hosts': {'d0': {**node, 'sglang_pd_service_address': '10.0.0.12'},
                                                    'd1': {**node, 'sglang_pd_service_address': '10.0.0.13'}}},
                    }}}}}


def _playbook(kind, restarting, batch_plays):
    plan = {
        'name': 'Plan the roll',
        'hosts': 'sglang_pd',
        'gather_facts': False,
        'tasks': [{
            'name': 'Plan the batches',
            'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_roll', 'tasks_from': 'plan'},
            'vars': {'sglang_roll_kind': kind, 'sglang_roll_playbook': 'mindverse.sglang_pd.site',
                     'sglang_roll_restart': "{{ inventory_hostname in %r }}" % restarting,
                     'sglang_roll_failure_hint': 'Fix it.'},
        }],
    }
    report = {
        'name': 'Report what the roll decided',
        'hosts': 'localhost',
        'gather_facts': False,
        'tasks': [{'name': REPORT, 'ansible.builtin.debug': {'msg': {
            'groups': "{{ dict(%r | zip(%r | map('extract', groups) | map('default', []))) }}" % (ROLL_GROUPS, ROLL_GROUPS),
            'plan': "{{ hostvars['r0']['sglang_roll_plan'] }}",
        }}}],
    }
    return [plan] + batch_plays + [report]


def _batch_play(group):
    return {'name': 'Run the batches of ' + group, 'hosts': "{{ groups['%s'] | default([]) }}" % group, 'gather_facts': False,
            'serial': "{{ sglang_pd_serial | default(1) }}", 'max_fail_percentage': 0,
            'tasks': [{'name': 'Run this batch',
                       'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_roll', 'tasks_from': 'batch'}}]}


class Roll:
    def __init__(self, runner):
        self.rc = runner.rc
        self.stdout = runner.stdout.read()
        self.events = list(runner.events)

    def said(self, task):
        return [e['event_data']['res'].get('msg') for e in self.events
                if e['event'] == 'runner_on_ok' and e['event_data'].get('task') == task]

    def failed(self, task):
        return [e['event_data']['res'].get('msg') for e in self.events
                if e['event'] == 'runner_on_failed' and e['event_data'].get('task') == task]

    @property
    def report(self):
        return self.said(REPORT)[0]


def _roll(tmp_path, kind, restarting, batch_plays, extravars=None):
    playbook = tmp_path / 'roll.yml'
    playbook.write_text(yaml.safe_dump(_playbook(kind, restarting, batch_plays), sort_keys=False))
    private = tmp_path / 'runner'
    private.mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(private), playbook=str(playbook), inventory=_inventory(), extravars=extravars or {},
        cmdline='--check',
        envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                 'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'), 'ANSIBLE_NOCOLOR': 'true',
                 'ANSIBLE_LOCALHOST_WARNING': 'false',
                 'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')},
        quiet=True,
    )
    return Roll(runner)


ROLL_WORKERS = [{'name': 'Restart the changed workers in batches',
                 'ansible.builtin.import_playbook': os.path.join(REPO, 'playbooks', 'stages', 'roll_workers.yml')}]


def test_a_worker_roll_restarts_the_canary_then_prefill_then_decode(tmp_path):
    roll = _roll(tmp_path, 'workers', ['p1', 'd0', 'd1'], ROLL_WORKERS)
    assert roll.rc == 0, roll.stdout
    assert roll.report['plan'] == {'canary': 'd0', 'batches': [['d0'], ['p1'], ['d1']], 'problems': []}
    assert roll.report['groups'] == {'sglang_roll_canary': ['d0'], 'sglang_roll_prefill': ['p1'], 'sglang_roll_decode': ['d1'],
                                     'sglang_engine_roll': [], 'sglang_reboot_roll': []}
    assert roll.said(CHECK) == ['Restarts: canary d0, then [["p1"], ["d1"]]']
    # Check mode: each batch says which workers would leave the routers, in the plan's order.
    assert roll.said('Say what the batch would restart (check mode)') == [
        'Would take ["http://10.0.0.%s:%s"] out of the routers, drain them and restart them.' % pair
        for pair in (('12', '30200'), ('11', '30100'), ('13', '30200'))]


def test_a_batch_that_takes_every_prefill_host_out_is_refused_before_anything_moves(tmp_path):
    roll = _roll(tmp_path, 'workers', ['p0', 'p1', 'd0', 'd1'], ROLL_WORKERS, {'sglang_pd_serial': 2})
    assert roll.rc != 0
    problems = roll.failed(CHECK)[0]
    assert len(problems) == 1 and problems[0].startswith('batch 1 (p0, p1) would take all 2 prefill hosts out of the routers'), problems
    assert roll.said('Say what the batch would restart (check mode)') == []


def test_the_gap_is_accepted_when_asked_for(tmp_path):
    roll = _roll(tmp_path, 'workers', ['p0', 'p1', 'd0', 'd1'], ROLL_WORKERS,
                 {'sglang_pd_serial': 2, 'sglang_pd_allow_serving_gap': 'true'})
    assert roll.rc == 0, roll.stdout
    assert roll.said(CHECK)[0].startswith('Restarts: canary d0, then [["p0", "p1"], ["d1"]]. Accepted gap: batch 1 (p0, p1)')


def test_a_reboot_roll_reboots_a_node_without_workers_and_takes_no_capacity_out(tmp_path):
    roll = _roll(tmp_path, 'reboot', ['r0'], [_batch_play('sglang_reboot_roll')])
    assert roll.rc == 0, roll.stdout
    assert roll.report['groups']['sglang_reboot_roll'] == ['r0']
    assert roll.said(CHECK) == ['Nothing to restart.']
    assert roll.said('Say what the batch would restart (check mode)') == ['Would restart, their workers serving through it, reboot r0.']


def test_an_engine_roll_leaves_a_daemon_without_serving_workers_to_the_engine_play(tmp_path):
    # r0 runs no worker: its daemon restarts in the container engine's own play, not in a batch.
    roll = _roll(tmp_path, 'engine', ['r0'], [_batch_play('sglang_engine_roll')])
    assert roll.rc == 0, roll.stdout
    assert roll.report['groups']['sglang_engine_roll'] == []
    assert roll.said('Say what the batch would restart (check mode)') == []


def test_a_plan_call_is_checked_against_its_argument_spec(tmp_path):
    roll = _roll(tmp_path, 'restart', ['r0'], [])
    assert roll.rc != 0
    assert 'value of sglang_roll_kind must be one of: workers, engine, reboot, got: restart' in roll.stdout
