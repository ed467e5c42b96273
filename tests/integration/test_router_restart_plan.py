# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether site.yml's router stage drains a router at the balancers: the router role's pending entry point.

playbooks/stages/router.yml runs roles/sglang_router/tasks/pending.yml first, one router at a time,
and drains the router at every balancer only when it says the router restarts: the router runs
and its files (command line, environment, secrets, unit) would change. Here the real entry point
runs on this machine, every file under a temporary folder, the router's flags from a cache file
(no image to probe), and a systemctl that only answers and logs (fake_systemctl.py):
- files that differ from the node's, the unit active: a restart, nothing written or restarted,
  and the recap counts no change (a planning pass);
- the same files on the node already: no restart;
- files that differ, the unit not active (a first start, or a router systemd gave up on): no
  restart, so nothing is drained at a balancer that has no such router serving.
The order the stage then follows (drain, restart, /readiness, back) is playbooks/tasks/router_at_balancers.yml,
run under load by the scale scenario's router_flag phase.
"""

from __future__ import annotations

import json
import sys

import fake_systemctl
import pytest
from playbook_runner import run_play_recap

pytest.importorskip('ansible_runner')

HOST = 'router_0'
ROUTER = 'sglang-router'
IMAGE = 'registry.example/sglang@sha256:' + 'a' * 64
# The router's plan (the role's own plan needs the image's flags and the workers): a launch script,
# an env file and a unit, under the temporary folders the run is given.
PLAN = ("{{ {'name': 'sglang-router', 'description': 'test router', 'docker_argv': ['docker', 'run', '--detach', 'image'],"
        " 'script': '#!/bin/sh\\nexec docker run --detach image\\n', 'env': {'A': '1'}, 'secret': {}, 'secret_file': '',"
        " 'stop_timeout': 60, 'ready_gate': {}, 'launch': {'missing_secret_flags': [], 'dropped': []},"
        " 'url': 'http://127.0.0.1:1', 'files': ["
        "{'path': sglang_service_config_dir ~ '/sglang-router.env', 'content': router_env_text, 'mode': '0600'},"
        " {'path': __sglang_service_unit_path, 'content': router_unit_text, 'mode': '0644'}]} }}")
READS = ('show', 'is-enabled', 'is-active', 'list-unit-files')


def _pending(tmp_path, name, on_node, active='active', planned='1'):
    """(recap, the systemctl calls that change something, the env file) of one run of the pending entry point.

    ON_NODE: the env file's value already on the node (None: no file); PLANNED: the value the plan writes.
    """
    root = tmp_path / name
    # The folders the service role makes, as it makes them: only the files may differ.
    (root / 'etc').mkdir(parents=True, mode=0o750)
    (root / 'etc').chmod(0o750)
    (root / 'libexec').mkdir(mode=0o755)
    (root / 'libexec').chmod(0o755)
    (root / 'systemd').mkdir()
    unit = root / 'systemd' / f'{ROUTER}.service'
    env_file = root / 'etc' / f'{ROUTER}.env'
    if on_node is not None:
        env_file.write_text(f'A={on_node}\n')
        env_file.chmod(0o600)
        unit.write_text('[Unit]\n')
        unit.chmod(0o644)
    flags = root / 'flags.json'
    flags.write_text(json.dumps({'generation': 'sglang-router', 'flags': ['--pd-disaggregation'], 'image': IMAGE}))
    bin_dir = root / 'bin'
    fake_systemctl.install(bin_dir, root / 'systemctl.log', active=active)
    play = {'name': name, 'hosts': 'all', 'gather_facts': False,
            'environment': {'PATH': f'{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'},
            'tasks': [
                {'name': 'Run the pending entry point of the router role',
                 'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_router', 'tasks_from': 'pending'}},
                {'name': 'Report the decision',
                 'ansible.builtin.set_stats': {'data': {'plan': '{{ sglang_router_restart_plan }}'}, 'per_host': False}}]}
    inventory = {'all': {'hosts': {HOST: {'ansible_connection': 'local', 'ansible_become': False,
                                          'ansible_python_interpreter': sys.executable}}}}
    extravars = {
        'sglang_router_image': IMAGE,
        '__sglang_router_flags_file': str(flags),
        '__sglang_router_plan': PLAN,
        'router_env_text': f'A={planned}\n',
        'router_unit_text': '[Unit]\n',
        'sglang_service_config_dir': str(root / 'etc'),
        'sglang_service_follower_path': str(root / 'libexec' / 'follow-container'),
        # The one path of the service role that is not configurable (/etc/systemd/system): moved here too.
        '__sglang_service_unit_path': str(unit),
    }
    recap = run_play_recap(tmp_path, play, inventory, name=name, extravars=extravars)
    log = root / 'systemctl.log'
    calls = log.read_text().splitlines() if log.exists() else []
    return recap, [call for call in calls if call.split()[0] not in READS], env_file


def test_a_running_router_whose_files_change_restarts_and_nothing_is_written(tmp_path):
    recap, calls, env_file = _pending(tmp_path, 'changed', on_node='0')
    assert recap['artifact_data']['plan'] == {'restart': True}, recap['stdout']
    assert recap['changed'].get(HOST, 0) == 0, recap['changed_tasks']
    assert env_file.read_text() == 'A=0\n'
    assert calls == []


def test_a_running_router_whose_files_are_on_the_node_does_not_restart(tmp_path):
    recap, calls, _env_file = _pending(tmp_path, 'same', on_node='1')
    assert recap['artifact_data']['plan'] == {'restart': False}, recap['stdout']
    assert recap['changed'].get(HOST, 0) == 0, recap['changed_tasks']
    assert calls == []


def test_a_router_that_does_not_run_is_not_drained(tmp_path):
    recap, calls, env_file = _pending(tmp_path, 'stopped', on_node='0', active='inactive')
    assert recap['artifact_data']['plan'] == {'restart': False}, recap['stdout']
    assert env_file.read_text() == 'A=0\n'
    assert calls == []
