# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""_model_weights and the model_weights module on real model directories written by model_fixtures."""

from __future__ import annotations

import hashlib
import json
import os
import struct

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _model_weights as mw
from ansible_collections.mindverse.sglang_pd.plugins.modules import model_weights
from model_fixtures import bump_mtime, make_model_dir, manifest_of, safetensors_bytes, shard_name, truncate, write_bytes
from module_runner import run_module

SHA_A = 'a' * 64
SHA_B = 'b' * 64


@pytest.fixture
def model(tmp_path):
    """A three-shard model directory: (path, {name: bytes})."""
    path = str(tmp_path / 'models' / 'glm')
    return path, make_model_dir(path)


@pytest.fixture
def cache_path(tmp_path):
    return str(tmp_path / 'cache' / 'model-hashes.json')


# ----------------------------------------------------------------- manifest text
def test_parse_manifest_reads_entries_and_skips_comments_and_blank_lines():
    text = ('# GLM-4.6, recorded from node-1\n'
            '\n'
            '%s  1234  config.json\n'
            '   %s\t\t42 sub/dir/tokenizer.json   \n' % (SHA_A.upper(), SHA_B))
    assert mw.parse_manifest(text) == {'config.json': (SHA_A, 1234), 'sub/dir/tokenizer.json': (SHA_B, 42)}


@pytest.mark.parametrize('line, reason', [
    ('%s  12' % SHA_A, '3 fields'),
    ('%s  12  a b' % SHA_A, '3 fields'),
    ('abc123  12  config.json', '64 hex digits'),
    ('%s  12  config.json' % ('g' * 64), '64 hex digits'),
    ('%s  twelve  config.json' % SHA_A, 'whole number'),
    ('%s  -12  config.json' % SHA_A, 'whole number'),
    ('%s  12  /etc/passwd' % SHA_A, 'absolute'),
    ('%s  12  ../outside.bin' % SHA_A, 'contains ..'),
    ('%s  12  sub/../../outside.bin' % SHA_A, 'contains ..'),
])
def test_parse_manifest_names_the_line_of_a_malformed_entry(line, reason):
    text = '# header\n%s  1  config.json\n%s\n' % (SHA_B, line)
    with pytest.raises(ValueError) as info:
        mw.parse_manifest(text)
    assert 'line 3' in str(info.value)
    assert reason in str(info.value)


def test_parse_manifest_refuses_a_duplicate_name():
    with pytest.raises(ValueError, match=r'line 2: config\.json is listed twice'):
        mw.parse_manifest('%s  1  config.json\n%s  1  config.json\n' % (SHA_A, SHA_B))


def test_format_manifest_sorts_by_name_and_parses_back():
    entries = {'z.safetensors': (SHA_A, 7), 'config.json': (SHA_B, 12), 'a/b.json': (SHA_A, 0)}
    text = mw.format_manifest(entries)
    assert text == '%s  0  a/b.json\n%s  12  config.json\n%s  7  z.safetensors\n' % (SHA_A, SHA_B, SHA_A)
    assert mw.parse_manifest(text) == entries


# ----------------------------------------------------------------- safetensors header
def test_expected_size_of_a_shard_is_its_real_size(model):
    path, files = model
    for name, data in files.items():
        if name.endswith('.safetensors'):
            assert mw.safetensors_expected_size(os.path.join(path, name)) == len(data)


def test_expected_size_without_tensors_is_the_header_only(tmp_path):
    data = safetensors_bytes({}, metadata={'format': 'pt'})
    path = write_bytes(str(tmp_path / 'empty.safetensors'), data)
    assert mw.safetensors_expected_size(path) == len(data)


