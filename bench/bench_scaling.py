#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: full converge and no-op site.yml on fleets of N node containers (issue 17, target 5).

For each N (default 3, 6 and 12) a fresh fleet of N systemd node containers is started
(tests/fleet/up.yml, each with its own Docker engine; scaling-node-0..N-1 at
172.30.57.61.., so it can run beside `make demo`), then, timed:

* reach    - ``ansible sglang_pd -m ansible.builtin.setup -a gather_subset=min``;
* converge - ``ansible-playbook site.yml`` on the fresh nodes (engine configuration, model
             staging, image pull, workers, router, checks); profile_tasks gives the time of
             the image pull: in the foreground (more nodes than sglang_image_pull_concurrency,
             throttled waves from the one local registry) or in the background from early in
             the run, when only the wait left at its end is seen;
* no-op    - ``ansible-playbook site.yml`` again, --noop-runs times (changed=0 required).

Each node runs one worker (node 0 the router and a prefill worker, a third of the nodes
prefill, the rest decode): lighter than the demo fleet's node with two decode workers.
Besides wall time, the controller's CPU time (ansible-playbook, its forks and the
`docker exec` clients they start) is measured per run. A least-squares line
``t = a + b * N`` is fitted to each series; docs/scaling.md projects from it.

Usage (from the repository root, after `make setup`):
    .venv/bin/python bench/bench_scaling.py --nodes 3 6 12 --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
BIN = os.path.dirname(sys.executable)
PREFIX = 'scaling-node-'
FIRST_ADDRESS = 61  # 172.30.57.61 .. inside the fleet's cluster network (172.30.57.0/25)
MAX_NODES = 40
PULL_TASK = 'Pull the image by digest'
# Up to sglang_image_pull_concurrency nodes pull in the background from early in the run
# (playbooks/stages/image_prefetch.yml): then the pull task only starts it, and this task waits for the rest.
WAIT_TASK = 'Wait for the image pull started in the background'
NODE_VARS = """---
# Written by bench/bench_scaling.py. No GPU or InfiniBand in node containers.
sglang_pd_manage_rocm: false
sglang_pd_manage_rdma: false
# The test image is ~400 MB, not the production ~92 GB the free-space check assumes.
sglang_image_size_bytes: 1000000000
sglang_image_free_margin_bytes: 1000000000
"""


def log(message):
    print('[bench] %s' % message, flush=True)


