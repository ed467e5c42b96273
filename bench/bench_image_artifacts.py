#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: image_artifacts against the seed's way of checking files inside an image.

On one image and the same files, side by side in one run:

* seed        - one ``docker run --rm IMAGE md5sum FILE`` per file plus
                ``docker run --rm IMAGE grep -c prefill_group_ids router.py`` (docker CLI);
* module      - the image_artifacts module as a Python process (what Ansible runs on the node):
                first verification (no cache) reading the image's overlay2 layers
                (``read_via=auto``) and through the Docker archive API (``read_via=archive``),
                then cached; the ping module's process beside it;
* ansible     - ``ansible localhost -m ansible.builtin.ping`` and ``ansible localhost -m
                mindverse.sglang_pd.image_artifacts`` (cached), alternated, the same number of times;
* in-process  - the same first verification called in-process (no interpreter start-up), via the
                layers and via the archive API, and Docker's archive stream alone;
* floor       - plain ``md5sum`` of the same files already on local disk.

Targets (issue 17): first verification >= 4x faster than the seed; hashing >= 60% of the md5sum
throughput on the same bytes; a cached verification within 1.2x of ``ansible.builtin.ping``.

The image is made here without pulling anything: a container is created (never started) from a
runnable base image (default: the Debian base image that set-up builds, as
scripts/setup/image_names.sh names it), the files are copied in with the archive API and the
container is committed. Everything is removed afterwards.

Usage (from the repository root):
    .venv/bin/python bench/bench_image_artifacts.py --repeat 7 --append docs/benchmarks/results.md
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
COLLECTIONS = os.path.join(REPO, '.cache', 'collections')
sys.path.insert(0, COLLECTIONS)
sys.path.insert(0, os.path.join(REPO, 'tests'))