@pytest.mark.parametrize('data, reason', [
    (b'\x10\x00\x00', 'shorter than the 8-byte header length'),
    (struct.pack('<Q', 1 << 40) + b'{}', 'not a safetensors file'),
    (struct.pack('<Q', 64) + b'{"a": 1}', 'the file ends after 8'),
    (struct.pack('<Q', 8) + b'not json', 'not valid JSON'),
    (struct.pack('<Q', 2) + b'[]', 'not an object'),
    (struct.pack('<Q', 40) + json.dumps({'w': {'dtype': 'F32', 'shape': [1]}}).encode().ljust(40), 'data_offsets'),
    (struct.pack('<Q', 56) + json.dumps({'w': {'data_offsets': [8, 4]}}).encode().ljust(56), 'data_offsets'),
])
def test_expected_size_refuses_a_garbled_header(tmp_path, data, reason):
    path = write_bytes(str(tmp_path / 'bad.safetensors'), data)
    with pytest.raises(ValueError, match=reason):
        mw.safetensors_expected_size(path)


# ----------------------------------------------------------------- hashing and the cache
@pytest.mark.parametrize('size', [0, 1, 4095, 4096, 4097, 3 * 4096 + 5])
def test_sha256_file_matches_hashlib_across_chunk_boundaries(tmp_path, size):
    data = os.urandom(size)
    path = write_bytes(str(tmp_path / 'blob'), data)
    assert mw.sha256_file(path, chunk=4096) == hashlib.sha256(data).hexdigest()
    assert mw.sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_hash_cache_round_trip_and_invalidation(tmp_path, cache_path):
    path = write_bytes(str(tmp_path / 'blob'), b'weights')
    cache = mw.HashCache(cache_path)
    assert mw.hash_with_cache(path, cache) == (hashlib.sha256(b'weights').hexdigest(), False)
    assert cache.save() is True
    assert cache.save() is False  # nothing new: no write
    with open(cache_path, encoding='utf-8') as handle:
        stored = json.load(handle)
    assert stored[os.path.abspath(path)]['sha256'] == hashlib.sha256(b'weights').hexdigest()

    reloaded = mw.HashCache(cache_path)
    assert mw.hash_with_cache(path, reloaded) == (hashlib.sha256(b'weights').hexdigest(), True)
    assert reloaded.changed is False
    bump_mtime(path)
    assert reloaded.get(path, os.stat(path)) is None
    assert mw.hash_with_cache(path, reloaded)[1] is False
    assert reloaded.changed is True


def test_hash_cache_needs_the_same_size(tmp_path, cache_path):
    path = write_bytes(str(tmp_path / 'blob'), b'weights')
    cache = mw.HashCache(cache_path)
    stat = os.stat(path)
    cache.put(path, stat, SHA_A)
    assert cache.get(path, stat) == SHA_A
    assert cache.get(path, os.stat_result((stat.st_mode, stat.st_ino, stat.st_dev, stat.st_nlink, stat.st_uid,
                                           stat.st_gid, stat.st_size + 1, 0, 0, 0))) is None


@pytest.mark.parametrize('content', [None, '', '{not json', '[1, 2]'])
def test_a_missing_or_corrupt_cache_file_is_an_empty_cache(tmp_path, cache_path, content):
    if content is not None:
        write_bytes(cache_path, content.encode())
    path = write_bytes(str(tmp_path / 'blob'), b'x')
    cache = mw.HashCache(cache_path)
    assert cache.get(path, os.stat(path)) is None
    mw.hash_with_cache(path, cache)
    assert cache.save() is True
    assert mw.HashCache(cache_path).get(path, os.stat(path)) == hashlib.sha256(b'x').hexdigest()


def test_save_keeps_entries_another_run_saved_meanwhile(tmp_path, cache_path):
    one = write_bytes(str(tmp_path / 'one'), b'1')
    two = write_bytes(str(tmp_path / 'two'), b'2')
    first, second = mw.HashCache(cache_path), mw.HashCache(cache_path)
    mw.hash_with_cache(one, first)
    mw.hash_with_cache(two, second)
    first.save()
    second.save()
    merged = mw.HashCache(cache_path)
    assert merged.get(one, os.stat(one)) and merged.get(two, os.stat(two))
    assert os.listdir(os.path.dirname(cache_path)) == ['model-hashes.json']


