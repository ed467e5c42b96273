#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: how late a health wait moves on after the server turns healthy.

A local HTTP server refuses connections for T1 seconds (nothing listens: a worker loading its
model), then answers 503 for T2 seconds (warming up), then 200. An ``ansible-playbook`` play on
localhost starts the server's clock, waits with ``mindverse.sglang_pd.sglang_health`` and notes
the time its next task starts. Two lags from the moment the server turned healthy: until it
served its first 200 (the polling's share) and until the play's next task started.

Each (T1, T2) pair runs with the old polling (``interval`` 1 s, one cap of 10 s for every wait)
and with the module's defaults, which the roles' health and readiness waits use
(``sglang_worker_health_*`` and ``sglang_router_ready_*``), alternately. T1 + T2 stays above the
time Ansible takes to start the module (1-2 s on a loaded 2-core machine): below it, the lag
would be that start, not the polling.

Usage (from the repository root, after `make setup`):
    .venv/bin/python bench/bench_health_lag.py --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'integration'))
from playbook_runner import run_play  # noqa: E402  pylint: disable=wrong-import-position

sys.path.insert(0, os.path.join(REPO, '.cache', 'collections'))
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_health  # noqa: E402  pylint: disable=wrong-import-position

# (T1 refusing, T2 answering 503) in seconds, from the moment the play starts the server's clock.
PHASES = [(0, 3), (5, 0), (5, 2), (20, 0), (20, 3), (40, 1), (40, 8)]
# The polling before the refused cap: interval 1 s, doubling up to 10 s whatever the answer.
OLD = {'interval': 1, 'max_interval': 10, 'refused_max_interval': 10}
TARGET = 1.0


