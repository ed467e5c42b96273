# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""The file_set action plugin: what each call asks a node to hold, added to the host's managed state."""

from __future__ import annotations

import hashlib

from ansible_collections.mindverse.sglang_pd.plugins.action.file_set import merged

SERVICE = {
    'owner': 'root', 'group': 'root',
    'directories': [{'path': '/etc/sglang-pd', 'mode': '0750'}],
    'files': [{'path': '/etc/sglang-pd/sglang-decode.sh', 'content': 'exec docker run\n', 'mode': '0750'},
              {'path': '/etc/systemd/system/sglang-decode.service', 'content': '[Unit]\n'}],
    'secret_files': [{'path': '/etc/sglang-pd/sglang-decode.secret.json', 'content': '{"key": "s3cret"}\n'}],
    'absent': ['/etc/sglang-pd/sglang-decode.gate.nft'],
    'units': ['sglang-decode'],
}


def test_a_call_adds_each_file_with_its_digest_folders_removed_paths_and_units():
    managed = merged(None, SERVICE)
    assert managed['files']['/etc/sglang-pd/sglang-decode.sh'] == {
        'sha256': hashlib.sha256(b'exec docker run\n').hexdigest(), 'mode': '0750', 'owner': 'root',
        'group': 'root', 'secret': False}
    assert managed['files']['/etc/systemd/system/sglang-decode.service']['mode'] == '0644'
    assert managed['directories'] == {'/etc/sglang-pd': {'mode': '0750', 'owner': 'root', 'group': 'root'}}
    assert managed['absent'] == ['/etc/sglang-pd/sglang-decode.gate.nft'] and managed['units'] == ['sglang-decode']


def test_a_secret_file_is_added_without_its_content_or_a_digest_of_it():
    entry = merged(None, SERVICE)['files']['/etc/sglang-pd/sglang-decode.secret.json']
    assert entry == {'mode': '0600', 'owner': 'root', 'group': 'root', 'secret': True}
    assert 's3cret' not in repr(merged(None, SERVICE))


def test_later_calls_merge_a_rewritten_file_replaces_it_and_a_removed_one_leaves():
    first = merged(None, SERVICE)
    second = merged(first, {'files': [{'path': '/etc/sglang-pd/sglang-decode.sh', 'content': 'exec docker run -d\n'},
                                      {'path': '/etc/sglang-pd/sglang-decode.gate.nft', 'content': 'table\n'}],
                            'absent': ['/etc/systemd/system/sglang-decode.service'], 'units': ['sglang-decode']})
    assert second['files']['/etc/sglang-pd/sglang-decode.sh']['sha256'] == hashlib.sha256(b'exec docker run -d\n').hexdigest()
    assert '/etc/systemd/system/sglang-decode.service' not in second['files']
    assert second['absent'] == ['/etc/systemd/system/sglang-decode.service']
    assert second['units'] == ['sglang-decode']
    # The first call's state is not changed in place (it is a fact of the host).
    assert '/etc/systemd/system/sglang-decode.service' in first['files']