def test_a_disabled_cache_never_answers_nor_writes(tmp_path):
    path = write_bytes(str(tmp_path / 'blob'), b'x')
    cache = mw.HashCache(None)
    assert mw.hash_with_cache(path, cache)[1] is False
    assert mw.hash_with_cache(path, cache)[1] is False
    assert cache.enabled is False and cache.save() is False


# ----------------------------------------------------------------- verify_dir
def test_verify_dir_passes_a_complete_directory(model, cache_path):
    path, files = model
    result = mw.verify_dir(path, cache=mw.HashCache(cache_path))
    assert result['problems'] == []
    assert result['files'] == len(files)
    assert result['bytes'] == sum(len(data) for data in files.values())
    assert result['hashed_bytes'] == 0  # no manifest: structure and sizes only


def test_verify_dir_passes_a_single_file_model(tmp_path):
    path = str(tmp_path / 'small')
    make_model_dir(path, single=True, extra_files={'tokenizer.model': b'spm'})
    os.unlink(os.path.join(path, 'tokenizer.json'))
    assert mw.verify_dir(path)['problems'] == []


def test_verify_dir_finds_a_truncated_shard_by_its_header(model):
    path, files = model
    name = shard_name(2, 3)
    truncate(os.path.join(path, name), 1000)
    result = mw.verify_dir(path)
    assert result['problems'] == [{'file': name, 'expected': 'size %d (from its safetensors header)' % len(files[name]),
                                   'found': 'size 1000'}]


def test_verify_dir_reports_a_shard_cut_inside_its_header(model):
    path, dummy = model
    name = shard_name(1, 3)
    truncate(os.path.join(path, name), 20)
    (problem,) = mw.verify_dir(path)['problems']
    assert problem['file'] == name
    assert problem['expected'] == 'a readable safetensors header'
    assert 'the file ends after 12' in problem['found']


def test_verify_dir_finds_a_missing_shard_and_config(model):
    path, dummy = model
    os.unlink(os.path.join(path, shard_name(3, 3)))
    os.unlink(os.path.join(path, 'config.json'))
    result = mw.verify_dir(path)
    assert result['problems'] == [
        {'file': 'config.json', 'expected': 'present', 'found': 'missing'},
        {'file': shard_name(3, 3), 'expected': 'present', 'found': 'missing'},
    ]


def test_verify_dir_needs_a_tokenizer_and_weights(tmp_path):
    path = str(tmp_path / 'bare')
    make_model_dir(path, single=True)
    for name in ('tokenizer.json', 'model.safetensors'):
        os.unlink(os.path.join(path, name))
    files = [problem['file'] for problem in mw.verify_dir(path)['problems']]
    assert files == ['tokenizer.json', 'model.safetensors.index.json']
    expected = [problem['expected'] for problem in mw.verify_dir(path)['problems']]
    assert expected == ['present (or tokenizer.model)', 'present (or a single model.safetensors)']


def test_verify_dir_reports_an_index_without_weight_map(model):
    path, dummy = model
    write_bytes(os.path.join(path, mw.INDEX_NAME), b'{"metadata": {}}')
    assert [p['file'] for p in mw.verify_dir(path)['problems']] == [mw.INDEX_NAME]


def test_verify_dir_reports_a_missing_directory(tmp_path):
    result = mw.verify_dir(str(tmp_path / 'nowhere'))
    assert result['problems'] == [{'file': '.', 'expected': 'a model directory', 'found': 'missing'}]
    assert result['files'] == 0


def test_verify_dir_with_a_manifest_finds_a_wrong_hash(model, cache_path):
    path, files = model
    manifest = mw.parse_manifest(manifest_of(files))
    name = shard_name(1, 3)
    data = bytearray(files[name])
    data[-1] ^= 0xFF  # same size, same header: only the hash tells
    write_bytes(os.path.join(path, name), bytes(data))
    (problem,) = mw.verify_dir(path, manifest, mw.HashCache(cache_path))['problems']
    assert problem == {'file': name, 'expected': 'sha256 %s' % hashlib.sha256(files[name]).hexdigest(),
                       'found': 'sha256 %s' % hashlib.sha256(bytes(data)).hexdigest()}


