# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""_atomic_file: a file is replaced whole or left as it was, with no temporary file left behind."""

from __future__ import annotations

import os

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._atomic_file import staged, write_atomically


def test_write_makes_the_folder_and_sets_the_modes(tmp_path):
    target = tmp_path / 'state' / 'record.json'
    write_atomically(str(target), '{"a": "é"}', 0o600, folder_mode=0o700)
    assert target.read_text(encoding='utf-8') == '{"a": "é"}'
    assert os.stat(target).st_mode & 0o777 == 0o600
    assert os.stat(target.parent).st_mode & 0o777 == 0o700
    assert os.listdir(target.parent) == ['record.json']


def test_write_replaces_an_existing_file_and_its_mode(tmp_path):
    target = tmp_path / 'manifest'
    target.write_bytes(b'old')
    os.chmod(target, 0o600)
    write_atomically(str(target), b'new', 0o644)
    assert target.read_bytes() == b'new' and os.stat(target).st_mode & 0o777 == 0o644


def test_the_block_sees_the_new_content_beside_the_old_file(tmp_path):
    target = tmp_path / 'unit.service'
    target.write_text('old\n')
    with staged(str(target), b'new\n', 0o640) as temp:
        assert os.path.dirname(temp) == str(tmp_path)
        assert open(temp, 'rb').read() == b'new\n' and os.stat(temp).st_mode & 0o777 == 0o640
        assert target.read_text() == 'old\n'
    assert target.read_text() == 'new\n'
    assert sorted(os.listdir(tmp_path)) == ['unit.service']


def test_a_block_that_raises_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    target = tmp_path / 'unit.service'
    target.write_text('old\n')
    with pytest.raises(RuntimeError, match='refused'):
        with staged(str(target), b'new\n', 0o644):
            raise RuntimeError('validate refused it')
    assert target.read_text() == 'old\n'
    assert sorted(os.listdir(tmp_path)) == ['unit.service']


def test_a_rename_that_fails_leaves_no_temporary_file(tmp_path):
    target = tmp_path / 'taken'
    target.mkdir()  # a folder where the file should go: the rename fails
    with pytest.raises(OSError):
        write_atomically(str(target), b'x', 0o644)
    assert os.listdir(tmp_path) == ['taken'] and target.is_dir()
