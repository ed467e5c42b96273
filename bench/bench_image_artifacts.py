#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: image_artifacts against the seed's way of checking files inside an image.

On one image and the same files, side by side in one run:

* seed      - one ``docker run --rm IMAGE md5sum FILE`` per file plus
              ``docker run --rm IMAGE grep -c prefill_group_ids router.py`` (docker CLI);
* module    - the image_artifacts module as Ansible runs it (a Python process per call),
              first verification (empty cache) and cached;
* in-process - the same verification called in-process (no interpreter start-up);
* floor     - plain ``md5sum`` of the same files already on local disk.

The image is made here without pulling anything: a container is created (never
started) from a runnable base image (default: the Debian base image that set-up builds,
as scripts/setup/image_names.sh names it), the files are copied in with the archive
API and the container is committed. Everything is removed afterwards.

Usage (from the repository root):
    .venv/bin/python bench/bench_image_artifacts.py --repeat 5 --append docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, '.cache', 'collections'))
sys.path.insert(0, os.path.join(REPO, 'tests'))

import docker  # noqa: E402 pylint: disable=wrong-import-position

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import (  # noqa: E402 pylint: disable=wrong-import-position
    _image_artifacts as ia,
)
from image_names import setup_image  # noqa: E402 pylint: disable=wrong-import-position

SITE = '/opt/venv/lib/python3.10/site-packages'
PATTERN = 'prefill_group_ids'
# Production sizes (facts.md): router .so ~42 MB, mooncake engine ~67 MB.
FILES = [
    (SITE + '/sglang_router/sglang_router_rs.abi3.so', 42 * 1024 * 1024, 'binary'),
    (SITE + '/mooncake/engine.cpython-310-x86_64-linux-gnu.so', 67 * 1024 * 1024, 'binary'),
    (SITE + '/sglang/srt/mem_cache/cp_layersplit_pool.py', 14 * 1024, 'text'),
]
ROUTER_PY = (SITE + '/sglang_router/router.py', 24 * 1024, 'text')


