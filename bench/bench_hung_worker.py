#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: how soon the router takes a hung decode worker out of rotation, and whether it flaps.

A local PD fleet on loopback: one prefill and two decode stand-ins (tests/standin) behind the real
SMG router (the pinned ``smg`` package) started with the health-check settings under test
(``--health-check-endpoint /health_generate``, interval, timeout, failure and success thresholds,
as the sglang_router role passes them). ``tests/load/loadgen.py`` sends chat completions through
the router for the whole run (5 requests/s by default, 30 s client timeout, as the faults scenario).

1. Quiet: load only, for --quiet-secs. Every health change the router shows in ``GET /workers``
   counts as a flap (a false positive: nothing is wrong).
2. Hung: SIGSTOP of the second decode stand-in (a hung worker: its port still accepts
   connections, nothing answers, as under ``docker pause``). The time from the SIGSTOP until
   the router lists it unhealthy (or drops it) is the figure; the requests that failed, and
   those the router still sent to it afterwards (started after that moment and failed), count.
3. SIGCONT after --hung-secs; the time until the router lists it healthy again.

Each setting runs in turn: the old one (5 s / 5 s / 3 failures) and the sglang_router role's
defaults (read from roles/sglang_router/defaults/main.yml).

Usage (from the repository root, after `make setup`):
    .venv/bin/python bench/bench_hung_worker.py --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tests' / 'integration'))
sys.path.insert(0, str(REPO / 'tests' / 'unit'))
from local_pd import LocalPd  # noqa: E402  pylint: disable=wrong-import-position

LOADGEN = REPO / 'tests' / 'load' / 'loadgen.py'
OLD = dict(interval=5, timeout=5, failure_threshold=3, success_threshold=2)
TARGET = 10.0
# A request slower than this (seconds) was held by the hung worker.
SLOW = 5.0


def role_defaults():
    defaults = yaml.safe_load((REPO / 'roles' / 'sglang_router' / 'defaults' / 'main.yml').read_text())
    return dict(interval=defaults['sglang_router_health_check_interval_secs'],
                timeout=defaults['sglang_router_health_check_timeout_secs'],
                failure_threshold=defaults['sglang_router_health_failure_threshold'],
                success_threshold=defaults['sglang_router_health_success_threshold'])


class HealthWatch(threading.Thread):
    """Polls the router's GET /workers every 0.2 s; records (time, url, healthy or None when absent)."""

    def __init__(self, router_url, urls):
        super().__init__(daemon=True)
        self.router_url, self.urls = router_url, urls
        self.events, self.stop = [], threading.Event()
        self.last = {url: True for url in urls}

    def run(self):
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.router_url + '/workers', timeout=2) as resp:
                    workers = json.loads(resp.read())['workers']
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
                continue
            now = time.time()
            seen = {w['url']: w.get('is_healthy') for w in workers}
            for url in self.urls:
                state = seen.get(url)
                state = None if state is None else bool(state)
                if state != self.last[url]:
                    self.events.append((now, url, state))
                    self.last[url] = state
            time.sleep(0.2)

    def first(self, url, state_ok, after):
        return next((t for t, u, s in self.events if u == url and t >= after and state_ok(s)), None)


def run_setting(name, setting, args, model_dir, log_dir):
    # round_robin: each decode gets half the requests (cache_aware sends the load generator's alike
    # prompts mostly to one), so the hung one holds its share.
    fleet = LocalPd(log_dir / name, model_dir, decodes=2, router_args=[
        '--policy', 'round_robin', '--health-check-endpoint', '/health_generate',
        '--health-check-interval-secs', str(setting['interval']),
        '--health-check-timeout-secs', str(setting['timeout']),
        '--health-failure-threshold', str(setting['failure_threshold']),
        '--health-success-threshold', str(setting['success_threshold'])])
    records = log_dir / ('%s-records.jsonl' % name)
    try:
        fleet.wait_healthy()
        hung = fleet.decodes[1]
        watch = HealthWatch(fleet.router_url, [s.url for s in [fleet.prefill] + fleet.decodes])
        watch.start()
        load = fleet.popen([sys.executable, str(LOADGEN), 'run', '--url', fleet.router_url, '--model', 'glm-test',
                            '--out', str(records), '--rate', str(args.rate), '--concurrency', str(args.concurrency),
                            '--timeout', '30', '--max-seconds', str(args.quiet_secs + args.hung_secs + 60)],
                           log_dir / ('%s-loadgen.log' % name))
        quiet_start = time.time()
        time.sleep(args.quiet_secs)
        flaps = [e for e in watch.events if e[0] >= quiet_start]
        stopped_at = time.time()
        os.kill(hung.proc.pid, signal.SIGSTOP)
        time.sleep(args.hung_secs)
        os.kill(hung.proc.pid, signal.SIGCONT)
        resumed_at = time.time()
        deadline = time.time() + 60
        while (watch.first(hung.url, lambda s: s is not True, stopped_at) is not None
               and watch.first(hung.url, lambda s: s is True, resumed_at) is None and time.time() < deadline):
            time.sleep(0.5)
        time.sleep(3)
        load.send_signal(signal.SIGTERM)
        load.wait(60)
        watch.stop.set()
        out_at = watch.first(hung.url, lambda s: s is not True, stopped_at)
        back_at = watch.first(hung.url, lambda s: s is True, resumed_at)
        rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
        failed = [r for r in rows if not r['ok']]
        # Hung: failed, or held past SLOW s (a stand-in answers in milliseconds) by the stopped worker.
        in_fault = [r for r in rows if r['start'] < resumed_at and r['end'] > stopped_at
                    and (not r['ok'] or r['latency'] > SLOW)]
        after_out = [r for r in in_fault if out_at is not None and r['start'] >= out_at]
        return dict(name=name, setting=setting, requests=len(rows), flaps=len(flaps),
                    quiet_requests=len([r for r in rows if r['start'] < stopped_at]),
                    out_secs=None if out_at is None else round(out_at - stopped_at, 1),
                    back_secs=None if back_at is None else round(back_at - resumed_at, 1),
                    failed=len(failed), failed_in_fault=len(in_fault), sent_after_out=len(after_out))
    finally:
        fleet.close()


