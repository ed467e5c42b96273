# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A planning pass reports what it found, not a change: a run that changes nothing on a node reports changed=0.

site.yml decides which running workers to restart before anything changes
(roles/sglang_worker/tasks/pending.yml): the sglang_service role runs in check mode over them, as a
planning pass (sglang_service_plan_only). Here the real task file (roles/sglang_worker/tasks/service.yml)
runs one worker whose files differ from the node's, with every file under a temporary folder and
a systemctl that only answers and logs (fake_systemctl.py):
- as the planning pass: the worker is named as would-change, nothing is written or restarted, and
  the host's recap counts no change;
- as the planning pass of a --check run: the same list, counted as a change (a --check run says
  what would change; the batch that would restart the worker only says what it would do);
- as the deploy: the files are written, the service restarts, and the recap counts the change.
"""

from __future__ import annotations

import sys

import fake_systemctl
import pytest
from playbook_runner import run_play_recap

pytest.importorskip('ansible_runner')

HOST = 'worker_0'
WORKER = 'sglang-decode'
# The worker's plan (the role's own plan needs the node): a launch script the node does not have.
PLAN = ("{{ {'name': __sglang_worker.name, 'description': 'test worker', 'docker_argv': ['docker', 'run', '--detach', 'image'],"
        " 'script': '#!/bin/sh\\nexec docker run --detach image\\n', 'env': {'A': '1'}, 'secret': {}, 'secret_file': '',"
        " 'stop_timeout': 120, 'ready_gate': {}} }}")
WRITE = "Write the service's files"
# The systemctl verbs that only read.
READS = ('show', 'is-enabled', 'is-active', 'list-unit-files')


def _run(tmp_path, name, plan_only, check=False):
    """(recap, the unit file's path, the systemctl calls that change something) of one run of the worker's service."""
    root = tmp_path / name
    log = root / 'systemctl.log'
    bin_dir = root / 'bin'
    fake_systemctl.install(bin_dir, log)
    unit = root / 'systemd' / f'{WORKER}.service'
    unit.parent.mkdir()
    play = {
        'name': 'Run the worker service entry point',
        'hosts': 'all',
        'gather_facts': False,
        'environment': {'PATH': f'{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'},
        'tasks': [
            {'name': 'Run the service entry point of the worker role',
             'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_worker', 'tasks_from': 'service.yml'}},
            {'name': 'Report the services whose files changed or would change',
             'ansible.builtin.set_stats': {'data': {'changed_names': '{{ sglang_service_changed_names }}'}, 'per_host': False}},
        ],
    }
    inventory = {'all': {'hosts': {HOST: {
        'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable,
        '__sglang_worker_loop': [{'name': WORKER, 'host': HOST}]}}}}
    extravars = {
        '__sglang_worker_plan_only': plan_only,
        '__sglang_worker_plan': PLAN,
        'sglang_service_config_dir': str(root / 'etc'),
        'sglang_service_follower_path': str(root / 'libexec' / 'follow-container'),
        # The one path of the role that is not configurable (/etc/systemd/system): moved here too.
        '__sglang_service_unit_path': str(unit),
    }
    recap = run_play_recap(tmp_path, play, inventory, name=name, extravars=extravars, cmdline='--check' if check else None)
    calls = log.read_text().splitlines() if log.exists() else []
    return recap, unit, [call for call in calls if call.split()[0] not in READS]


def test_the_planning_pass_names_the_changed_service_and_counts_no_change(tmp_path):
    recap, unit, calls = _run(tmp_path, 'plan', plan_only=True)
    assert recap['artifact_data']['changed_names'] == [WORKER], recap['stdout']
    assert recap['changed'].get(HOST, 0) == 0, recap['changed_tasks']
    assert not unit.exists()
    assert calls == []


def test_the_planning_pass_of_a_check_run_counts_what_would_change(tmp_path):
    recap, unit, calls = _run(tmp_path, 'check', plan_only=True, check=True)
    assert recap['artifact_data']['changed_names'] == [WORKER], recap['stdout']
    assert recap['changed_tasks'] == {HOST: [WRITE]}, recap['stdout']
    assert not unit.exists()
    assert calls == []


def test_a_deploy_writes_restarts_and_counts_the_change(tmp_path):
    recap, unit, calls = _run(tmp_path, 'deploy', plan_only=False)
    assert recap['artifact_data']['changed_names'] == [WORKER], recap['stdout']
    assert recap['changed_tasks'] == {HOST: [WRITE, 'Run the service']}, recap['stdout']
    assert unit.exists()
    assert f'restart {WORKER}' in calls
