# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""worker_host_info on a fixture sysfs tree (8 MI300X GPUs, 8 RoCE NICs) and this machine's files and groups."""

from __future__ import annotations

import grp
import os

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _amdgpu, _rdma
from ansible_collections.mindverse.sglang_pd.plugins.modules import worker_host_info
from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx
from module_runner import run_module


def test_one_call_reads_what_the_two_fact_modules_read_and_sets_no_facts(tmp_path):
    root = fx.roce_node(str(tmp_path), '10.0.0.11')
    result = run_module(worker_host_info, {'root': root}, check_mode=True)
    assert not result.get('failed') and result['changed'] is False
    assert result['amdgpu'] == _amdgpu.collect(root) and result['amdgpu']['gpu_count'] == 8
    assert result['rdma'] == _rdma.collect(root) and result['rdma']['device_count'] == 8
    assert (result['devices'], result['group_ids']) == ([], {})
    assert 'ansible_facts' not in result


def test_only_the_device_files_that_exist_are_listed_in_the_order_given(tmp_path):
    there = tmp_path / 'kfd'
    there.write_text('')
    link = tmp_path / 'dri'
    os.symlink(str(tmp_path / 'gone'), str(link))  # a dangling link is still a device entry
    devices = [str(tmp_path / 'infiniband'), str(link), str(there)]
    result = run_module(worker_host_info, {'root': str(tmp_path), 'devices': devices})
    assert result['devices'] == [str(link), str(there)]
    assert result['amdgpu']['gpu_count'] == 0 and result['rdma']['device_count'] == 0


def test_groups_become_the_hosts_group_ids_and_unknown_ones_are_left_out(tmp_path):
    known = grp.getgrgid(os.getgid()).gr_name
    result = run_module(worker_host_info, {'root': str(tmp_path), 'groups': ['no-such-group-sglang-pd', known]})
    assert result['group_ids'] == {known: str(os.getgid())}
