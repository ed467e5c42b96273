# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""settled_state: a node recorded after a verified run, and every way it can stop matching its record."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _settled
from ansible_collections.mindverse.sglang_pd.plugins.modules import settled_state
from module_runner import run_module

UP = 'ActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\n'
STOPPED = 'ActiveState=inactive\nUnitFileState=enabled\nNeedDaemonReload=no\n'
CONTAINERS = {'sglang-decode': {'image': 'sha256:' + 'a' * 64, 'state': 'running'}}


# Fixtures: a systemctl that answers `systemctl show` for one unit, and Docker's and nftables'
# answers (the containers the services run, the tables), which a unit test cannot read.
@pytest.fixture(name='node')
def fixture_node(tmp_path, monkeypatch):
    """A node: a config folder with a file and a secret, a model folder, units up, one container, one table."""
    folder = tmp_path / 'bin'
    folder.mkdir()
    monkeypatch.setenv('PATH', f"{folder}{os.pathsep}{os.environ['PATH']}")
    node = {'root': tmp_path, 'containers': dict(CONTAINERS), 'tables': {'inet sglang_pd': 'rules-1'}}
    monkeypatch.setattr(_settled, 'container_states', lambda: node['containers'])
    monkeypatch.setattr(_settled, 'table_states', lambda module: node['tables'])

    def systemctl(state):
        script = folder / 'systemctl'
        script.write_text(f"#!/bin/sh\nprintf '%s' '{state}'\n")
        script.chmod(0o755)
    node['systemctl'] = systemctl
    systemctl(UP)
    (tmp_path / 'etc').mkdir()
    (tmp_path / 'etc' / 'sglang-decode.sh').write_text('exec docker run\n')
    os.chmod(tmp_path / 'etc' / 'sglang-decode.sh', 0o750)
    (tmp_path / 'etc' / 'sglang-decode.secret.json').write_text('{"key": "s3cret"}\n')
    os.chmod(tmp_path / 'etc' / 'sglang-decode.secret.json', 0o600)
    (tmp_path / 'model').mkdir()
    (tmp_path / 'model' / 'model-00001.safetensors').write_bytes(b'weights')
    node['managed'] = {
        'files': {str(tmp_path / 'etc' / 'sglang-decode.sh'): {'sha256': hashlib.sha256(b'exec docker run\n').hexdigest(),
                                                               'mode': '0750', 'secret': False},
                  str(tmp_path / 'etc' / 'sglang-decode.secret.json'): {'mode': '0600', 'secret': True}},
        'directories': {str(tmp_path / 'etc'): {'mode': f"{os.stat(tmp_path / 'etc').st_mode & 0o7777:04o}"}},
        'absent': [str(tmp_path / 'etc' / 'old.env')],
        'units': ['sglang-decode'],
        'trees': [str(tmp_path / 'model')],
    }
    node['record'] = str(tmp_path / 'state' / 'settled.json')
    return node


def record(node, digest='plan-1', check_mode=False):
    return run_module(settled_state, {'state': 'recorded', 'path': node['record'], 'digest': digest,
                                      'managed': node['managed']}, check_mode=check_mode)


def compare(node, digest='plan-1', check_mode=False):
    return run_module(settled_state, {'path': node['record'], 'digest': digest}, check_mode=check_mode)


def test_a_recorded_node_that_holds_the_same_is_settled(node):
    first = record(node)
    assert first['settled'] and first['changed'] and first['differences'] == []
    assert os.stat(node['record']).st_mode & 0o777 == 0o600
    again = record(node)
    assert again['settled'] and not again['changed']
    result = compare(node)
    assert result['settled'] and result['differences'] == [] and not result['changed']


def test_the_record_holds_no_secret_and_no_digest_of_one(node):
    record(node)
    text = open(node['record'], encoding='utf-8').read()
    secret = node['root'] / 'etc' / 'sglang-decode.secret.json'
    assert 's3cret' not in text and hashlib.sha256(secret.read_bytes()).hexdigest() not in text
    assert json.loads(text)['observed']['files'][str(secret)]['secret'] is True