def test_verify_dir_with_a_manifest_checks_sizes_before_hashing(model):
    path, files = model
    manifest = mw.parse_manifest(manifest_of(dict(files, **{'extra/notes.txt': b'hello'})))
    write_bytes(os.path.join(path, 'tokenizer.json'), b'{}')
    result = mw.verify_dir(path, manifest)
    assert result['problems'] == [
        {'file': 'extra/notes.txt', 'expected': 'present', 'found': 'missing'},
        {'file': 'tokenizer.json', 'expected': 'size %d' % len(files['tokenizer.json']), 'found': 'size 2'},
    ]
    assert result['hashed_bytes'] == sum(len(data) for name, data in files.items() if name != 'tokenizer.json')


def test_verify_dir_uses_the_cache_on_a_rerun_and_rehashes_a_touched_file(model, cache_path):
    path, files = model
    manifest = mw.parse_manifest(manifest_of(files))
    total = sum(len(data) for data in files.values())

    cache = mw.HashCache(cache_path)
    first = mw.verify_dir(path, manifest, cache)
    cache.save()
    assert (first['hashed_bytes'], first['cached_files'], first['problems']) == (total, 0, [])

    second = mw.verify_dir(path, manifest, mw.HashCache(cache_path))
    assert (second['hashed_bytes'], second['cached_files'], second['problems']) == (0, len(files), [])

    name = shard_name(2, 3)
    bump_mtime(os.path.join(path, name))
    third = mw.verify_dir(path, manifest, mw.HashCache(cache_path))
    assert (third['hashed_bytes'], third['cached_files']) == (len(files[name]), len(files) - 1)


# ----------------------------------------------------------------- record_manifest and messages
def test_record_manifest_lists_every_file_but_dotfiles(model, cache_path):
    path, files = model
    write_bytes(os.path.join(path, 'sub', 'chat_template.jinja'), b'{{ messages }}')
    write_bytes(os.path.join(path, '.model-00001-of-00003.safetensors.partial'), b'partial')
    write_bytes(os.path.join(path, '.cache', 'huggingface', 'lock'), b'')
    entries = mw.record_manifest(path, mw.HashCache(cache_path))
    expected = dict(files, **{'sub/chat_template.jinja': b'{{ messages }}'})
    assert mw.format_manifest(entries) == manifest_of(expected)


def test_record_manifest_refuses_a_missing_directory(tmp_path):
    with pytest.raises(ValueError, match='is not a directory'):
        mw.record_manifest(str(tmp_path / 'nowhere'))


def test_problems_message_names_each_problem_up_to_the_limit():
    problems = [
        {'file': 'model-00002-of-00003.safetensors', 'expected': 'size 4194400 (from its safetensors header)',
         'found': 'size 1048576'},
        {'file': 'config.json', 'expected': 'present', 'found': 'missing'},
    ]
    assert mw.problems_message('/models/glm', problems) == (
        '/models/glm: 2 problem(s): model-00002-of-00003.safetensors: expected size 4194400 (from its safetensors '
        'header), found size 1048576; config.json: expected present, found missing')
    many = [{'file': 'f%d' % n, 'expected': 'present', 'found': 'missing'} for n in range(12)]
    message = mw.problems_message('/m', many, limit=3)
    assert message == ('/m: 12 problem(s): f0: expected present, found missing; f1: expected present, found missing; '
                       'f2: expected present, found missing; and 9 more')


# ----------------------------------------------------------------- the module
def test_module_verify_passes_and_writes_the_cache(model, cache_path):
    path, files = model
    result = run_module(model_weights, dict(path=path, manifest=manifest_of(files), cache=cache_path))
    assert result.get('failed') is None
    assert result['changed'] is False
    assert (result['files'], result['cached_files'], result['problems']) == (len(files), 0, [])
    assert os.path.exists(cache_path)
    again = run_module(model_weights, dict(path=path, manifest=manifest_of(files), cache=cache_path))
    assert (again['hashed_bytes'], again['cached_files']) == (0, len(files))


