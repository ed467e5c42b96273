# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""file_set: many files in one call, written only when they differ, never outside dest, secrets never shown."""

from __future__ import annotations

import os

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.modules import file_set
from module_runner import run_module

FILES = [
    {'path': 'pd-node-0/sglang-router.json', 'content': '{}\n'},
    {'path': 'pd-node-0/sglang-router.sh', 'content': '#!/bin/sh\nexec true\n', 'mode': '0755'},
    {'path': 'pd-node-1/sglang-decode.sh', 'content': '#!/bin/sh\nexec false\n', 'mode': '0755'},
]


def test_writes_every_file_with_its_mode(tmp_path):
    result = run_module(file_set, {'dest': str(tmp_path / 'out'), 'files': FILES})
    assert result['changed'] and sorted(result['written']) == sorted(f['path'] for f in FILES)
    assert sorted(result['created']) == sorted(result['written'])
    assert (tmp_path / 'out' / 'pd-node-1' / 'sglang-decode.sh').read_text() == '#!/bin/sh\nexec false\n'
    assert os.stat(tmp_path / 'out' / 'pd-node-0' / 'sglang-router.sh').st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / 'out' / 'pd-node-0' / 'sglang-router.json').st_mode & 0o777 == 0o644


def test_second_run_changes_nothing_and_a_changed_file_is_rewritten_alone(tmp_path):
    run_module(file_set, {'dest': str(tmp_path), 'files': FILES})
    again = run_module(file_set, {'dest': str(tmp_path), 'files': FILES})
    assert not again['changed'] and again['written'] == [] and again['unchanged'] == 3
    (tmp_path / 'pd-node-0' / 'sglang-router.json').write_text('{"edited": true}\n')
    os.chmod(tmp_path / 'pd-node-1' / 'sglang-decode.sh', 0o644)
    third = run_module(file_set, {'dest': str(tmp_path), 'files': FILES})
    assert sorted(third['written']) == ['pd-node-0/sglang-router.json', 'pd-node-1/sglang-decode.sh']
    assert third['created'] == [] and again['created'] == []
    assert (tmp_path / 'pd-node-0' / 'sglang-router.json').read_text() == '{}\n'
    assert not [name for name in os.listdir(tmp_path / 'pd-node-0') if name.startswith('.')]  # no temporary file left


def test_check_mode_writes_nothing(tmp_path):
    result = run_module(file_set, {'dest': str(tmp_path / 'out'), 'files': FILES}, check_mode=True)
    assert result['changed'] and len(result['written']) == 3 and len(result['created']) == 3
    assert not (tmp_path / 'out').exists()


def test_paths_outside_dest_are_refused_before_anything_is_written(tmp_path):
    files = FILES + [{'path': '../escape.sh', 'content': 'x'}, {'path': '/etc/passwd', 'content': 'x'}]
    result = run_module(file_set, {'dest': str(tmp_path / 'out'), 'files': files})
    assert result['failed'] and 'Nothing was changed' in result['msg']
    assert "'../escape.sh'" in result['msg'] and "'/etc/passwd'" in result['msg']
    assert not (tmp_path / 'out').exists() and not (tmp_path / 'escape.sh').exists()


def test_a_path_named_twice_and_a_bad_mode_are_refused(tmp_path):
    files = [FILES[0], dict(FILES[0]), {'path': 'a.sh', 'content': 'x', 'mode': 'rwx'}]
    result = run_module(file_set, {'dest': str(tmp_path), 'files': files})
    assert result['failed'] and 'named twice' in result['msg'] and "'rwx' is not an octal string" in result['msg']
    assert os.listdir(tmp_path) == []


def test_absolute_paths_without_dest_with_directories_secrets_and_absent(tmp_path):
    stale = tmp_path / 'etc' / 'old.secret.json'
    stale.parent.mkdir()
    stale.write_text('{}')
    args = {
        'directories': [{'path': str(tmp_path / 'etc'), 'mode': '0750'}],
        'files': [{'path': str(tmp_path / 'etc' / 'svc.env'), 'content': 'A=1\n', 'mode': '0600'}],
        'secret_files': [{'path': str(tmp_path / 'etc' / 'svc.secret.json'), 'content': '{"api_key": "s3cr3t-value"}\n'}],
        'absent': [str(stale)],
    }
    result = run_module(file_set, args, diff=True)
    assert sorted(result['changed_paths']) == sorted([str(tmp_path / 'etc'), str(tmp_path / 'etc' / 'svc.env'),
                                                      str(tmp_path / 'etc' / 'svc.secret.json'), str(stale)])
    assert sorted(result['written']) == sorted([str(tmp_path / 'etc' / 'svc.env'), str(tmp_path / 'etc' / 'svc.secret.json')])
    assert os.stat(tmp_path / 'etc').st_mode & 0o777 == 0o750
    assert os.stat(tmp_path / 'etc' / 'svc.secret.json').st_mode & 0o777 == 0o600
    assert not stale.exists()
    # The diff shows the plain file and never the secret.
    assert [d['after'] for d in result['diff']] == ['A=1\n']
    assert 's3cr3t-value' not in repr(result)
    again = run_module(file_set, args, diff=True)
    assert not again['changed'] and again['changed_paths'] == [] and 'diff' not in again