import docker  # noqa: E402 pylint: disable=wrong-import-position

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import (  # noqa: E402 pylint: disable=wrong-import-position
    _artifact_checks as checks,
    _image_artifacts as ia,
    _image_verify as iv,
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
MODULE = 'ansible_collections.mindverse.sglang_pd.plugins.modules.image_artifacts'
SECTION_HEADING = '## image_artifacts'
TARGET_SPEEDUP = 4.0
TARGET_THROUGHPUT = 0.60
TARGET_CACHED_VS_PING = 1.2


def content(path, size, kind, scale):
    """Deterministic file content: random bytes for a binary, repeated source lines for text."""
    rnd = random.Random(path)
    size = int(size * scale) if kind == 'binary' else size
    if kind == 'binary':
        return rnd.randbytes(size)
    line = b'    self._router = Router(worker_urls, policy=policy)  # cache-aware\n'
    return (line * (size // len(line) + 1))[:size]


def files_tar(files):
    """A tarball of ``files`` (path -> bytes) with their parent directories."""
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
    return buf.getvalue()


def build_image(client, base, files, tag):
    """Create (never start) a container from ``base``, copy ``files`` in, commit it as ``tag``."""
    container = client.containers.create(base, command=['/bin/true'])
    try:
        container.put_archive('/', files_tar(files))
        repository, name_tag = tag.rsplit(':', 1)
        return container.commit(repository=repository, tag=name_tag, pause=False).id
    finally:
        container.remove(force=True)


def timed(func, repeat):
    """Run ``func`` ``repeat`` times; return (median seconds, min seconds, last result)."""
    times = []
    result = None
    for dummy in range(repeat):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), result


def timed_alternating(funcs, repeat):
    """Run every function of ``funcs`` in turn, ``repeat`` rounds; (median, min) per function.

    Alternating spreads a change of the machine's load over all of them alike.
    """
    times = [[] for dummy in funcs]
    for dummy in range(repeat):
        for func, spent in zip(funcs, times):
            start = time.perf_counter()
            func()
            spent.append(time.perf_counter() - start)
    return [(statistics.median(t), min(t)) for t in times]


def run(cmd, **kwargs):
    """Run ``cmd``, fail on a non-zero exit, return its stdout."""
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs).stdout


class Bench:
    """The test image, its manifest and every way of verifying it."""

    def __init__(self, client, tag, data, workdir):
        self.client = client
        self.tag = tag
        self.data = data
        self.workdir = workdir
        self.cache_dir = os.path.join(workdir, 'cache')
        self.manifest = checks.normalize_manifest(
            [dict(path=p, md5=hashlib.md5(data[p]).hexdigest()) for p, _s, _k in FILES]
            + [dict(path=ROUTER_PY[0], md5=hashlib.md5(data[ROUTER_PY[0]]).hexdigest(),
                    text_count=[dict(pattern=PATTERN, count=0)])])
        self.module_args = dict(
            image=tag, cache_dir=self.cache_dir,
            artifacts=[dict(m, text_count=m['text_count'] or None) for m in self.manifest])
        self.env = dict(os.environ, PYTHONPATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))

    def seed(self):
        """The seed's way: a ``docker run md5sum`` per file and one ``grep -c``."""
        found = {}
        for path in self.data:
            found[path] = run(['docker', 'run', '--rm', self.tag, 'md5sum', path]).split()[0].decode()
        # grep -c exits 1 when it counts 0 lines: that is the expected outcome here.
        lines = subprocess.run(['docker', 'run', '--rm', self.tag, 'grep', '-c', PATTERN, ROUTER_PY[0]],
                               check=False, stdout=subprocess.PIPE).stdout.strip()
        assert all(found[p] == hashlib.md5(b).hexdigest() for p, b in self.data.items()), found
        assert lines == b'0', lines

    def module_process(self, module, args):
        """Run a module as its own Python process with JSON arguments; return its result."""
        args_file = os.path.join(self.workdir, 'args.json')
        with open(args_file, 'w', encoding='utf-8') as handle:
            json.dump(dict(ANSIBLE_MODULE_ARGS=args), handle)
        out = subprocess.run([sys.executable, '-m', module, args_file], check=False,
                             stdout=subprocess.PIPE, env=self.env).stdout
        return json.loads(out)

    def verify_process(self, use_cache, read_via='auto'):
        """The image_artifacts module process; asserts that it passed."""
        result = self.module_process(MODULE, dict(self.module_args, use_cache=use_cache, read_via=read_via))
        assert result.get('passed'), result
        return result

    def ansible(self, module, args=None):
        """``ansible localhost -m MODULE [-a ARGS]``, output discarded."""
        cmd = ['ansible', 'localhost', '-m', module] + (['-a', json.dumps(args)] if args else [])
        return run(cmd, cwd=REPO, env=dict(self.env, PATH=os.path.dirname(sys.executable) + os.pathsep
                                           + self.env.get('PATH', '')))

    def in_process(self, read_via):
        """The first verification in-process (no cache); returns how the files were read."""
        result = iv.verify_image(self.tag, self.manifest, cache_dir=None, read_via=read_via)
        assert result['passed'], result
        return result['read_via']

    def archive_stream_only(self):
        """Docker's tar stream of the same files, read and dropped: the archive path's ceiling."""
        image = ia.get_local_image(self.client, self.tag)
        cid = ia.create_transient_container(self.client, image)
        try:
            for path in self.data:
                chunks, dummy = self.client.api.get_archive(cid, path, chunk_size=ia.NET_CHUNK)
                for dummy in chunks:
                    pass
        finally:
            ia.remove_container(self.client, cid)


