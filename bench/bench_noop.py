#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: a no-op site.yml against reaching the hosts (issue 17, target 1).

On a fleet that site.yml has already converged (`make demo`: the local fleet of systemd
node containers, inventories/local), runs, alternately, --runs times each:

* reach    - ``ansible sglang_pd -m ansible.builtin.setup -a gather_subset=min``
             (what reaching every host costs, with the same forks and connection);
* no-op    - ``ansible-playbook site.yml`` (nothing to change: the recap must say
             changed=0 on every host, else the run is reported as not a no-op). Every node
             holds what the last verified run recorded, so the run compares the nodes, ends
             the converging plays and verifies the fleet (playbooks/stages/settled.yml);
* every play - the same with ``-e '{"sglang_pd_skip_settled": false}'``: every role runs and
             finds nothing to change (what a no-op cost before the comparison).

The last no-op run also reports its time per role (ansible.posix.profile_roles).
Target: no-op <= 8x reach.

Usage (from the repository root, after `make demo`):
    .venv/bin/python bench/bench_noop.py --runs 3 --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
TARGET = 8.0
BIN = os.path.dirname(sys.executable)


def run(command, extra_env=None):
    """(seconds, stdout) of COMMAND run from the repository; exits when it fails."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', **(extra_env or {}))
    start = time.monotonic()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f'{" ".join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}')
    return elapsed, done.stdout


def changed_hosts(recap):
    """Hosts whose PLAY RECAP line says changed > 0."""
    return [m.group(1) for m in re.finditer(r'^(\S+)\s+:\s+ok=\d+\s+changed=([1-9]\d*)', recap, re.M)]


def role_times(stdout):
    """[(role, seconds)] from profile_roles' summary, slowest first."""
    found = re.findall(r'^(\S+)\s+-+\s+([\d.]+)s$', stdout, re.M)
    return [(role, float(seconds)) for role, seconds in found if role != 'total']


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--inventory', default='inventories/local')
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--append', help='append the markdown section to this file')
    args = parser.parse_args()
    load_start = ' / '.join(f'{v:.1f}' for v in os.getloadavg())
    # A first run records the nodes (the collection's files may have changed since the last record).
    run([os.path.join(BIN, 'ansible-playbook'), 'site.yml', '-i', args.inventory])
    reach, noop, every, not_noop, profile = [], [], [], [], []
    for index in range(args.runs):
        reach.append(run([os.path.join(BIN, 'ansible'), 'sglang_pd', '-i', args.inventory, '-m', 'ansible.builtin.setup',
                          '-a', 'gather_subset=min'])[0])
        extra = {'ANSIBLE_CALLBACKS_ENABLED': 'ansible.posix.profile_roles'} if index == args.runs - 1 else {}
        seconds, stdout = run([os.path.join(BIN, 'ansible-playbook'), 'site.yml', '-i', args.inventory], extra)
        noop.append(seconds)
        not_noop += changed_hosts(stdout)
        if extra:
            profile = role_times(stdout)
        seconds, stdout = run([os.path.join(BIN, 'ansible-playbook'), 'site.yml', '-i', args.inventory,
                               '-e', '{"sglang_pd_skip_settled": false}'])
        every.append(seconds)
        not_noop += changed_hosts(stdout)
    load_end = ' / '.join(f'{v:.1f}' for v in os.getloadavg())
    ratio = statistics.median(noop) / statistics.median(reach)
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    lines = [
        f'## No-op site.yml vs reaching the hosts ({now})', '',
        f'Command: `.venv/bin/python bench/bench_noop.py {" ".join(sys.argv[1:])}`', '',
        f'Fleet: `{args.inventory}` after `make demo` (systemd node containers, Docker connection, forks 10, '
        f'pipelining). Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load average '
        f'{load_start} at the start, {load_end} at the end. Median of {args.runs} runs (min in brackets).', '',
        '| run | seconds |', '|---|---:|',
        f'| `ansible sglang_pd -m setup -a gather_subset=min` | {statistics.median(reach):.1f} ({min(reach):.1f}) |',
        f'| no-op `ansible-playbook site.yml` | {statistics.median(noop):.1f} ({min(noop):.1f}) |',
        f'| no-op with every play (`-e \'{{"sglang_pd_skip_settled": false}}\'`) | {statistics.median(every):.1f} '
        f'({min(every):.1f}) |', '',
        f'Ratio no-op / reach = **{ratio:.1f}x** against a target of {TARGET:.0f}x '
        f'({"met" if ratio <= TARGET else "NOT met"}). '
        + ('Every run changed nothing.' if not not_noop else f'NOT a no-op: changed on {sorted(set(not_noop))}.'),
    ]
    if profile:
        lines.append('Time per role in the last no-op run (profile_roles; roles that ran only): '
                     + ', '.join(f'{role} {seconds:.1f} s' for role, seconds in profile[:8]) + '.')
    text = '\n'.join(lines) + '\n'
    print(text)
    if args.append:
        with open(args.append, 'a', encoding='utf-8') as handle:
            handle.write('\n' + text)


if __name__ == '__main__':
    main()
