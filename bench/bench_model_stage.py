#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: staging a model on N nodes from the source URL alone vs with peer fan-out.

One model directory of safetensors shards (written here: random data, real headers) and its
manifest; N empty target directories stand for N nodes, each served read-only by its own
``rsync --daemon`` on 127.0.0.1 (hidden ``.*`` partial files excluded), as on a real node.
Every node copy is the model_stage module as Ansible runs it: a Python process with JSON
arguments.

* A, URL alone - all N nodes copy from the URL at once (N concurrent module runs);
* B, fan-out   - the waves of ``model_stage_plan(nodes, [], source_concurrency=1,
                 peer_concurrency=2)``: wave 1 from the URL, the later waves from the
                 nodes that hold a copy, over rsync; a wave starts when the one before ended.

The source is an in-process HTTP server (Range requests, ``sendfile``) that EMULATES a
throttled blob endpoint: a token bucket caps its total egress at ``--source-mbps`` MB/s
shared by every concurrent download. Each scenario runs with the cap and with the cap off.
The server counts the bytes it sends, per scenario. Peer copies run over loopback,
uncapped. Every run starts from empty target directories and empty hash caches; wall time
is from the first module start to the last module exit, the best of ``--repeat`` runs.

Usage (from the repository root):
    .venv/bin/python bench/bench_model_stage.py --size-mb 768 --repeat 3 --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, '.cache', 'collections'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'unit'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible_collections.mindverse.sglang_pd.plugins.filter.model_stage import (  # noqa: E402 pylint: disable=wrong-import-position
    model_stage_plan,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import (  # noqa: E402 pylint: disable=wrong-import-position
    _model_weights as mw,
)
from bench_model_verify import make_model  # noqa: E402 pylint: disable=wrong-import-position
from model_fixtures import free_port, wait_for_port  # noqa: E402 pylint: disable=wrong-import-position

MIB = 1024 ** 2
MB = 1000 ** 2
DEFAULT_SHARD_MIB = 128
DEFAULT_SIZE_MIB = 768
DEFAULT_SOURCE_MBPS = 200.0
SEND_CHUNK = 1 * MIB
URL_PREFIX = '/weights/model/'
MODULE = 'ansible_collections.mindverse.sglang_pd.plugins.modules.model_stage'
RSYNC_MODULE = 'model'
PROXY_VARS = ('http_proxy', 'https_proxy', 'all_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY')


# ----------------------------------------------------------------- the emulated source
class TokenBucket:
    """Total egress cap shared by every connection: each chunk reserves its slot on one clock.

    A sender asks for ``n`` bytes and sleeps until its reservation comes due; reservations are
    served in the order they are made, so concurrent downloads share the rate evenly. An idle
    bucket holds at most ``burst`` seconds' worth of credit. ``rate`` None is no cap.
    """

    def __init__(self, rate, burst=0.05):
        self.rate = rate
        self.burst = burst
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def take(self, count):
        if not self.rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(self._next, now - self.burst)
            self._next = start + count / self.rate
            due = self._next
        delay = due - now
        if delay > 0:
            time.sleep(delay)


class SourceHandler(BaseHTTPRequestHandler):
    """GET of files under the server's root, ``Range: bytes=K-`` answered with 206; paced by the bucket."""

    def do_GET(self):  # noqa: N802 - the name http.server calls
        server = self.server
        path = unquote(urlsplit(self.path).path)
        name = path[len(URL_PREFIX):] if path.startswith(URL_PREFIX) else None
        full = os.path.join(server.root, *name.split('/')) if name and '..' not in name.split('/') else None
        if full is None or not os.path.isfile(full):
            self.send_error(404)
            return
        size = os.path.getsize(full)
        match = re.match(r'^bytes=(\d+)-$', self.headers.get('Range') or '')
        start = int(match.group(1)) if match else 0
        if start and start >= size:
            self.send_error(416)
            return
        self.send_response(206 if match else 200)
        self.send_header('Content-Length', str(size - start))
        if match:
            self.send_header('Content-Range', 'bytes %d-%d/%d' % (start, size - 1, size))
        self.end_headers()
        with open(full, 'rb') as handle:
            offset = start
            while offset < size:
                count = min(SEND_CHUNK if server.bucket.rate else 16 * MIB, size - offset)
                server.bucket.take(count)
                try:
                    sent = self.connection.sendfile(handle, offset, count)
                except OSError:
                    return  # the client went away
                server.add_sent(sent)
                if not sent:
                    return
                offset += sent

    def log_message(self, *args):  # keep the output clean
        pass


class SourceServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root):
        super().__init__(('127.0.0.1', 0), SourceHandler)
        self.root = root
        self.bucket = TokenBucket(None)
        self._lock = threading.Lock()
        self.sent = 0

    @property
    def url(self):
        return 'http://127.0.0.1:%d%s' % (self.server_address[1], URL_PREFIX.rstrip('/'))

    def add_sent(self, count):
        with self._lock:
            self.sent += count

    def reset(self, rate):
        """Start a scenario: a fresh bucket with ``rate`` bytes/s (None: no cap), the byte count at 0."""
        self.bucket = TokenBucket(rate)
        with self._lock:
            self.sent = 0


