# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A planning pass reports what it found, not a change: a run that changes nothing on a node reports changed=0.

The Docker daemon's restart decision (roles/container_engine/tasks/pending.yml) reads whether its
daemon.json would change, in check mode: here over a daemon.json the node does not have, beside a
systemctl and a Docker API that only answer (fake_systemctl.py, fake_docker.py). It finds the
running daemon would restart, and counts no change, but in a --check run.

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

import fake_docker
import fake_systemctl
import pytest
from playbook_runner import run_play_recap

pytest.importorskip('ansible_runner')

HOST = 'worker_0'
WORKER = 'sglang-decode'
# The worker's plan (the role's own plan needs the node): a launch script, an env file and a unit
# the node does not have, under the temporary folders the run is given.
PLAN = ("{{ {'name': __sglang_worker.name, 'description': 'test worker', 'docker_argv': ['docker', 'run', '--detach', 'image'],"
        " 'script': '#!/bin/sh\\nexec docker run --detach image\\n', 'env': {'A': '1'}, 'secret': {}, 'secret_file': '',"
        " 'stop_timeout': 120, 'ready_gate': {}, 'files': ["
        "{'path': sglang_service_config_dir ~ '/' ~ __sglang_worker.name ~ '.env', 'content': 'A=1\\n', 'mode': '0600'},"
        " {'path': sglang_service_config_dir ~ '/' ~ __sglang_worker.name ~ '.sh',"
        " 'content': '#!/bin/sh\\nexec docker run --detach image\\n', 'mode': '0750'},"
        " {'path': __sglang_service_unit_path, 'content': '[Unit]\\n', 'mode': '0644'}]} }}")
WRITE = "Write the service's files"
FIND_DAEMON_CHANGE = 'Find whether the Docker daemon runs here and whether its configuration would change'
# The systemctl verbs that only read.
READS = ('show', 'is-enabled', 'is-active', 'list-unit-files')


def _recap(tmp_path, name, tasks, check, extravars, host_vars=None, **environment):
    """The recap of TASKS on HOST (this machine), the fake systemctl first on the PATH (it logs to TMP_PATH/NAME/systemctl.log)."""
    bin_dir = tmp_path / name / 'bin'
    fake_systemctl.install(bin_dir, tmp_path / name / 'systemctl.log')
    play = {'name': name, 'hosts': 'all', 'gather_facts': False, 'tasks': tasks,
            'environment': {'PATH': f'{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', **environment}}
    inventory = {'all': {'hosts': {HOST: {'ansible_connection': 'local', 'ansible_become': False,
                                          'ansible_python_interpreter': sys.executable, **(host_vars or {})}}}}
    return run_play_recap(tmp_path, play, inventory, name=name, extravars=extravars, cmdline='--check' if check else None)


def _worker_service(tmp_path, name, plan_only, check=False):
    """(recap, the unit file's path, the systemctl calls that change something) of one run of the worker's service."""
    root = tmp_path / name
    unit = root / 'systemd' / f'{WORKER}.service'
    unit.parent.mkdir(parents=True)
    tasks = [
        {'name': 'Run the service entry point of the worker role',
         'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_worker', 'tasks_from': 'service.yml'}},
        {'name': 'Report the services whose files changed or would change',
         'ansible.builtin.set_stats': {'data': {'changed_names': '{{ sglang_service_changed_names }}'}, 'per_host': False}},
    ]
    extravars = {
        '__sglang_worker_plan_only': plan_only,
        '__sglang_worker_plan': PLAN,
        'sglang_service_config_dir': str(root / 'etc'),
        'sglang_service_follower_path': str(root / 'libexec' / 'follow-container'),
        # The one path of the role that is not configurable (/etc/systemd/system): moved here too.
        '__sglang_service_unit_path': str(unit),
    }
    recap = _recap(tmp_path, name, tasks, check, extravars, {'__sglang_worker_loop': [{'name': WORKER, 'host': HOST}]})
    log = root / 'systemctl.log'
    calls = log.read_text().splitlines() if log.exists() else []
    return recap, unit, [call for call in calls if call.split()[0] not in READS]


def _engine_pending(tmp_path, check):
    """(recap, the daemon.json path) of the container engine's restart decision."""
    root = tmp_path / 'engine'
    root.mkdir()
    daemon = fake_docker.serve(root / 'docker.sock', {'LiveRestoreEnabled': True})
    tasks = [
        {'name': 'Run the pending entry point of the container engine role',
         'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.container_engine', 'tasks_from': 'pending'}},
        {'name': 'Report the decision',
         'ansible.builtin.set_stats': {'data': {'restart': '{{ container_engine_restart }}'}, 'per_host': False}},
    ]
    daemon_json = root / 'daemon.json'
    try:
        recap = _recap(tmp_path, 'engine', tasks, check, {'__container_engine_daemon_json_path': str(daemon_json)},
                       DOCKER_HOST=f"unix://{root / 'docker.sock'}")
    finally:
        daemon.shutdown()
    return recap, daemon_json


def test_the_planning_pass_names_the_changed_service_and_counts_no_change(tmp_path):
    recap, unit, calls = _worker_service(tmp_path, 'plan', plan_only=True)
    assert recap['artifact_data']['changed_names'] == [WORKER], recap['stdout']
    assert recap['changed'].get(HOST, 0) == 0, recap['changed_tasks']
    assert not unit.exists()
    assert calls == []


def test_the_planning_pass_of_a_check_run_counts_what_would_change(tmp_path):
    recap, unit, calls = _worker_service(tmp_path, 'check', plan_only=True, check=True)
    assert recap['artifact_data']['changed_names'] == [WORKER], recap['stdout']
    assert recap['changed_tasks'] == {HOST: [WRITE]}, recap['stdout']
    assert not unit.exists()
    assert calls == []


def test_a_deploy_writes_restarts_and_counts_the_change(tmp_path):
    recap, unit, calls = _worker_service(tmp_path, 'deploy', plan_only=False)
    assert recap['artifact_data']['changed_names'] == [WORKER], recap['stdout']
    assert recap['changed_tasks'] == {HOST: [WRITE, 'Run the service']}, recap['stdout']
    assert unit.exists()
    assert f'restart {WORKER}' in calls


@pytest.mark.parametrize('check', [False, True], ids=['run', 'check'])
def test_the_docker_daemons_restart_decision_counts_no_change_but_in_a_check_run(tmp_path, check):
    recap, daemon_json = _engine_pending(tmp_path, check)
    assert recap['artifact_data']['restart'] == {'pending': True, 'keeps_containers': True}, recap['stdout']
    assert recap['changed_tasks'] == ({HOST: [FIND_DAEMON_CHANGE]} if check else {}), recap['stdout']
    assert not daemon_json.exists()