def test_module_verify_fails_naming_every_problem(model, cache_path):
    path, files = model
    truncate(os.path.join(path, shard_name(2, 3)), 4096)
    os.unlink(os.path.join(path, 'config.json'))
    result = run_module(model_weights, dict(path=path, manifest=manifest_of(files), cache=cache_path))
    assert result['failed'] is True
    assert result['changed'] is False
    assert result['msg'] == mw.problems_message(path, result['problems']) + ' [SGLPD-MDL-004]'
    assert [p['file'] for p in result['problems']] == ['config.json', shard_name(2, 3)]
    assert result['msg'].startswith('%s: 2 problem(s): config.json: expected present, found missing; ' % path)


def test_module_verify_refuses_a_malformed_manifest(model, cache_path):
    path, dummy = model
    result = run_module(model_weights, dict(path=path, manifest='# pins\nnot-a-hash  1  config.json\n',
                                            cache=cache_path))
    assert result['failed'] is True
    assert 'line 2' in result['msg']


def test_module_verify_in_check_mode_writes_no_cache(model, cache_path):
    path, files = model
    result = run_module(model_weights, dict(path=path, manifest=manifest_of(files), cache=cache_path),
                        check_mode=True)
    assert result['problems'] == [] and result['changed'] is False
    assert not os.path.exists(cache_path)


def test_module_verify_without_cache(model, tmp_path):
    path, files = model
    for dummy in range(2):
        result = run_module(model_weights, dict(path=path, manifest=manifest_of(files), cache=''))
        assert result['hashed_bytes'] == sum(len(data) for data in files.values())


def test_module_record_writes_the_manifest_once(model, cache_path, tmp_path):
    path, files = model
    dest = str(tmp_path / 'manifests' / 'glm.sha256')
    first = run_module(model_weights, dict(path=path, mode='record', dest=dest, cache=cache_path), diff=True)
    assert first['changed'] is True
    assert first['manifest'] == manifest_of(files)
    assert first['diff']['before'] == '' and first['diff']['after'] == manifest_of(files)
    with open(dest, encoding='utf-8') as handle:
        assert handle.read() == manifest_of(files)
    assert oct(os.stat(dest).st_mode & 0o777) == '0o644'
    second = run_module(model_weights, dict(path=path, mode='record', dest=dest, cache=cache_path))
    assert second['changed'] is False
    assert second['files'] == len(files)
    assert sorted(os.listdir(os.path.dirname(dest))) == ['glm.sha256']
    # What record wrote, verify accepts.
    with open(dest, encoding='utf-8') as handle:
        verified = run_module(model_weights, dict(path=path, manifest=handle.read(), cache=cache_path))
    assert verified['problems'] == [] and verified['cached_files'] == len(files)


def test_module_record_without_dest_only_returns_the_text(model, cache_path):
    path, files = model
    result = run_module(model_weights, dict(path=path, mode='record', cache=cache_path))
    assert result['changed'] is False
    assert result['manifest'] == manifest_of(files)
    assert result['bytes'] == sum(len(data) for data in files.values())


def test_module_record_in_check_mode_writes_nothing(model, cache_path, tmp_path):
    path, files = model
    dest = str(tmp_path / 'glm.sha256')
    write_bytes(dest, b'old\n')
    result = run_module(model_weights, dict(path=path, mode='record', dest=dest, cache=cache_path),
                        check_mode=True, diff=True)
    assert result['changed'] is True
    assert result['diff']['before'] == 'old\n'
    with open(dest, encoding='utf-8') as handle:
        assert handle.read() == 'old\n'
    assert not os.path.exists(cache_path)


def test_module_record_fails_on_a_missing_directory(tmp_path, cache_path):
    result = run_module(model_weights, dict(path=str(tmp_path / 'nowhere'), mode='record', cache=cache_path))
    assert result['failed'] is True
    assert 'is not a directory' in result['msg']