# ----------------------------------------------------------------- the nodes
class Node:
    """A target directory with its own read-only rsync daemon on 127.0.0.1, and a hash cache."""

    def __init__(self, workdir, name, rsync):
        self.name = name
        self.base = os.path.join(workdir, name)
        self.model_dir = os.path.join(self.base, 'models', 'model')
        self.cache = os.path.join(self.base, 'cache', 'model-hashes.json')
        self.port = free_port()
        os.makedirs(self.model_dir)
        config = os.path.join(self.base, 'rsyncd.conf')
        with open(config, 'w', encoding='utf-8') as handle:
            handle.write('\n'.join([
                'use chroot = no',
                'uid = %d' % os.getuid(),
                'gid = %d' % os.getgid(),
                'pid file = %s' % os.path.join(self.base, 'rsyncd.pid'),
                'log file = %s' % os.path.join(self.base, 'rsyncd.log'),
                '[%s]' % RSYNC_MODULE,
                '    path = %s' % self.model_dir,
                '    read only = yes',
                '    exclude = .*',
                '',
            ]))
        self.daemon = subprocess.Popen([rsync, '--daemon', '--no-detach', '--config=%s' % config,
                                        '--port=%d' % self.port, '--address=127.0.0.1'])
        wait_for_port(self.port)

    def empty(self):
        """A fresh node: nothing in the model directory, no hash cache."""
        shutil.rmtree(self.model_dir)
        os.makedirs(self.model_dir)
        shutil.rmtree(os.path.dirname(self.cache), ignore_errors=True)

    def stop(self):
        self.daemon.terminate()
        try:
            self.daemon.wait(10)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(10)


def module_env():
    env = dict((key, value) for key, value in os.environ.items() if key not in PROXY_VARS)
    env.update(PYTHONPATH=os.path.join(REPO, '.cache', 'collections'), no_proxy='127.0.0.1,localhost',
               NO_PROXY='127.0.0.1,localhost')
    return env


def start_stage(node, manifest_text, source_args, argdir):
    """Start model_stage for ``node`` as Ansible runs a module: a Python process, JSON arguments in a file."""
    args = dict(path=node.model_dir, manifest=manifest_text, cache=node.cache, **source_args)
    path = os.path.join(argdir, 'args-%s.json' % node.name)
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(dict(ANSIBLE_MODULE_ARGS=args), handle)
    return subprocess.Popen([sys.executable, '-m', MODULE, path], stdout=subprocess.PIPE, env=module_env())


def run_wave(jobs, manifest, argdir):
    """Run one wave: ``jobs`` is [(node, source_args, kind)], all at once; return when the last ends."""
    procs = [(node, kind, start_stage(node, manifest['text'], source_args, argdir))
             for node, source_args, kind in jobs]
    for node, kind, proc in procs:
        out = proc.communicate()[0]
        result = json.loads(out)
        if result.get('failed') or result.get('source') != kind or result.get('bytes_copied') != manifest['bytes']:
            raise RuntimeError('%s: unexpected model_stage result: %s' % (node.name, result))
        check = mw.verify_dir(node.model_dir, manifest['entries'], mw.HashCache(node.cache))
        if check['problems'] or check['hashed_bytes']:
            raise RuntimeError('%s: not staged: %s' % (node.name, check))


def url_args(server):
    return dict(url=server.url)


def peer_args(node):
    return dict(peer='127.0.0.1', peer_port=node.port, peer_module=RSYNC_MODULE)


def scenario_waves(name, nodes, server):
    """The waves of a scenario, each [(node, source_args, kind)]."""
    if name == 'A':
        return [[(node, url_args(server), 'url') for node in nodes]]
    by_name = dict((node.name, node) for node in nodes)
    plan = model_stage_plan([node.name for node in nodes], [], source_concurrency=1, peer_concurrency=2)
    return [[(by_name[item['host']],
              url_args(server) if item['source'] == 'url' else peer_args(by_name[item['peer']]),
              item['source']) for item in wave] for wave in plan]