class PhasedServer:
    """Refuses until ``refuse`` s after ``started``, answers 503 for ``warm`` s more, then 200."""

    def __init__(self, refuse, warm, start_file):
        self.refuse, self.warm, self.start_file = refuse, warm, start_file
        self.port = free_port()
        self.started = None
        self.first_200 = None
        self.answered_503 = 0
        self._server = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def healthy_at(self):
        return self.started + self.refuse + self.warm

    def _run(self):
        while not os.path.exists(self.start_file):
            time.sleep(0.005)
        self.started = time.time()
        time.sleep(self.refuse)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def do_GET(self):
                status = 200 if time.time() >= owner.healthy_at else 503
                if status == 503:
                    owner.answered_503 += 1
                elif owner.first_200 is None:
                    owner.first_200 = time.time()
                self.send_response(status)
                self.send_header('Content-Length', '0')
                self.end_headers()

        self._server = ThreadingHTTPServer(('127.0.0.1', self.port), Handler)
        self._server.serve_forever(poll_interval=0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def free_port():
    """A port on 127.0.0.1 where nothing listens (until the server binds it)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def wait_play(url, start_file, polling):
    return {
        'hosts': 'localhost', 'gather_facts': False,
        'tasks': [
            {'name': 'Start the server clock', 'ansible.builtin.file': {'path': start_file, 'state': 'touch', 'mode': '0644'}},
            {'name': 'Wait until the server is healthy',
             'mindverse.sglang_pd.sglang_health': dict(url=url, timeout=300, **polling), 'register': 'health'},
            {'name': 'Note when the play moves on', 'ansible.builtin.set_stats': {'per_host': False, 'data': {
                'moved_on': '{{ now().timestamp() }}', 'attempts': '{{ health.attempts }}'}}},
        ],
    }


def measure(refuse, warm, polling):
    """(polling lag, play lag, attempts, whether it got a 503 first) of one wait, lags in seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        start_file = os.path.join(tmp, 'start')
        inventory = {'all': {'hosts': {'localhost': {'ansible_connection': 'local',
                                                     'ansible_python_interpreter': sys.executable}}}}
        with PhasedServer(refuse, warm, start_file) as server:
            stats = run_play(Path(tmp), wait_play('http://127.0.0.1:%d/health_generate' % server.port, start_file, polling),
                             inventory, name='wait')
        return (server.first_200 - server.healthy_at, float(stats['moved_on']) - server.healthy_at, int(stats['attempts']),
                server.answered_503 > 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--runs', type=int, default=1, help='runs of each pair and polling')
    parser.add_argument('--phases', nargs='+', metavar='T1:T2', help='pairs of seconds refused and answering 503 '
                        '(default: %s)' % ' '.join('%g:%g' % pair for pair in PHASES))
    parser.add_argument('--append', help='append the markdown section to this file')
    args = parser.parse_args()
    phases = [tuple(float(t) for t in pair.split(':')) for pair in args.phases] if args.phases else PHASES
    os.environ['no_proxy'] = os.environ['NO_PROXY'] = '127.0.0.1,localhost'
    load_start = ' / '.join(f'{v:.1f}' for v in os.getloadavg())
    rows = []
    for refuse, warm in phases:
        found = {'old': [], 'new': []}
        for _run in range(args.runs):
            for name, polling in (('old', OLD), ('new', {})):
                found[name].append(measure(refuse, warm, polling))
                polled, moved_on, attempts, _warming = found[name][-1]
                print(f'T1 {refuse:g} s, T2 {warm:g} s, {name}: first 200 {polled:.2f} s, play on {moved_on:.2f} s late, '
                      f'{attempts} attempts', flush=True)
        rows.append((refuse, warm, found))
    load_end = ' / '.join(f'{v:.1f}' for v in os.getloadavg())
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    options = yaml.safe_load(sglang_health.DOCUMENTATION)['options']
    new_polling = ', '.join(f'`{name}` {options[name]["default"]:g}' for name in OLD)

    def cell(values):
        polled, moved_on, attempts, _warming = zip(*values)
        return (f'{statistics.median(polled):.2f} ({max(polled):.2f}) | {statistics.median(moved_on):.2f} ({max(moved_on):.2f}) '
                f'| {statistics.median(attempts):.0f}')

    lines = [
        f'## Health-wait lag: the play moving on after the server turns healthy ({now})', '',
        f'Command: `.venv/bin/python bench/bench_health_lag.py {" ".join(sys.argv[1:])}`', '',
        'A local server refuses for T1 s, answers 503 for T2 s, then 200; `ansible-playbook` on localhost '
        '(local connection) waits with `sglang_health`. Lags from the server turning healthy: until it served '
        'its first 200 (the polling) and until the play\'s next task started (the polling plus Ansible handing '
        f'on). Old: `interval` 1, one cap of 10 s; new: the module\'s defaults ({new_polling}), which the roles\' '
        'waits pass on. '
        f'Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load average '
        f'{load_start} at the start, {load_end} at the end. Median of {args.runs} run(s) (max in brackets).', '',
        '| T1 refused (s) | T2 503 (s) | old: first 200 late (s) | old: play on late (s) | old attempts '
        '| new: first 200 late (s) | new: play on late (s) | new attempts |',
        '|---:|---:|---:|---:|---:|---:|---:|---:|',
    ]
    lines += [f'| {refuse:g} | {warm:g} | {cell(found["old"])} | {cell(found["new"])} |' for refuse, warm, found in rows]

    def worst(name, warming, column):
        """The largest lag (COLUMN 0: first 200, 1: play on) of NAME's runs that did (or did not) get a 503 first."""
        return max((run[column] for _r, _w, found in rows for run in found[name] if run[3] == warming), default=float('nan'))

    answered = max(worst('new', True, 0), worst('new', True, 1))
    lines += ['', f'Worst, after a 503 (the server had answered): old first 200 {worst("old", True, 0):.2f} s late, play '
              f'on {worst("old", True, 1):.2f} s late; new **{worst("new", True, 0):.2f} s** and **{worst("new", True, 1):.2f} s** '
              f'against a target of {TARGET:.0f} s ({"met" if answered <= TARGET else "NOT met"}). Worst, from refusing '
              f'straight to 200: old {worst("old", False, 0):.2f} s and {worst("old", False, 1):.2f} s; new '
              f'{worst("new", False, 0):.2f} s and {worst("new", False, 1):.2f} s (bounded by `refused_max_interval`).']
    text = '\n'.join(lines) + '\n'
    print(text)
    if args.append:
        with open(args.append, 'a', encoding='utf-8') as handle:
            handle.write('\n' + text)


if __name__ == '__main__':
    main()