def content(path, size, kind, scale):
    rnd = random.Random(path)
    size = int(size * scale) if kind == 'binary' else size
    if kind == 'binary':
        return rnd.randbytes(size)
    line = b'    self._router = Router(worker_urls, policy=policy)  # cache-aware\n'
    return (line * (size // len(line) + 1))[:size]


def build_image(client, base, files, tag):
    """Create (never start) a container from ``base``, copy ``files`` in, commit it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w') as out:
        dirs = set()
        for path in files:
            parts = path.strip('/').split('/')[:-1]
            dirs.update('/'.join(parts[:i]) for i in range(1, len(parts) + 1))
        for name in sorted(dirs):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            out.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(path.strip('/'))
            info.size = len(data)
            info.mode = 0o755
            out.addfile(info, io.BytesIO(data))
    container = client.containers.create(base, command=['/bin/true'])
    try:
        container.put_archive('/', buf.getvalue())
        repository, name_tag = tag.rsplit(':', 1)
        return container.commit(repository=repository, tag=name_tag, pause=False).id
    finally:
        container.remove(force=True)


def timed(func, repeat):
    times = []
    result = None
    for dummy in range(repeat):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), result


def run(cmd):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--base', default=setup_image('SGLANG_PD_BASE_IMAGE'),
                        help='runnable base image with md5sum and grep (default: %(default)s)')
    parser.add_argument('--repeat', type=int, default=5, help='runs per method; the median is reported')
    parser.add_argument('--scale', type=float, default=1.0, help='scale the .so sizes (1.0 = production sizes)')
    parser.add_argument('--append', help='append the Markdown result to this file')
    args = parser.parse_args(argv)

    client = docker.from_env(timeout=600)
    base = args.base
    if ia.get_local_image(client, base) is None:
        sys.exit('No runnable base image (%s) on this Docker host: the seed\'s way needs one that '
                 'has md5sum and grep. Run the set-up (make setup) or pass --base.' % base)

    load = os.getloadavg()[0]
    specs = FILES + [ROUTER_PY]
    data = dict((path, content(path, size, kind, args.scale)) for path, size, kind in specs)
    tag = 'sglang-pd-bench/artifacts:%d' % os.getpid()
    workdir = tempfile.mkdtemp(prefix='bench-artifacts-')
    image_id = None
    try:
        image_id = build_image(client, base, data, tag)
        disk = []
        for path, blob in data.items():
            local = os.path.join(workdir, os.path.basename(path))
            with open(local, 'wb') as handle:
                handle.write(blob)
            disk.append(local)
        total_bytes = sum(len(b) for b in data.values())
        manifest = ia.normalize_manifest(
            [dict(path=p, md5=hashlib.md5(data[p]).hexdigest()) for p, _s, _k in FILES]
            + [dict(path=ROUTER_PY[0], md5=hashlib.md5(data[ROUTER_PY[0]]).hexdigest(),
                    text_count=[dict(pattern=PATTERN, count=0)])])

        # Seed: docker run per file (and one for grep), through the CLI as in the seed.
        def seed():
            found = {}
            for path in data:
                found[path] = run(['docker', 'run', '--rm', tag, 'md5sum', path]).split()[0].decode()
            # grep -c exits 1 when it counts 0 lines: that is the expected outcome here.
            lines = subprocess.run(['docker', 'run', '--rm', tag, 'grep', '-c', PATTERN, ROUTER_PY[0]],
                                   check=False, stdout=subprocess.PIPE).stdout.strip()
            return found, lines

        seed_t, seed_min, (seed_found, seed_lines) = timed(seed, args.repeat)
        assert all(seed_found[p] == hashlib.md5(b).hexdigest() for p, b in data.items())
        assert seed_lines == b'0'

        # image_artifacts as a module process (what Ansible runs), empty cache then cached.
        cache_root = os.path.join(workdir, 'cache')
        module_args = os.path.join(workdir, 'args.json')

        def module(use_cache):
            with open(module_args, 'w', encoding='utf-8') as handle:
                json.dump(dict(ANSIBLE_MODULE_ARGS=dict(
                    image=tag, artifacts=[dict(m, text_count=m['text_count'] or None) for m in manifest],
                    cache_dir=cache_root, use_cache=use_cache)), handle)
            env = dict(os.environ, PYTHONPATH=os.path.join(REPO, '.cache', 'collections'))
            out = subprocess.run(
                [sys.executable, '-m', 'ansible_collections.mindverse.sglang_pd.plugins.modules.image_artifacts',
                 module_args], check=False, stdout=subprocess.PIPE, env=env).stdout
            result = json.loads(out)
            assert result['passed'], result
            return result

        first_t, first_min, first = timed(lambda: module(False), args.repeat)
        assert first['cached'] is False
        cached_t, cached_min, cached = timed(lambda: module(True), args.repeat)
        assert cached['cached'] is True

        # The same verification in-process: no interpreter start-up, no cache.
        inproc_t, inproc_min, inproc = timed(
            lambda: ia.verify_image(client, tag, manifest, cache_dir=None), args.repeat)
        assert inproc['passed']

        # Ceiling of the archive path: Docker's tar stream of the same files, read and dropped.
        def archive_only():
            cid = ia.create_transient_container(client, client.images.get(tag))
            try:
                for path in data:
                    chunks, dummy = client.api.get_archive(cid, path, chunk_size=ia.NET_CHUNK)
                    for dummy in chunks:
                        pass
            finally:
                ia.remove_container(client, cid)

        stream_t, stream_min, dummy = timed(archive_only, args.repeat)

        # Floor: md5sum of the same files on local disk (page cache warm).
        run(['md5sum'] + disk)
        floor_t, floor_min, dummy = timed(lambda: run(['md5sum'] + disk), args.repeat)

        mb = total_bytes / 1e6
        docker_version = client.version().get('Version')
        rows = [
            ('seed: %d x `docker run --rm md5sum` + 1 x `grep -c`' % len(data), seed_t, seed_min, '-'),
            ('image_artifacts module, first verification', first_t, first_min, '%.0f' % (mb / first_t)),
            ('image_artifacts module, cached', cached_t, cached_min, '-'),
            ('image_artifacts in-process (no interpreter start), first', inproc_t, inproc_min,
             '%.0f' % (mb / inproc_t)),
            ('Docker archive stream alone (read, no hashing)', stream_t, stream_min, '(%.0f)' % (mb / stream_t)),
            ('floor: `md5sum` of the same files on disk', floor_t, floor_min, '%.0f' % (mb / floor_t)),
        ]
        now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
        lines = [
            '',
            '## image_artifacts vs the seed\'s `docker run md5sum` (%s)' % now,
            '',
            'Command: `.venv/bin/python bench/bench_image_artifacts.py --repeat %d%s%s`' % (
                args.repeat, '' if args.scale == 1.0 else ' --scale %g' % args.scale,
                ' --append %s' % args.append if args.append else ''),
            '',
            'Image: `%s` + %d files, %.1f MB (router .so %.0f MB, engine .so %.0f MB, two .py); '
            'Docker %s, %s, %d CPUs, load average %.1f at the start. Median of %d runs (min in brackets).' % (
                base, len(data), mb, len(data[FILES[0][0]]) / 1e6, len(data[FILES[1][0]]) / 1e6,
                docker_version, platform.machine(), os.cpu_count(), load, args.repeat),
            '',
            '| method | seconds | MB/s hashed |',
            '|---|---:|---:|',
        ]
        lines += ['| %s | %.3f (%.3f) | %s |' % (name, med, low, rate) for name, med, low, rate in rows]
        lines += [
            '',
            'Ratios: seed / module first = **%.1fx**; seed / module cached = **%.1fx**; '
            'module first / cached = **%.1fx**; in-process throughput = **%.0f%%** of the md5sum floor '
            '(module process incl. start-up: %.0f%%).' % (
                seed_t / first_t, seed_t / cached_t, first_t / cached_t,
                100.0 * floor_t / inproc_t, 100.0 * floor_t / first_t),
            'The archive path cannot beat Docker\'s own tar stream: the in-process verification runs at '
            '**%.0f%%** of it (hashing overlaps the transfer in a prefetch thread).' % (100.0 * stream_t / inproc_t),
            '',
        ]
        text = '\n'.join(lines)
        print(text)
        if args.append:
            new = not os.path.exists(args.append) or os.path.getsize(args.append) == 0
            with open(args.append, 'a', encoding='utf-8') as handle:
                if new:
                    handle.write('# Benchmarks\n\nNot timed tests: numbers from one machine, with the command that '
                                 'produced them.\n')
                handle.write(text)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if image_id:
            try:
                client.images.remove(image_id, force=True)
            except docker.errors.NotFound:
                pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
