# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The fleet lock: one run at a time, stale locks taken over, the holder named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _fleet_lock
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_fleet_lock
from ansible.module_utils import basic
from module_runner import run_module


def a_gone_pid():
    """The pid of a process that has exited."""
    proc = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True, check=True)
    return int(proc.stdout)


def run(path, run_id, pid=None, **extra):
    args = dict(path=str(path), run_id=run_id, controller='ctl-01', user='ops', pid=pid or os.getpid(), playbook='site.yml')
    args.update(extra)
    return run_module(sglang_fleet_lock, args)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(_fleet_lock, 'POLL_INTERVAL', 0.01)


def test_take_is_idempotent_and_release_removes_it(tmp_path):
    path = tmp_path / 'locks' / 'fleet.lock'
    first = run(path, 'run-a')
    assert first['changed'] is True and first['holder']['run_id'] == 'run-a'
    assert oct(path.stat().st_mode & 0o777) == '0o600' and oct(path.parent.stat().st_mode & 0o777) == '0o700'
    assert run(path, 'run-a')['changed'] is False
    assert run(path, 'run-a', state='absent')['changed'] is True
    assert not path.exists()
    assert run(path, 'run-a', state='absent')['changed'] is False


def test_a_second_run_is_refused_with_the_holder_named(tmp_path):
    path = tmp_path / 'fleet.lock'
    run(path, 'run-a')
    result = run(path, 'run-b', pid=os.getpid(), wait=0.05)
    assert result['failed'] is True
    assert result['msg'].startswith('The fleet is locked by ops@ctl-01 (pid %d, site.yml) since ' % os.getpid())
    assert '-e sglang_pd_break_lock=true' in result['msg']
    assert result['holder']['run_id'] == 'run-a'
    # Releasing someone else's lock changes nothing.
    assert run(path, 'run-b', state='absent')['changed'] is False
    assert json.loads(path.read_text())['run_id'] == 'run-a'


def test_a_lock_whose_process_is_gone_is_taken_over_on_the_same_controller(tmp_path, monkeypatch):
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    path = tmp_path / 'fleet.lock'
    run(path, 'run-a', pid=a_gone_pid())
    # Elsewhere (the router host) nobody can see the process: refused.
    assert run(path, 'run-b')['failed'] is True
    result = run(path, 'run-b', local=True)
    assert result['changed'] is True and result['holder']['run_id'] == 'run-b'
    assert result['taken_over']['run_id'] == 'run-a' and 'its run is gone' in result['taken_over']['reason']
    assert any('Took over the fleet lock of ops@ctl-01' in w for w in warnings)


def test_stale_run_ids_and_break_lock_take_over(tmp_path):
    path = tmp_path / 'fleet.lock'
    run(path, 'run-a')
    assert run(path, 'run-b', stale_run_ids=['run-a'])['holder']['run_id'] == 'run-b'
    assert run(path, 'run-c', break_lock=True)['taken_over']['reason'] == 'broken on request (sglang_pd_break_lock)'


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / 'fleet.lock'
    result = run_module(sglang_fleet_lock, dict(path=str(path), run_id='run-a', controller='ctl-01', pid=1), check_mode=True)
    assert result['changed'] is True and not path.exists()


def test_waiting_ends_when_the_other_run_releases(tmp_path):
    path = tmp_path / 'fleet.lock'
    run(path, 'run-a')
    calls = []

    def release_on_first_sleep(_seconds):
        calls.append(1)
        path.unlink()

    lock = _fleet_lock.FleetLock(str(path), dict(run_id='run-b', controller='ctl-02', pid=1), wait=60, sleep=release_on_first_sleep)
    assert lock.acquire()['holder']['run_id'] == 'run-b' and calls == [1]


def test_the_run_is_the_topmost_of_consecutive_ansible_playbook_ancestors(monkeypatch):
    # pid 50: a task's shell under run 30 (main 30 -> worker 40 -> module 45 -> ansible-playbook 50 -> 60).
    # A shell whose command line names ansible-playbook (bash -c "ansible-playbook ...") is not a run.
    table = {60: (50, ['/usr/bin/python3', 'module.py'], '7'), 50: (45, ['python3', '/usr/bin/ansible-playbook', 'site.yml'], '6'),
             45: (40, ['python3', 'AnsiballZ_command.py'], '5'), 40: (30, ['python3', '/usr/bin/ansible-playbook', 'side_effect.yml'], '4'),
             30: (20, ['/usr/bin/ansible-playbook', 'side_effect.yml'], '3'), 20: (1, ['bash', '-c', 'ansible-playbook side_effect.yml'], '2')}
    monkeypatch.setattr(_fleet_lock, '_proc', table.get)
    monkeypatch.setattr(_fleet_lock.socket, 'gethostname', lambda: 'ctl-01')
    assert _fleet_lock.find_run(60) == (50, 'ctl-01:50:6')
    assert _fleet_lock.find_run(45) == (30, 'ctl-01:30:3')
    assert _fleet_lock.find_run(1) == (None, None)


def test_a_remote_lock_needs_the_run_named(tmp_path):
    result = run_module(sglang_fleet_lock, dict(path=str(tmp_path / 'fleet.lock'), run_id='run-a'))
    assert result['failed'] is True and result['msg'] == 'Give controller, pid (only a lock with local=true finds them itself). [SGLPD-LCK-001]'


def test_a_lock_hosts_lock_of_this_controllers_lock_file_is_taken_over(tmp_path):
    # Every run holds its controller's lock file while it holds any lock host: a lock of the
    # same controller and file belongs to a run that is gone, since this run holds that file.
    path = tmp_path / 'fleet.lock'
    run(path, 'run-a', controller_lock='/home/ops/.cache/sglang-pd/router-1.lock')
    assert run(path, 'run-b', controller_lock='/home/ops/.cache/sglang-pd/other.lock')['failed'] is True
    assert run(path, 'run-b', controller='ctl-02', controller_lock='/home/ops/.cache/sglang-pd/router-1.lock')['failed'] is True
    result = run(path, 'run-b', controller_lock='/home/ops/.cache/sglang-pd/router-1.lock')
    assert result['holder']['run_id'] == 'run-b' and result['holder']['controller_lock'].endswith('router-1.lock')
    assert result['taken_over']['reason'] == 'its run is gone (this run holds its lock /home/ops/.cache/sglang-pd/router-1.lock on ctl-01 now)'


def test_the_controllers_own_lock_is_not_taken_over_for_its_file(tmp_path):
    path = tmp_path / 'fleet.lock'
    run(path, 'run-a', local=True, controller_lock=str(path))
    assert run(path, 'run-b', local=True, controller_lock=str(path))['failed'] is True


def test_the_controllers_lock_records_its_own_path(tmp_path, monkeypatch):
    monkeypatch.setattr(sglang_fleet_lock, 'find_run', lambda: (os.getpid(), 'ctl-01:%d:1' % os.getpid()))
    path = tmp_path / 'fleet.lock'
    result = run_module(sglang_fleet_lock, dict(path=str(path), local=True))
    assert result['holder']['controller_lock'] == str(path) and result['holder']['run_id'] == 'ctl-01:%d:1' % os.getpid()