def measure_all(bench, disk, repeat):
    """Time every method; return {name: (median, min)} and how the layer run read the files."""
    times = {}
    med, low, dummy = timed(bench.seed, repeat)
    times['seed'] = (med, low)
    med, low, layers = timed(lambda: bench.verify_process(False, 'auto'), repeat)
    times['module_layers'] = (med, low)
    med, low, archive = timed(lambda: bench.verify_process(False, 'archive'), repeat)
    assert archive['read_via'] == 'archive', archive
    times['module_archive'] = (med, low)
    assert bench.verify_process(True)['cached'] is True
    times['module_cached'], times['module_ping'] = timed_alternating(
        [lambda: bench.verify_process(True), lambda: bench.module_process('ansible.modules.ping', {})], repeat)
    check = bench.ansible('mindverse.sglang_pd.image_artifacts', bench.module_args).decode()
    assert 'cached: true' in check or '"cached": true' in check, check
    times['ansible_ping'], times['ansible_cached'] = timed_alternating(
        [lambda: bench.ansible('ansible.builtin.ping'),
         lambda: bench.ansible('mindverse.sglang_pd.image_artifacts', bench.module_args)], repeat)
    med, low, inproc_via = timed(lambda: bench.in_process('auto'), repeat)
    times['inproc_layers'] = (med, low)
    med, low, dummy = timed(lambda: bench.in_process('archive'), repeat)
    times['inproc_archive'] = (med, low)
    med, low, dummy = timed(bench.archive_stream_only, repeat)
    times['stream'] = (med, low)
    run(['md5sum'] + disk)
    med, low, dummy = timed(lambda: run(['md5sum'] + disk), repeat)
    times['floor'] = (med, low)
    return times, layers['read_via'], inproc_via


def verdict(met):
    """'met' or '**not met**'."""
    return 'met' if met else '**not met**'


def markdown(args, facts, times, read_via):
    """The benchmark section for docs/benchmarks/results.md."""
    mb = facts['bytes'] / 1e6

    def rate(key):
        return '%.0f' % (mb / times[key][0])

    rows = [
        ('seed: %d x `docker run --rm md5sum` + 1 x `grep -c`' % facts['files'], 'seed', '-'),
        ('module process, first verification, `read_via=auto` (read via: %s)' % read_via['module'],
         'module_layers', rate('module_layers')),
        ('module process, first verification, `read_via=archive`', 'module_archive', rate('module_archive')),
        ('module process, cached', 'module_cached', '-'),
        ('`ansible.modules.ping` process (no-op module)', 'module_ping', '-'),
        ('`ansible localhost -m ansible.builtin.ping`', 'ansible_ping', '-'),
        ('`ansible localhost -m mindverse.sglang_pd.image_artifacts`, cached', 'ansible_cached', '-'),
        ('in-process, first verification, `read_via=auto` (read via: %s)' % read_via['inproc'],
         'inproc_layers', rate('inproc_layers')),
        ('in-process, first verification, `read_via=archive`', 'inproc_archive', rate('inproc_archive')),
        ('Docker archive stream alone (read, no hashing)', 'stream', '(%s)' % rate('stream')),
        ('floor: `md5sum` of the same files on disk', 'floor', rate('floor')),
    ]
    speedup = times['seed'][0] / times['module_layers'][0]
    throughput = times['floor'][0] / times['inproc_layers'][0]
    cached_vs_ping = times['ansible_cached'][0] / times['ansible_ping'][0]
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    lines = [
        '',
        '%s: first and cached verification vs the seed\'s `docker run md5sum` (%s)' % (SECTION_HEADING, now),
        '',
        'Command: `.venv/bin/python bench/bench_image_artifacts.py --repeat %d%s%s`' % (
            args.repeat, '' if args.scale == 1.0 else ' --scale %g' % args.scale,
            ' --append %s' % args.append if args.append else ''),
        '',
        'Image: the Debian base image set-up builds + %d files, %.1f MB (router .so %.0f MB, engine .so %.0f MB, '
        'two .py), committed as one layer; Docker %s (storage driver %s), Python %s, %s, %d CPUs; load average '
        '%s at the start, %s at the end (1, 5, 15 min). Files in the page cache. Median of %d runs (min in '
        'brackets); the ansible and module-process pairs ran alternately.' % (
            facts['files'], mb, facts['router_mb'], facts['engine_mb'], facts['docker'], facts['driver'],
            platform.python_version(), platform.machine(), os.cpu_count(), facts['load_start'], facts['load_end'],
            args.repeat),
        '',
        '| method | seconds | MB/s hashed |',
        '|---|---:|---:|',
    ]
    lines += ['| %s | %.3f (%.3f) | %s |' % (name, times[key][0], times[key][1], mbps) for name, key, mbps in rows]
    lines += [
        '',
        'Targets (issue 17):',
        '',
        '- first verification: seed / module process via the layers = **%.1fx** (target >= %gx: %s); '
        'via the archive API %.1fx; in-process via the layers %.1fx.' % (
            speedup, TARGET_SPEEDUP, verdict(speedup >= TARGET_SPEEDUP),
            times['seed'][0] / times['module_archive'][0], times['seed'][0] / times['inproc_layers'][0]),
        '- hashing: in-process via the layers = **%.0f%%** of the `md5sum` throughput on the same bytes '
        '(target >= %.0f%%: %s); via the archive API %.0f%%.' % (
            100 * throughput, 100 * TARGET_THROUGHPUT, verdict(throughput >= TARGET_THROUGHPUT),
            100 * times['floor'][0] / times['inproc_archive'][0]),
        '- cached: `ansible ... image_artifacts` / `ansible ... ping` = **%.2fx** (target <= %gx: %s); '
        'the module processes alone: cached / ping = %.2fx (%.0f ms more).' % (
            cached_vs_ping, TARGET_CACHED_VS_PING, verdict(cached_vs_ping <= TARGET_CACHED_VS_PING),
            times['module_cached'][0] / times['module_ping'][0],
            1000 * (times['module_cached'][0] - times['module_ping'][0])),
        '',
        'Both `ansible localhost` rows are mostly the CLI\'s own start-up, so other work on the machine moves '
        'them more than the module does; the module-process rows show what the module itself adds.',
        '',
    ]
    return '\n'.join(lines)


