#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: hashing model shards with _model_weights against ``sha256sum`` of the same files.

On one model directory of safetensors shards (written here: random data, real headers), side by side:

* sha256_file          - _model_weights.sha256_file over every shard, in-process (reused buffer + readinto);
* hashlib.file_digest  - the standard library's own file hashing, for reference (Python >= 3.11);
* sha256sum            - coreutils ``sha256sum`` of the same files, one process;
* verify_dir, first    - the full check with a manifest and an empty hash cache (every file hashed);
* verify_dir, cached   - the same check again with the saved cache (nothing hashed);
* module, cached       - the model_weights module as Ansible runs it (a Python process), cached.

The files are read from the page cache (they were just written and one warm-up pass reads them),
so the numbers measure hashing, not the disk.

Usage (from the repository root):
    .venv/bin/python bench/bench_model_verify.py --size-gib 1 --repeat 3 --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, '.cache', 'collections'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'unit'))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_image_artifacts import timed  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import (  # noqa: E402 pylint: disable=wrong-import-position
    _model_weights as mw,
)
from model_fixtures import make_model_dir  # noqa: E402 pylint: disable=wrong-import-position

GIB = 1024 ** 3
MIB = 1024 ** 2
BLOCK = 16 * MIB
DEFAULT_SHARD_MIB = 256


def write_shard(path, size):
    """A safetensors shard: a real header for one U8 tensor of ``size`` bytes, then random data, streamed."""
    raw = json.dumps({'weight': {'dtype': 'U8', 'shape': [size], 'data_offsets': [0, size]}},
                     separators=(',', ':')).encode()
    raw += b' ' * (-len(raw) % 8)
    with open(path, 'wb') as handle:
        handle.write(struct.pack('<Q', len(raw)) + raw)
        left = size
        while left:
            block = os.urandom(min(left, BLOCK))
            handle.write(block)
            left -= len(block)


def make_model(root, total_bytes, shard_bytes):
    """A model directory of ``total_bytes`` in shards of ``shard_bytes``; return the shard paths."""
    make_model_dir(root, single=True)
    os.unlink(os.path.join(root, 'model.safetensors'))
    count = max(1, -(-total_bytes // shard_bytes))
    names = ['model-%05d-of-%05d.safetensors' % (n, count) for n in range(1, count + 1)]
    weight_map = {}
    for number, name in enumerate(names):
        size = min(shard_bytes, total_bytes - number * shard_bytes)
        write_shard(os.path.join(root, name), size)
        weight_map['model.layers.%d.weight' % number] = name
    with open(os.path.join(root, mw.INDEX_NAME), 'w', encoding='utf-8') as handle:
        json.dump({'metadata': {'total_size': total_bytes}, 'weight_map': weight_map}, handle)
    return [os.path.join(root, name) for name in names]


def sha256sum(paths):
    out = subprocess.run(['sha256sum'] + paths, check=True, stdout=subprocess.PIPE).stdout.decode()
    return dict((line.split()[1], line.split()[0]) for line in out.splitlines())


def file_digest_all(paths):
    found = {}
    for path in paths:
        with open(path, 'rb') as handle:
            found[path] = hashlib.file_digest(handle, 'sha256').hexdigest()
    return found


def module_run(model_dir, manifest_text, cache_path, workdir):
    args = os.path.join(workdir, 'args.json')
    with open(args, 'w', encoding='utf-8') as handle:
        json.dump(dict(ANSIBLE_MODULE_ARGS=dict(path=model_dir, manifest=manifest_text, cache=cache_path)), handle)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, '.cache', 'collections'))
    out = subprocess.run([sys.executable, '-m', 'ansible_collections.mindverse.sglang_pd.plugins.modules.model_weights',
                          args], check=False, stdout=subprocess.PIPE, env=env).stdout
    result = json.loads(out)
    assert not result.get('failed'), result
    return result


def seconds(value):
    return '%.3f' % value if value >= 0.01 else '%.5f' % value