def report(results, args, load_before, load_after):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    lines = ['', '## Hung worker: out of rotation, and no flaps under load (%s)' % stamp, '',
             'Command: `.venv/bin/python bench/bench_hung_worker.py --quiet-secs %g --hung-secs %g --rate %g '
             '--concurrency %d --append docs/benchmarks/results.md`'
             % (args.quiet_secs, args.hung_secs, args.rate, args.concurrency), '',
             'One prefill and two decode stand-ins behind the real SMG router (smg 1.13.0, `round_robin`) on loopback, health '
             'checks on `/health_generate`; `tests/load/loadgen.py` at %g requests/s, %d at a time at most (30 s '
             'client timeout) for the whole run. Quiet: %g s of load, every health change the router shows counts as a flap. Hung: '
             'SIGSTOP of the second decode for %g s (as `docker pause`), then SIGCONT. Python %s, %s, %d CPUs, '
             'load average %s at the start, %s at the end.'
             % (args.rate, args.concurrency, args.quiet_secs, args.hung_secs, platform.python_version(), platform.machine(),
                os.cpu_count(), load_before, load_after), '',
             '| setting | interval / timeout / failures / passes | quiet requests | flaps | out after SIGSTOP (s) | '
             'back after SIGCONT (s) | requests hung (failed or > 5 s) | of them sent once it was out |',
             '|---|---|---:|---:|---:|---:|---:|---:|']
    for r in results:
        s = r['setting']
        lines.append('| %s | %s s / %s s / %s / %s | %d | %d | %s | %s | %d | %d |' % (
            r['name'], s['interval'], s['timeout'], s['failure_threshold'], s['success_threshold'],
            r['quiet_requests'], r['flaps'], r['out_secs'], r['back_secs'], r['failed_in_fault'], r['sent_after_out']))
    new = results[-1]
    met = new['out_secs'] is not None and new['out_secs'] <= TARGET and new['flaps'] == 0
    lines += ['', 'The role\'s defaults: hung worker out after **%s s** against a target of %g s, %d flaps in %g s of '
              'load (%s).' % (new['out_secs'], TARGET, new['flaps'], args.quiet_secs, 'met' if met else '**not met**')]
    return '\n'.join(lines) + '\n'


def load_average():
    return ' / '.join('%.1f' % v for v in os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--quiet-secs', type=float, default=120)
    parser.add_argument('--hung-secs', type=float, default=30)
    parser.add_argument('--rate', type=float, default=5)
    # Above the requests a hung worker can hold: with fewer, the load generator stalls once every
    # slot waits on it, and the count of hung requests is this cap, not the router's.
    parser.add_argument('--concurrency', type=int, default=64)
    parser.add_argument('--only-defaults', action='store_true', help='skip the old setting')
    parser.add_argument('--append', help='append the results section to this Markdown file')
    args = parser.parse_args()
    before = load_average()
    with tempfile.TemporaryDirectory(prefix='bench-hung-') as tmp:
        tmp = Path(tmp)
        model_dir = LocalPd.model_dir(tmp)
        settings = ([] if args.only_defaults else [('old', OLD)]) + [('defaults', role_defaults())]
        results = []
        for name, setting in settings:
            results.append(run_setting(name, setting, args, model_dir, tmp))
            print(json.dumps(results[-1]), flush=True)
    text = report(results, args, before, load_average())
    print(text)
    if args.append:
        with open(args.append, 'a', encoding='utf-8') as out:
            out.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