def run_scenario(name, rate, nodes, server, manifest, argdir):
    """One run from empty nodes: dict(wall, waves=[seconds], sent)."""
    for node in nodes:
        node.empty()
    waves = scenario_waves(name, nodes, server)
    server.reset(rate)
    wave_times = []
    start = time.perf_counter()
    for wave in waves:
        wave_start = time.perf_counter()
        run_wave(wave, manifest, argdir)
        wave_times.append(time.perf_counter() - wave_start)
    wall = time.perf_counter() - start
    return dict(wall=wall, waves=wave_times, sent=server.sent)


# ----------------------------------------------------------------- report
def describe_plan(nodes):
    plan = model_stage_plan([node.name for node in nodes], [], source_concurrency=1, peer_concurrency=2)
    parts = []
    for number, wave in enumerate(plan, 1):
        items = ['%s <- %s' % (item['host'], 'URL' if item['source'] == 'url' else item['peer']) for item in wave]
        parts.append('wave %d: %s' % (number, ', '.join(items)))
    return '; '.join(parts)


def cap_label(rate):
    return '%g MB/s (emulated)' % (rate / MB) if rate else 'off'


def markdown(args, facts, rows, ratios):
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    options = ' --size-mb %d' % args.size_mb
    if args.shard_mib != DEFAULT_SHARD_MIB:
        options += ' --shard-mib %d' % args.shard_mib
    if args.source_mbps != DEFAULT_SOURCE_MBPS:
        options += ' --source-mbps %g' % args.source_mbps
    if args.nodes != 3:
        options += ' --nodes %d' % args.nodes
    lines = [
        '',
        '## model_stage: %(nodes)d nodes from the URL alone vs with peer fan-out (%(now)s)' % dict(facts, now=now),
        '',
        'Command: `.venv/bin/python bench/bench_model_stage.py%s --repeat %d%s`' % (
            options, args.repeat, ' --append %s' % args.append if args.append else ''),
        '',
        'Model: %(shards)d safetensors shards of %(shard_mib)d MiB plus config, tokenizer and index files, '
        '%(mb).1f MB in all, staged on %(nodes)d nodes (target directories on one machine, each served by its own '
        'read-only `rsync --daemon` on 127.0.0.1). Each node copy is the model_stage module process with JSON '
        'arguments; it verifies every file\'s sha256 as it lands. Every run starts from empty directories and '
        'hash caches.' % facts,
        '',
        '**The source cap is an emulation of a throttled blob endpoint**: a local HTTP server (Range, sendfile) '
        'whose total egress is held by a token bucket at %(cap)s, shared by all concurrent downloads; the server '
        'counts the bytes it sends. "off" is the same server unthrottled. Peer copies go over loopback, '
        'uncapped. The source server, the rsync daemons and every module process share this one machine\'s CPUs '
        'and disk, so "MB/s landed" (bytes written to all nodes / wall time) also shows the machine\'s own '
        'ceiling: where a cap-off row lands no faster than the cap, the machine, not the cap, is the bound. '
        'Scenario A: all %(nodes)d nodes copy from the URL '
        'at once. Scenario B: the waves of `model_stage_plan(nodes, [], source_concurrency=1, peer_concurrency=2)`'
        ' - %(plan)s.' % facts,
        '',
        'Python %(python)s, rsync %(rsync)s, %(machine)s, %(cpus)d CPUs, load average %(load_start)s at the start, '
        '%(load_end)s at the end (1, 5, 15 min). Best of %(repeat)d runs (median in brackets); wave times are '
        'of the best run.' % facts,
        '',
        '| scenario | source cap | wall s | per wave s | bytes from source | x model size | MB/s landed |',
        '|---|---|---:|---:|---:|---:|---:|',
    ]
    for row in rows:
        lines.append('| %s | %s | %.2f (%.2f) | %s | %s | %.2f | %.0f |' % (
            row['scenario'], row['cap'], row['best'], row['median'],
            ' + '.join('%.2f' % value for value in row['waves']), '{:,}'.format(row['sent']), row['times'],
            row['landed'] / MB / row['best']))
    lines += [''] + ratios + ['']
    return lines