def write_inventory(workdir, nodes):
    """An inventory of NODES hosts: node 0 router + prefill, a third prefill, the rest decode."""
    inv = os.path.join(workdir, 'inventory-%d' % nodes)
    os.makedirs(os.path.join(inv, 'group_vars'))
    os.symlink(os.path.join(REPO, 'inventories', 'local', 'group_vars', 'all'), os.path.join(inv, 'group_vars', 'all'))
    with open(os.path.join(inv, 'group_vars', 'sglang_pd.yml'), 'w', encoding='utf-8') as handle:
        handle.write(NODE_VARS)
    prefill = max(1, nodes // 3)
    lines = ['---', 'all:', '  children:', '    sglang_pd:', '      vars:',
             # Reached as the local fleet is: over SSH as azureuser, the plays escalating with sudo.
             '        ansible_connection: ssh', '        ansible_user: azureuser',
             '        ansible_host: "{{ sglang_pd_service_address }}"', '      children:',
             '        sglang_router:', '          hosts:', '            %s0:' % PREFIX]
    for group, members in (('sglang_prefill', range(prefill)), ('sglang_decode', range(prefill, nodes))):
        lines += ['        %s:' % group, '          hosts:']
        for index in members:
            lines += ['            %s%d:' % (PREFIX, index),
                      '              sglang_pd_service_address: 172.30.57.%d' % (FIRST_ADDRESS + index)]
    with open(os.path.join(inv, 'hosts.yml'), 'w', encoding='utf-8') as handle:
        handle.write('\n'.join(lines) + '\n')
    return inv, prefill


def run(command, log_path, extra_env=None):
    """(wall seconds, controller CPU seconds, output) of COMMAND; exits when it fails."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', **(extra_env or {}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log_path, 'w', encoding='utf-8') as handle:
        handle.write(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit('%s failed (rc %d), see %s' % (' '.join(command), done.returncode, log_path))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def changed_hosts(stdout):
    return sorted({m.group(1) for m in re.finditer(r'^(\S+)\s+:\s+ok=\d+\s+changed=([1-9]\d*)', stdout, re.M)})


def task_seconds(stdout, name):
    """Seconds profile_tasks reports for the task NAME (None when it is not listed)."""
    found = re.search(r'%s\s+-+\s+([\d.]+)s' % re.escape(name), stdout)
    return float(found.group(1)) if found else None


def task_ran(stdout, name):
    """Whether the task NAME ran on some host (profile_tasks times skipped tasks too)."""
    sections = re.finditer(r'^TASK \[[^\n]*%s\][^\n]*\n(.*?)(?=^TASK \[|^PLAY |\Z)' % re.escape(name),
                           stdout, re.M | re.S)
    return any(re.search(r'^(ok|changed): \[', section.group(1), re.M) for section in sections)


def image_bytes(node, reference):
    done = subprocess.run(['docker', 'exec', node, 'docker', 'image', 'inspect', '-f', '{{.Size}}', reference],
                          capture_output=True, text=True, check=False)
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else None


def image_reference():
    with open(os.path.join(REPO, 'inventories', 'local', 'group_vars', 'all', 'generated.yml'), encoding='utf-8') as fh:
        text = fh.read()
    repository = re.search(r'^sglang_pd_image_repository:\s*"?([^"\s]+)', text, re.M).group(1)
    digest = re.search(r'^sglang_pd_image_digest:\s*"?([^"\s]+)', text, re.M).group(1)
    return '%s@%s' % (repository, digest)


def fit(points):
    """(a, b) of the least-squares line t = a + b * n through POINTS [(n, t)]."""
    ns = [point[0] for point in points]
    ts = [point[1] for point in points]
    mean_n, mean_t = statistics.fmean(ns), statistics.fmean(ts)
    spread = sum((n - mean_n) ** 2 for n in ns)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in points) / spread if spread else 0.0
    return mean_t - slope * mean_n, slope


def measure(nodes, workdir, noop_runs, reference):
    inv, prefill = write_inventory(workdir, nodes)
    logs = os.path.join(workdir, 'logs-%d' % nodes)
    os.makedirs(logs)
    playbook = os.path.join(BIN, 'ansible-playbook')
    log('N=%d: starting %d fresh node containers' % (nodes, nodes))
    run([playbook, '-i', inv, 'tests/fleet/down.yml'], os.path.join(logs, 'down-before.log'))
    up = run([playbook, '-i', inv, 'tests/fleet/up.yml'], os.path.join(logs, 'up.log'))[0]
    try:
        row = {'nodes': nodes, 'prefill': prefill, 'up': up}
        reach = [run([os.path.join(BIN, 'ansible'), 'sglang_pd', '-i', inv, '-m', 'ansible.builtin.setup', '-a',
                      'gather_subset=min'], os.path.join(logs, 'reach-0.log'))[0]]
        log('N=%d: full converge' % nodes)
        wall, cpu, stdout = run([playbook, '-i', inv, 'site.yml'], os.path.join(logs, 'converge.log'),
                                {'ANSIBLE_CALLBACKS_ENABLED': 'ansible.posix.profile_tasks',
                                 'PROFILE_TASKS_TASK_OUTPUT_LIMIT': 'all'})
        row.update(converge=wall, converge_cpu=cpu, pull=task_seconds(stdout, PULL_TASK),
                   pull_wait=task_seconds(stdout, WAIT_TASK) if task_ran(stdout, WAIT_TASK) else None,
                   image_bytes=image_bytes(PREFIX + '0', reference))
        log('N=%d: converge %.1f s (controller CPU %.1f s), pull task %s s, background pull waited %s s'
            % (nodes, wall, cpu, row['pull'], row['pull_wait']))
        noop, noop_cpu, not_noop = [], [], []
        for index in range(noop_runs):
            reach.append(run([os.path.join(BIN, 'ansible'), 'sglang_pd', '-i', inv, '-m', 'ansible.builtin.setup',
                              '-a', 'gather_subset=min'], os.path.join(logs, 'reach-%d.log' % (index + 1)))[0])
            wall, cpu, stdout = run([playbook, '-i', inv, 'site.yml'], os.path.join(logs, 'noop-%d.log' % index))
            noop.append(wall)
            noop_cpu.append(cpu)
            not_noop += changed_hosts(stdout)
        row.update(reach=statistics.median(reach), noop=statistics.median(noop), noop_min=min(noop),
                   noop_cpu=statistics.median(noop_cpu), not_noop=sorted(set(not_noop)))
        log('N=%d: no-op %.1f s (controller CPU %.1f s), reach %.1f s'
            % (nodes, row['noop'], row['noop_cpu'], row['reach']))
        return row
    finally:
        run([playbook, '-i', inv, 'tests/fleet/down.yml'], os.path.join(logs, 'down.log'))


def markdown(args, rows, started, load_start, load_end):
    now = started.strftime('%Y-%m-%d %H:%M UTC')
    lines = [
        '## Scaling: full converge and no-op site.yml on 3 to %d node containers (%s)' % (rows[-1]['nodes'], now), '',
        'Command: `.venv/bin/python bench/bench_scaling.py %s`' % ' '.join(sys.argv[1:]), '',
        'Fleets: N fresh systemd node containers on this one machine, each with its own Docker engine '
        '(`tests/fleet/up.yml`), Docker connection, forks 10, pipelining. **Lighter than production and than '
        'the demo fleet**: one stand-in worker per node (node 0 also runs the router; a third of the nodes '
        'prefill, the rest decode), no ROCm or RDMA roles (no devices), a ~400 MB image instead of ~92 GB. '
        'Every node, the registry and the controller share the same %d CPUs, so wall time here grows with N '
        'where real nodes would work in parallel. Python %s, %s, load average %s at the start, %s at the end. '
        'Controller CPU: user + system seconds of ansible-playbook, its forks and their `docker exec` clients. '
        'No-op: median of %d runs (min in brackets).' % (
            os.cpu_count(), platform.python_version(), platform.machine(), load_start, load_end, args.noop_runs),
        '',
        '| N | full converge s | controller CPU s | image pull s (image size / s) '
        '| no-op s | controller CPU s | reach s | no-op / reach |',
        '|---:|---:|---:|---|---:|---:|---:|---:|',
    ]
    for row in rows:
        pull = '-'
        if row['pull_wait'] is not None:
            pull = 'in the background from early in the run; %.1f left to wait at its end' % row['pull_wait']
        elif row['pull'] and row['image_bytes']:
            per_node = row['image_bytes'] / 1e6 / row['pull']
            pull = '%.1f in the foreground, throttled (%.0f MB/s of image per node, %.0f MB/s in all)' % (
                row['pull'], per_node, per_node * row['nodes'])
        lines.append('| %d | %.1f | %.1f | %s | %.1f (%.1f) | %.1f | %.1f | %.1fx |' % (
            row['nodes'], row['converge'], row['converge_cpu'], pull, row['noop'], row['noop_min'],
            row['noop_cpu'], row['reach'], row['noop'] / row['reach']))
    lines.append('')
    series = (('full converge, wall', 'converge'), ('full converge, controller CPU', 'converge_cpu'),
              ('no-op, wall', 'noop'), ('no-op, controller CPU', 'noop_cpu'), ('reach, wall', 'reach'))
    lines += ['Least-squares fit t = a + b x N (per-node cost b):', '',
              '| series | a (s) | b (s per node) | at 64 | at 256 | at 1,000 |', '|---|---:|---:|---:|---:|---:|']
    for label, key in series:
        a, b = fit([(row['nodes'], row[key]) for row in rows])
        lines.append('| %s | %.1f | %.2f | %.0f | %.0f | %.0f |' % (
            label, a, b, a + 64 * b, a + 256 * b, a + 1000 * b))
    lines.append('')
    lines.append('The "at" columns extrapolate this machine (every node on 2 CPUs), not a fleet: '
                 'docs/scaling.md turns the controller CPU per node into projections for real nodes.')
    not_noop = sorted({host for row in rows for host in row['not_noop']})
    lines.append('Every no-op run changed nothing.' if not not_noop else 'NOT a no-op: changed on %s.' % not_noop)
    return '\n'.join(lines) + '\n'


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--nodes', type=int, nargs='+', default=[3, 6, 12])
    parser.add_argument('--noop-runs', type=int, default=2)
    parser.add_argument('--append', help='append the markdown section to this file')
    args = parser.parse_args()
    if any(n < 2 or n > MAX_NODES for n in args.nodes) or len(set(args.nodes)) < 2:
        parser.error('--nodes: at least two different sizes, each between 2 and %d' % MAX_NODES)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = ' / '.join('%.1f' % v for v in os.getloadavg())
    workdir = tempfile.mkdtemp(prefix='bench-scaling-')
    log('work directory %s' % workdir)
    reference = image_reference()
    rows = [measure(nodes, workdir, args.noop_runs, reference) for nodes in sorted(args.nodes)]
    load_end = ' / '.join('%.1f' % v for v in os.getloadavg())
    text = markdown(args, rows, started, load_start, load_end)
    print(text)
    if args.append:
        with open(args.append, 'a', encoding='utf-8') as handle:
            handle.write('\n' + text)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == '__main__':
    main()
