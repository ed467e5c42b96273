# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""plan_digest: one digest for the inventory's collection variables and the collection's files."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.mindverse.sglang_pd.plugins.filter import settled
from ansible_collections.mindverse.sglang_pd.plugins.filter.settled import plan_digest

GROUPS = {'all': ['pd-decode-0', 'pd-prefill-0'], 'sglang_decode': ['pd-decode-0'], 'sglang_prefill': ['pd-prefill-0']}


def hostvars(**changes):
    base = {'pd-decode-0': {'sglang_pd_model_path': '/models/glm', 'sglang_router_api_key': 'k1', 'ansible_host': 'n0',
                            'inventory_hostname': 'pd-decode-0', '__sglang_pd_managed': {'files': {}},
                            'container_engine_data_root': '/var/lib/docker'},
            'pd-prefill-0': {'sglang_pd_model_path': '/models/glm', 'ansible_host': 'n1'}}
    for host, values in changes.items():
        base[host.replace('_', '-')] = dict(base[host.replace('_', '-')], **values)
    return base


def test_the_same_plan_has_the_same_digest_and_it_names_no_secret():
    digest = plan_digest(hostvars(), GROUPS)
    assert digest == plan_digest(hostvars(), GROUPS) and len(digest) == 64 and 'k1' not in digest


@pytest.mark.parametrize('changes, groups', [
    ({'pd_decode_0': {'sglang_pd_model_path': '/models/other'}}, GROUPS),
    ({'pd_decode_0': {'sglang_router_api_key': 'k2'}}, GROUPS),
    ({'pd_decode_0': {'container_engine_data_root': '/data/docker'}}, GROUPS),
    ({'pd_prefill_0': {'ansible_host': 'n2'}}, GROUPS),
    ({}, dict(GROUPS, sglang_decode=['pd-decode-0', 'pd-prefill-0'])),
])
def test_a_changed_variable_host_or_group_changes_the_digest(changes, groups):
    assert plan_digest(hostvars(**changes), groups) != plan_digest(hostvars(), GROUPS)


@pytest.mark.parametrize('changes', [
    {'pd_decode_0': {'__sglang_pd_managed': {'files': {'/etc/x': {}}}}},
    {'pd_decode_0': {'inventory_hostname_short': 'pd'}},
    {'pd_decode_0': {'sglang_pd_skip_settled': False, 'sglang_pd_break_lock': True}},
    {'pd_decode_0': {'sglang_pd_lock_hosts': ['pd-decode-0'], 'sglang_pd_lock_wait': 30}},
    {'pd_prefill_0': {'sglang_pd_lock_dir': '/tmp/locks', 'sglang_pd_lock_path': '/run/fleet.lock'}},
])
def test_facts_of_the_run_magic_and_run_variables_do_not(changes):
    assert plan_digest(hostvars(**changes), GROUPS) == plan_digest(hostvars(), GROUPS)


def test_a_changed_collection_file_changes_it(tmp_path, monkeypatch):
    for folder in ('roles/sglang_worker/templates', 'plugins', 'playbooks'):
        (tmp_path / folder).mkdir(parents=True)
    template = tmp_path / 'roles' / 'sglang_worker' / 'templates' / 'unit.j2'
    template.write_text('[Unit]\n')
    monkeypatch.setattr(settled, 'COLLECTION', str(tmp_path))
    before = plan_digest(hostvars(), GROUPS)
    template.write_text('[Unit]\nDescription=x\n')
    changed = plan_digest(hostvars(), GROUPS)
    assert changed != before
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'notes.md').write_text('docs change nothing on a node\n')
    assert plan_digest(hostvars(), GROUPS) == changed


def test_a_variable_that_cannot_be_evaluated_is_named_without_its_value():
    class Broken(dict):
        def __getitem__(self, name):
            raise ValueError('secret value k1 in the message')
    values = hostvars()
    values['pd-prefill-0'] = Broken(sglang_pd_model_path='x')
    with pytest.raises(AnsibleFilterError) as error:
        plan_digest(values, GROUPS)
    assert 'pd-prefill-0' in str(error.value) and 'k1' not in str(error.value)