def test_without_a_record_or_under_another_plan_the_node_is_not_settled(node):
    assert compare(node)['differences'] == ['no record of a verified site.yml run']
    record(node)
    result = compare(node, digest='plan-2')
    assert not result['settled'] and result['differences'][0].startswith('the plan changed')
    # Kept, and no change counted: the digest keeps plan-2 from skipping, and plan-1 compares the node again.
    assert not result['changed'] and os.path.exists(node['record'])
    assert compare(node, digest='plan-2')['differences'][0].startswith('the plan changed')
    assert compare(node)['settled']


def change_file(node):
    (node['root'] / 'etc' / 'sglang-decode.sh').write_text('exec docker run --edited\n')
    return 'file {}/etc/sglang-decode.sh changed'


def change_mode(node):
    os.chmod(node['root'] / 'etc' / 'sglang-decode.sh', 0o755)
    return 'file {}/etc/sglang-decode.sh changed'


def change_secret(node):
    secret = node['root'] / 'etc' / 'sglang-decode.secret.json'
    secret.write_text('{"key": "other"}\n')
    os.utime(secret, ns=(1, 1))
    return 'file {}/etc/sglang-decode.secret.json changed'


def remove_file(node):
    os.unlink(node['root'] / 'etc' / 'sglang-decode.sh')
    return 'file {}/etc/sglang-decode.sh changed'


def restore_removed(node):
    (node['root'] / 'etc' / 'old.env').write_text('A=1\n')
    return 'removed path {}/etc/old.env changed'


def stop_unit(node):
    node['systemctl'](STOPPED)
    return 'unit sglang-decode changed'


def touch_model(node):
    (node['root'] / 'model' / 'model-00002.safetensors').write_bytes(b'more')
    return 'model folder {}/model changed'


def swap_image(node):
    node['containers'] = {'sglang-decode': {'image': 'sha256:' + 'b' * 64, 'state': 'running'}}
    return 'container of service sglang-decode changed'


def add_container(node):
    node['containers'] = dict(CONTAINERS, **{'sglang-extra': {'image': 'x', 'state': 'running'}})
    return 'container of service sglang-extra is new'


def flush_table(node):
    node['tables'] = {'inet sglang_pd': 'rules-2'}
    return 'nftables table inet sglang_pd changed'


def docker_down(node):
    node['containers'] = None
    return 'container of services: could not be read now'


@pytest.mark.parametrize('change', [change_file, change_mode, change_secret, remove_file, restore_removed, stop_unit,
                                    touch_model, swap_image, add_container, flush_table, docker_down])
def test_each_change_by_hand_is_named_and_the_record_dropped(node, change):
    record(node)
    expected = change(node).format(node['root'])
    result = compare(node)
    assert not result['settled'] and result['differences'] == [expected]
    assert not os.path.exists(node['record'])


def test_check_mode_compares_and_records_nothing(node):
    assert record(node, check_mode=True)['settled'] and not os.path.exists(node['record'])
    record(node)
    stop_unit(node)
    result = compare(node, check_mode=True)
    assert not result['settled'] and os.path.exists(node['record'])


def test_a_node_unlike_what_the_run_asked_is_not_recorded(node):
    (node['root'] / 'etc' / 'sglang-decode.sh').write_text('something else\n')
    node['systemctl'](STOPPED)
    result = record(node)
    assert not result['settled'] and not os.path.exists(node['record'])
    assert result['differences'] == [
        f"file {node['root']}/etc/sglang-decode.sh does not hold what the run wrote",
        "unit sglang-decode is not active, enabled and loaded from its file "
        "({'active_state': 'inactive', 'unit_file_state': 'enabled', 'need_daemon_reload': False})"]


def test_state_absent_removes_the_record(node):
    record(node)
    assert run_module(settled_state, {'state': 'absent', 'path': node['record']})['changed']
    assert not os.path.exists(node['record'])
    assert not run_module(settled_state, {'state': 'absent', 'path': node['record']})['changed']