def append_section(path, text):
    """Append ``text`` (a dated section) to the results file at ``path``."""
    with open(path, 'a', encoding='utf-8') as handle:
        handle.write('\n' + text.lstrip('\n'))


def load_average():
    """The 1, 5 and 15 minute load averages as text."""
    return ' / '.join('%.1f' % v for v in os.getloadavg())


def main(argv=None):
    """Build the image, time every method, print (and optionally write) the Markdown section."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--base', default=setup_image('SGLANG_PD_BASE_IMAGE'),
                        help='runnable base image with md5sum and grep (default: %(default)s)')
    parser.add_argument('--repeat', type=int, default=5, help='runs per method; the median is reported')
    parser.add_argument('--scale', type=float, default=1.0, help='scale the .so sizes (1.0 = production sizes)')
    parser.add_argument('--append', help='append the Markdown section to this file')
    args = parser.parse_args(argv)

    client = docker.from_env(timeout=600)
    if ia.get_local_image(client, args.base) is None:
        sys.exit('No runnable base image (%s) on this Docker host: the seed\'s way needs one that '
                 'has md5sum and grep. Run the set-up (make setup) or pass --base.' % args.base)

    load_start = load_average()
    specs = FILES + [ROUTER_PY]
    data = dict((path, content(path, size, kind, args.scale)) for path, size, kind in specs)
    tag = 'pd-artifacts-test-bench:%d' % os.getpid()
    workdir = tempfile.mkdtemp(prefix='bench-artifacts-')
    image_id = None
    try:
        image_id = build_image(client, args.base, data, tag)
        disk = []
        for path, blob in data.items():
            local = os.path.join(workdir, os.path.basename(path))
            with open(local, 'wb') as handle:
                handle.write(blob)
            disk.append(local)
        times, module_via, inproc_via = measure_all(Bench(client, tag, data, workdir), disk, args.repeat)
        facts = dict(
            files=len(data), bytes=sum(len(b) for b in data.values()),
            router_mb=len(data[FILES[0][0]]) / 1e6, engine_mb=len(data[FILES[1][0]]) / 1e6,
            docker=client.version().get('Version'), driver=client.info().get('Driver'),
            load_start=load_start, load_end=load_average())
        text = markdown(args, facts, times, dict(module=module_via, inproc=inproc_via))
        print(text)
        if args.append:
            append_section(args.append, text)
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