def test_a_relative_path_without_dest_is_refused(tmp_path):
    result = run_module(file_set, {'files': [{'path': 'etc/x.env', 'content': 'x'}]})
    assert result['failed'] and "'etc/x.env': write an absolute path" in result['msg']


def test_validate_checks_the_temporary_file_and_a_refused_file_is_not_written(tmp_path):
    # grep -q exits 1 when the file lacks the word: the same contract as `nft --check --file %s`.
    check = 'grep -q table %s'
    good = {'path': 'firewall.nft', 'content': 'table inet x {}\n', 'mode': '0640', 'validate': check}
    first = run_module(file_set, {'dest': str(tmp_path), 'files': [good]})
    assert first['written'] == ['firewall.nft'] and (tmp_path / 'firewall.nft').read_text() == 'table inet x {}\n'

    bad = dict(good, content='garbage\n')
    refused = run_module(file_set, {'dest': str(tmp_path), 'files': [FILES[0], bad]})
    assert refused['failed'] and 'firewall.nft was not written' in refused['msg'] and 'rc 1' in refused['msg']
    assert refused['written'] == [FILES[0]['path']]
    assert (tmp_path / 'firewall.nft').read_text() == 'table inet x {}\n'
    assert sorted(os.listdir(tmp_path)) == ['firewall.nft', 'pd-node-0']

    unchanged = run_module(file_set, {'dest': str(tmp_path), 'files': [dict(good, validate='false %s')]})
    assert not unchanged['changed'], 'an unchanged file is not validated again'
    checked = run_module(file_set, {'dest': str(tmp_path), 'files': [bad]}, check_mode=True)
    assert checked['written'] == ['firewall.nft'] and (tmp_path / 'firewall.nft').read_text() == 'table inet x {}\n'


def test_validate_without_the_placeholder_is_refused(tmp_path):
    result = run_module(file_set, {'dest': str(tmp_path), 'files': [dict(FILES[0], validate='true')]})
    assert result['failed'] and 'Nothing was changed' in result['msg'] and 'must contain %s' in result['msg']
    assert os.listdir(tmp_path) == []


# Fixture: a systemctl that answers `systemctl show` as systemd does, one block per unit asked.
SYSTEMCTL_SHOW = (
    'ActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\n\n'
    'ActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=yes\n\n'
    'ActiveState=inactive\nUnitFileState=enabled\nNeedDaemonReload=no\n\n'
    'ActiveState=active\nUnitFileState=disabled\nNeedDaemonReload=no\n'
)


def fake_systemctl(tmp_path, monkeypatch, output, rc=0):
    """Put a systemctl first on PATH that prints OUTPUT and exits RC; return the file it logs its argv to."""
    folder = tmp_path / 'bin'
    folder.mkdir()
    calls = tmp_path / 'systemctl.calls'
    script = folder / 'systemctl'
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nprintf '%s' '{output}'\nexit {rc}\n")
    script.chmod(0o755)
    monkeypatch.setenv('PATH', f"{folder}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_units_report_their_state_and_only_a_settled_unit_counts_as_up(tmp_path, monkeypatch):
    calls = fake_systemctl(tmp_path, monkeypatch, SYSTEMCTL_SHOW)
    units = ['up', 'stale-unit-file', 'stopped', 'not-enabled']
    result = run_module(file_set, {'dest': str(tmp_path / 'out'), 'files': FILES, 'units': units})
    assert result['units_up'] == ['up']
    assert result['units']['stale-unit-file'] == {'active_state': 'active', 'unit_file_state': 'enabled',
                                                  'need_daemon_reload': True}
    assert result['units']['stopped']['active_state'] == 'inactive'
    assert result['units']['not-enabled']['unit_file_state'] == 'disabled'
    assert calls.read_text().split() == ['show', '--property=ActiveState,UnitFileState,NeedDaemonReload', '--', *units]
    # Read in check mode too, after (would-be) writes, and one call for all of them.
    checked = run_module(file_set, {'dest': str(tmp_path / 'out'), 'files': FILES, 'units': units}, check_mode=True)
    assert checked['units_up'] == ['up'] and len(calls.read_text().splitlines()) == 2


# A failed systemctl, and a reply that does not hold one block per unit asked (not matched to the names).
@pytest.mark.parametrize('rc, units', [(1, ['up', 'b', 'c', 'd']), (0, ['up', 'other'])])
def test_units_that_cannot_be_read_are_never_up(tmp_path, monkeypatch, rc, units):
    fake_systemctl(tmp_path, monkeypatch, SYSTEMCTL_SHOW, rc=rc)
    result = run_module(file_set, {'dest': str(tmp_path / 'out'), 'files': FILES, 'units': units})
    assert result['units_up'] == [] and 'units' not in result and not result.get('failed')
    assert result['written'] and (tmp_path / 'out' / 'pd-node-0' / 'sglang-router.json').exists()


def test_without_units_systemctl_is_not_called(tmp_path, monkeypatch):
    calls = fake_systemctl(tmp_path, monkeypatch, SYSTEMCTL_SHOW)
    result = run_module(file_set, {'dest': str(tmp_path / 'out'), 'files': FILES})
    assert result['units_up'] == [] and 'units' not in result and not calls.exists()
