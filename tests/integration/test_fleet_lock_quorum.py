# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet lock on a majority of its lock hosts, run through playbooks/stages/lock.yml and unlock.yml.

Each lock host is a local host with its lock file in a temporary folder (its own
sglang_pd_lock_path); an unreachable one is reached over ssh at a closed port. With one of three
lock hosts down, a run takes the lock on the other two, a second run (another controller's lock
folder) is refused while the first holds it, and the end of the first run releases everything.
With two of three down, a run is refused and leaves no lock behind.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from playbook_runner import REPO, run_play

pytest.importorskip('ansible_runner')

LOCK = os.path.join(REPO, 'playbooks', 'stages', 'lock.yml')
UNLOCK = os.path.join(REPO, 'playbooks', 'stages', 'unlock.yml')
# A closed port on this machine: ssh to it is refused at once.
CLOSED_PORT = 1


def write_inventory(tmp_path, reachable, unreachable):
    """An inventory whose sglang_router hosts (the lock hosts) are REACHABLE local hosts and UNREACHABLE ones."""
    hosts = {}
    for host in reachable + unreachable:
        hosts[host] = {'sglang_pd_lock_path': str(tmp_path / host / 'fleet.lock')}
        hosts[host].update({'ansible_connection': 'local'} if host in reachable else
                           {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': CLOSED_PORT,
                            'ansible_ssh_timeout': 3})
    inventory = {'all': {
        'vars': {'ansible_python_interpreter': sys.executable, 'ansible_become': False,
                 'sglang_pd_lock_dir': str(tmp_path / 'controller')},
        'hosts': {'localhost': {'ansible_connection': 'local'}},
        'children': {'sglang_pd': {'children': {'sglang_router': {'hosts': hosts}}}}}}
    path = tmp_path / 'inventory.yml'
    path.write_text(yaml.safe_dump(inventory))
    return path


def ansible_playbook(tmp_path, playbook, inventory, *extra):
    """The command of a run of PLAYBOOK on INVENTORY, as another operator would type it."""
    return [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), str(playbook), '-i', str(inventory), *extra]


def run_environment():
    """What a run needs to find this checkout's collection and settings."""
    return dict(ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
                ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.cache', 'collections'),
                ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default')


def lock_files(tmp_path):
    return sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob('*.lock'))


def test_the_lock_is_held_on_a_majority_refused_to_a_second_run_and_released(tmp_path):
    inventory = write_inventory(tmp_path, ['lock-a', 'lock-b'], ['lock-c'])
    lock_only = tmp_path / 'lock_only.yml'
    lock_only.write_text(yaml.safe_dump([{'import_playbook': LOCK}]))
    second = ansible_playbook(tmp_path, lock_only, inventory, '-e', 'sglang_pd_lock_dir=' + str(tmp_path / 'other-controller'))
    while_held = {
        'name': 'While the lock is held, let a second run try to take it',
        'hosts': 'localhost',
        'gather_facts': False,
        'tasks': [
            {'name': 'Run a second run from another controller', 'ansible.builtin.command': {'argv': second},
             'environment': run_environment(), 'register': 'second', 'changed_when': False, 'failed_when': False},
            {'name': 'Find the lock files', 'ansible.builtin.find': {'paths': str(tmp_path), 'patterns': '*.lock', 'recurse': True},
             'register': 'found'},
            {'name': 'Report', 'ansible.builtin.set_stats': {'per_host': False, 'data': {
                'held': '{{ __sglang_pd_lock_quorum.held }}', 'unreachable': '{{ __sglang_pd_lock_quorum.unreachable }}',
                'files': "{{ found.files | map(attribute='path') | list }}",
                'second_rc': '{{ second.rc }}', 'second_out': '{{ second.stdout }}'}}},
        ],
    }
    whole_run = tmp_path / 'whole_run.yml'
    whole_run.write_text(yaml.safe_dump([{'import_playbook': LOCK}, while_held, {'import_playbook': UNLOCK}]))

    stats = run_play(tmp_path, {'import_playbook': str(whole_run)}, str(inventory))

    assert stats['held'] == ['lock-a', 'lock-b'] and stats['unreachable'] == ['lock-c'], stats
    assert sorted(os.path.relpath(path, tmp_path) for path in stats['files']) == [
        'controller/lock-a.lock', 'lock-a/fleet.lock', 'lock-b/fleet.lock'], stats['files']
    assert int(stats['second_rc']) != 0, stats['second_out']
    assert 'holds the fleet lock on 0 of its 3 lock hosts (lock-a, lock-b, lock-c), 2 needed' in stats['second_out']
    assert 'lock-a locked by ' in stats['second_out'] and 'lock-c unreachable' in stats['second_out']
    # The first run released everything at its end, and the refused run what it had taken.
    assert lock_files(tmp_path) == []


def test_without_a_majority_a_run_is_refused_and_leaves_no_lock(tmp_path):
    inventory = write_inventory(tmp_path, ['lock-a'], ['lock-c', 'lock-d'])
    done = subprocess.run(ansible_playbook(tmp_path, LOCK, inventory), capture_output=True, text=True, check=False,
                          cwd=str(tmp_path), env=dict(os.environ, **run_environment()))
    assert done.returncode != 0, done.stdout
    assert 'holds the fleet lock on 1 of its 3 lock hosts (lock-a, lock-c, lock-d), 2 needed' in done.stdout, done.stdout
    assert 'lock-c unreachable; lock-d unreachable. It released what it took.' in done.stdout, done.stdout
    assert lock_files(tmp_path) == []