def markdown(args, rows, facts):
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    lines = [
        '',
        '## model_weights: sha256 of model shards vs `sha256sum` (%s)' % now,
        '',
        'Command: `.venv/bin/python bench/bench_model_verify.py --size-gib %g --repeat %d%s%s`' % (
            args.size_gib, args.repeat, '' if args.shard_mib == DEFAULT_SHARD_MIB else ' --shard-mib %d' % args.shard_mib,
            ' --append %s' % args.append if args.append else ''),
        '',
        'Model: %(shards)d safetensors shards of %(shard_mib)d MiB, %(gb).2f GB in all, plus config, tokenizer '
        'and index files; files in the page cache (just written, one warm-up pass). Python %(python)s, '
        '%(machine)s, %(cpus)d CPUs%(sha_ni)s, load average %(load).1f at the start. Best of %(repeat)d runs '
        '(median in brackets).' % facts,
        '',
        '| method | seconds | MB/s hashed |',
        '|---|---:|---:|',
    ]
    lines += ['| %s | %s (%s) | %s |' % (name, seconds(best), seconds(median), rate) for name, best, median, rate in rows]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--size-gib', type=float, default=2.0, help='total size of the shards in GiB (default: 2)')
    parser.add_argument('--shard-mib', type=int, default=DEFAULT_SHARD_MIB,
                        help='size of one shard in MiB (default: %(default)s)')
    parser.add_argument('--repeat', type=int, default=3, help='runs per method; the best is reported')
    parser.add_argument('--workdir', default=None, help='where to write the model (default: a temporary directory)')
    parser.add_argument('--append', help='append the Markdown result to this file')
    args = parser.parse_args(argv)
    if not shutil.which('sha256sum'):
        sys.exit('sha256sum (coreutils) is needed for the comparison')

    load = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix='bench-model-verify-', dir=args.workdir)
    try:
        model_dir = os.path.join(workdir, 'model')
        total = int(args.size_gib * GIB)
        shards = make_model(model_dir, total, args.shard_mib * MIB)
        mb = total / 1e6
        reference = sha256sum(shards)  # also the warm-up pass

        med_own, best_own, own = timed(lambda: dict((p, mw.sha256_file(p)) for p in shards), args.repeat)
        assert own == reference
        med_sum, best_sum, dummy = timed(lambda: sha256sum(shards), args.repeat)
        rows = [
            ('`sha256_file` (in-process, 8 MiB buffer, readinto)', med_own, best_own, '%.0f' % (mb / best_own)),
        ]
        if hasattr(hashlib, 'file_digest'):
            med_fd, best_fd, found = timed(lambda: file_digest_all(shards), args.repeat)
            assert found == reference
            rows.append(('`hashlib.file_digest` (reference)', med_fd, best_fd, '%.0f' % (mb / best_fd)))
        rows.append(('`sha256sum` of the same files', med_sum, best_sum, '%.0f' % (mb / best_sum)))

        manifest = mw.record_manifest(model_dir)
        manifest_text = mw.format_manifest(manifest)
        all_bytes = sum(size for dummy, size in manifest.values())
        cache_path = os.path.join(workdir, 'cache', 'model-hashes.json')

        def first_verify():
            if os.path.exists(cache_path):
                os.unlink(cache_path)
            cache = mw.HashCache(cache_path)
            result = mw.verify_dir(model_dir, manifest, cache)
            cache.save()
            return result

        med_first, best_first, first = timed(first_verify, args.repeat)
        assert first['problems'] == [] and first['hashed_bytes'] == all_bytes
        med_cached, best_cached, cached = timed(
            lambda: mw.verify_dir(model_dir, manifest, mw.HashCache(cache_path)), args.repeat)
        assert cached['problems'] == [] and cached['hashed_bytes'] == 0
        med_module, best_module, module = timed(
            lambda: module_run(model_dir, manifest_text, cache_path, workdir), args.repeat)
        assert module['hashed_bytes'] == 0
        rows += [
            ('`verify_dir` with manifest, empty cache (%d files hashed)' % first['files'], med_first, best_first,
             '%.0f' % (all_bytes / 1e6 / best_first)),
            ('`verify_dir` with manifest, cached (0 bytes hashed)', med_cached, best_cached, '-'),
            ('model_weights module process, cached', med_module, best_module, '-'),
        ]
        cpu_flags = open('/proc/cpuinfo', encoding='utf-8').read() if os.path.exists('/proc/cpuinfo') else ''
        facts = dict(shards=len(shards), shard_mib=args.shard_mib, gb=mb / 1e3, python=platform.python_version(),
                     machine=platform.machine(), cpus=os.cpu_count(), load=load, repeat=args.repeat,
                     sha_ni=' (SHA extensions)' if ' sha_ni' in cpu_flags else '')
        lines = markdown(args, rows, facts)
        lines += [
            '',
            'Ratios: `sha256_file` throughput = **%.0f%%** of `sha256sum`; first / cached `verify_dir` = **%.0fx**.'
            % (100.0 * best_sum / best_own, best_first / best_cached),
            '',
        ]
        text = '\n'.join(lines)
        print(text)
        if args.append:
            with open(args.append, 'a', encoding='utf-8') as handle:
                handle.write(text)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