def load_text():
    return ' / '.join('%.1f' % value for value in os.getloadavg())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--size-mb', type=int, default=DEFAULT_SIZE_MIB,
                        help='total size of the shards in MiB (default: %(default)s)')
    parser.add_argument('--shard-mib', type=int, default=DEFAULT_SHARD_MIB,
                        help='size of one shard in MiB (default: %(default)s)')
    parser.add_argument('--source-mbps', type=float, default=DEFAULT_SOURCE_MBPS,
                        help='emulated egress cap of the source in MB/s (10^6 bytes), shared by all concurrent '
                             'downloads; each scenario also runs with the cap off; 0: only with the cap off '
                             '(default: %(default)s)')
    parser.add_argument('--nodes', type=int, default=3, help='number of nodes (default: %(default)s)')
    parser.add_argument('--repeat', type=int, default=3, help='runs per scenario and cap; the best is reported')
    parser.add_argument('--workdir', default=None, help='where to write the model and nodes (default: a temporary '
                                                        'directory)')
    parser.add_argument('--append', help='append the Markdown result to this file')
    args = parser.parse_args(argv)
    rsync = shutil.which('rsync')
    if rsync is None:
        sys.exit('rsync is needed for the peer copies')
    if args.nodes < 2:
        sys.exit('--nodes must be at least 2')

    load_start = load_text()
    workdir = tempfile.mkdtemp(prefix='bench-model-stage-', dir=args.workdir)
    nodes = []
    server = None
    try:
        source_dir = os.path.join(workdir, 'source', 'model')
        shards = make_model(source_dir, args.size_mb * MIB, args.shard_mib * MIB)
        entries = mw.record_manifest(source_dir)
        manifest = dict(text=mw.format_manifest(entries), entries=entries,
                        bytes=sum(size for dummy, size in entries.values()))
        argdir = os.path.join(workdir, 'args')
        os.makedirs(argdir)
        server = SourceServer(source_dir)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        nodes = [Node(workdir, 'node%d' % number, rsync) for number in range(1, args.nodes + 1)]

        rates = [args.source_mbps * MB, None] if args.source_mbps > 0 else [None]
        cases = [(name, rate) for rate in rates for name in ('A', 'B')]
        runs = dict((case, []) for case in cases)
        for number in range(args.repeat):
            for case in cases:  # interleaved, so a change of machine load hits every case alike
                run = run_scenario(case[0], case[1], nodes, server, manifest, argdir)
                runs[case].append(run)
                print('run %d %s cap %s: %.2f s, waves %s, %d bytes from source' % (
                    number + 1, case[0], cap_label(case[1]), run['wall'],
                    ' + '.join('%.2f' % value for value in run['waves']), run['sent']), file=sys.stderr)

        labels = dict(A='A: URL alone (%d at once)' % args.nodes, B='B: fan-out (1 from URL, then peers)')
        rows = []
        for case in cases:
            best = min(runs[case], key=lambda run: run['wall'])
            sent = set(run['sent'] for run in runs[case])
            rows.append(dict(scenario=labels[case[0]], cap=cap_label(case[1]), best=best['wall'],
                             median=statistics.median(run['wall'] for run in runs[case]), waves=best['waves'],
                             sent=max(sent), times=max(sent) / manifest['bytes'],
                             landed=args.nodes * manifest['bytes']))
        best = dict((case, min(run['wall'] for run in runs[case])) for case in cases)
        ratios = []
        for rate in rates:
            a_time, b_time = best[('A', rate)], best[('B', rate)]
            text = 'Cap %s: A / B wall time = **%.2fx**; bytes from source A / B = **%.1fx**' % (
                cap_label(rate), a_time / b_time,
                max(run['sent'] for run in runs[('A', rate)]) / max(run['sent'] for run in runs[('B', rate)]))
            if rate:
                text += ('; at the cap, reading the source alone takes %.2f s for A (%d x %.1f MB) and %.2f s for B'
                         % (args.nodes * manifest['bytes'] / rate, args.nodes, manifest['bytes'] / MB,
                            manifest['bytes'] / rate))
            ratios.append(text + '.')
        rsync_version = subprocess.run([rsync, '--version'], check=False, stdout=subprocess.PIPE,
                                       text=True).stdout.split()
        facts = dict(nodes=args.nodes, shards=len(shards), shard_mib=args.shard_mib, mb=manifest['bytes'] / MB,
                     cap=cap_label(args.source_mbps * MB) if args.source_mbps > 0 else 'off',
                     plan=describe_plan(nodes), python=platform.python_version(),
                     rsync=rsync_version[2] if len(rsync_version) > 2 else '?', machine=platform.machine(),
                     cpus=os.cpu_count(), load_start=load_start, load_end=load_text(), repeat=args.repeat)
        text = '\n'.join(markdown(args, facts, rows, ratios))
        print(text)
        if args.append:
            with open(args.append, 'a', encoding='utf-8') as handle:
                handle.write(text)
    finally:
        for node in nodes:
            node.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
