# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""free_space: the model directory's free space, a warning below the threshold, never a failure on the space itself."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ansible.module_utils import basic
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _free_space
from ansible_collections.mindverse.sglang_pd.plugins.modules import free_space
from module_runner import run_module


@pytest.fixture(name='warnings')
def fixture_warnings(monkeypatch):
    found = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: found.append(msg))
    return found


@pytest.fixture(name='disk')
def fixture_disk(monkeypatch):
    """A file system with 80 MiB free, whatever the folder."""
    monkeypatch.setattr(_free_space.os, 'statvfs',
                        lambda path: SimpleNamespace(f_bavail=20480, f_frsize=4096))
    return 80 * 1024 ** 2


def test_below_the_threshold_it_warns_and_reports_low(tmp_path, warnings, disk):
    result = run_module(free_space, {'path': str(tmp_path / 'glm'), 'warn_below_bytes': 10 * 1024 ** 3,
                                     'place': 'the model directory', 'warn_setting': 'sglang_model_free_warn_bytes'},
                        check_mode=True)
    assert result.get('failed') is not True and result['changed'] is False
    assert (result['free_bytes'], result['low'], result['measured']) == (disk, True, str(tmp_path))
    assert len(warnings) == 1 and warnings[0].startswith('the model directory %s has 80.0 MiB free' % (tmp_path / 'glm'))
    assert 'sglang_model_free_warn_bytes' in warnings[0]


def test_above_the_threshold_it_says_nothing(tmp_path, warnings, disk):
    result = run_module(free_space, {'path': str(tmp_path), 'warn_below_bytes': disk})
    assert (result['free_bytes'], result['low'], warnings) == (disk, False, [])
