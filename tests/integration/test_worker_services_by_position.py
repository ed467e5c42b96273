# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The workers of every host are written and started at once, position by position, each with its own files.

Ansible runs an included role once for all the hosts that include it with the same loop item, and
host after host when the items differ: looping over the workers themselves (each with its own
name) ran one host at a time, 2,000 times over at 1,000 nodes of 2 workers. The real task file
(roles/sglang_worker/tasks/service.yml) runs here through ansible-runner, in plan mode (check
mode: nothing is written), for three hosts with 1, 1 and 2 workers.
"""

from __future__ import annotations

import collections
import os
import sys

import fake_systemctl
import pytest
import yaml

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# Each worker's plan, named after the worker of the loop (the role's own plan needs the node).
PLAN = ("{{ {'name': __sglang_worker.name, 'description': 'test worker', 'docker_argv': ['docker', 'run', '--detach', 'image'],"
        " 'script': '#!/bin/sh\\n', 'env': {}, 'secret': {}, 'secret_file': '', 'stop_timeout': 120,"
        " 'ready_gate': {}, 'files': ["
        "{'path': '/etc/sglang-pd/' ~ __sglang_worker.name ~ '.sh', 'content': '#!/bin/sh\\n', 'mode': '0750'},"
        " {'path': '/etc/systemd/system/' ~ __sglang_worker.name ~ '.service', 'content': '[Unit]\\n', 'mode': '0644'}]} }}")
WORKERS = {'host-a': ['sglang-prefill'], 'host-b': ['sglang-decode'], 'host-c': ['sglang-decode', 'sglang-decode-1']}


def _inventory():
    hosts = {}
    for host, names in WORKERS.items():
        hosts[host] = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable,
                       '__sglang_worker_loop': [{'name': name, 'host': host} for name in names]}
    return {'all': {'hosts': hosts}}


def test_each_position_runs_on_every_host_at_once_with_that_hosts_worker(tmp_path):
    fake_bin = tmp_path / 'bin'
    fake_systemctl.install(fake_bin, tmp_path / 'systemctl.log')
    playbook = tmp_path / 'services.yml'
    playbook.write_text(yaml.safe_dump([{
        'name': 'Plan the worker services',
        'hosts': 'all',
        'gather_facts': False,
        'tasks': [{'name': 'Run the service entry point of the worker role',
                   'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_worker', 'tasks_from': 'service.yml'}}],
    }]))
    (tmp_path / 'runner').mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / 'runner'),
        playbook=str(playbook),
        inventory=_inventory(),
        extravars={'__sglang_worker_plan_only': True, '__sglang_worker_plan': PLAN},
        envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                 'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
                 'ANSIBLE_NOCOLOR': 'true', 'PATH': f"{fake_bin}{os.pathsep}{os.environ['PATH']}"},
        quiet=True,
    )
    stdout = runner.stdout.read()
    assert runner.rc == 0, stdout
    writes = [e['event_data'] for e in runner.events
              if e['event'] == 'runner_on_ok' and e['event_data']['task'] == "Write the service's files"]
    hosts_per_task = collections.defaultdict(set)
    for write in writes:
        hosts_per_task[write['task_uuid']].add(write['host'])
    # Two positions, two runs of the service role: the first for all three hosts, the second for host-c.
    assert sorted(map(sorted, hosts_per_task.values())) == [['host-a', 'host-b', 'host-c'], ['host-c']], stdout
    # Each host planned its own workers' files in the shared runs.
    for host, names in WORKERS.items():
        written = [path for write in writes if write['host'] == host for path in write['res']['written']]
        assert sorted(os.path.basename(path) for path in written if path.endswith('.sh')) == sorted(f'{n}.sh' for n in names)
