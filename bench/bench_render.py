#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: playbooks/render.yml, playbooks/preflight.yml and the plan's digest on a generated large inventory.

The inventory is generated from inventories/example-2p2d (its group_vars, so the same
image, model, ports and options): N hosts, the first quarter prefill (one worker on 8 GPUs),
the rest decode with two workers each (GPUs 0-3 and 4-7, TP 4), the router on the first
prefill host. No playbook contacts a host. Each is run --runs times per size; the
render writes into a fresh folder each run. bench/plan_digest.yml times the plan's digest
that a no-op site.yml computes once for the whole inventory (playbooks/stages/settled.yml).

Targets (issue 17): at 1,000 hosts render.yml <= 60 s and preflight.yml <= 20 s.

Usage (from the repository root, after `make setup`):
    .venv/bin/python bench/bench_render.py --hosts 32 1000 --runs 3 --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
EXAMPLE = os.path.join(REPO, 'inventories', 'example-2p2d')
TARGETS = {'render': 60.0, 'preflight': 20.0}
TARGET_HOSTS = 1000


def write_inventory(dest, hosts):
    """A HOSTS-host inventory under DEST, with example-2p2d's group_vars."""
    shutil.copytree(os.path.join(EXAMPLE, 'group_vars'), os.path.join(dest, 'group_vars'))
    prefill_count = max(1, hosts // 4)
    prefill, decode = {}, {}
    for index in range(hosts):
        name = f'pd-node-{index:04d}'
        address = f'10.0.{index // 250}.{index % 250 + 2}'
        if index < prefill_count:
            prefill[name] = {'sglang_pd_service_address': address}
        else:
            decode[name] = {'sglang_pd_service_address': address, 'sglang_worker_tp_size': 4,
                            'sglang_pd_decode_workers': [{'gpus': '0-3'}, {'gpus': '4-7'}]}
    inventory = {'all': {'children': {'sglang_pd': {'vars': {'ansible_user': 'azureuser'}, 'children': {
        'sglang_router': {'hosts': {'pd-node-0000': None}},
        'sglang_prefill': {'hosts': prefill},
        'sglang_decode': {'hosts': decode}}}}}}
    with open(os.path.join(dest, 'hosts.yml'), 'w', encoding='utf-8') as handle:
        yaml.safe_dump(inventory, handle)
    return 1 + (hosts - prefill_count) * 2 + prefill_count


def run_playbook(playbook, inventory, extra=(), folder='playbooks'):
    """Seconds ansible-playbook took; fails loudly when the playbook fails."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               SGLANG_ROUTER_API_KEY=os.environ.get('SGLANG_ROUTER_API_KEY', 'bench-router-key-0123456789'))
    command = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'),
               os.path.join(REPO, folder, playbook), '-i', inventory, *extra]
    start = time.monotonic()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f'{playbook} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}')
    return elapsed


def measure(hosts, runs, work):
    inventory = os.path.join(work, f'inventory-{hosts}')
    services = write_inventory(inventory, hosts)
    times = {'preflight': [], 'render': [], 'digest': []}
    files = 0
    for index in range(runs):
        times['preflight'].append(run_playbook('preflight.yml', inventory))
        out = os.path.join(work, f'render-{hosts}-{index}')
        times['render'].append(run_playbook('render.yml', inventory, ['-e', f'render_dir={out}']))
        files = sum(len(names) for _root, _dirs, names in os.walk(out))
        times['digest'].append(run_playbook('plan_digest.yml', inventory, folder='bench'))
    return {'hosts': hosts, 'services': services, 'files': files, 'times': times}


def markdown(results, runs, load_start, load_end, command):
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    lines = [
        f'## render.yml and preflight.yml on generated inventories ({now})', '',
        f'Command: `{command}`', '',
        'Inventory: generated from `inventories/example-2p2d` (its group_vars): the first quarter of the hosts '
        'prefill (one worker, 8 GPUs), the rest decode with two workers each (GPUs 0-3 and 4-7, TP 4), the router on '
        'the first host. No playbook contacts a host. The preflight reads each host\'s variables once, builds the '
        'plan once and runs every check in one action (`plugins/action/preflight.py`); the render writes every '
        'file from that plan in one `file_set` call. `bench/plan_digest.yml` hashes every host\'s variables and the '
        'collection\'s files once, as a no-op site.yml does (`playbooks/stages/settled.yml`); its time is the whole playbook, '
        'Ansible\'s start and the inventory\'s reading included.', '',
        f'Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load average '
        f'{load_start} at the start, {load_end} at the end (1, 5, 15 min). Median of {runs} run(s) (min in brackets).', '',
        '| hosts | services | files written | preflight.yml s | render.yml s (preflight included) '
        '| plan digest s (bench/plan_digest.yml) |',
        '|---:|---:|---:|---:|---:|---:|',
    ]
    for one in results:
        pre, ren, dig = one['times']['preflight'], one['times']['render'], one['times']['digest']
        lines.append(f"| {one['hosts']} | {one['services']} | {one['files']} | {statistics.median(pre):.1f} ({min(pre):.1f}) "
                     f"| {statistics.median(ren):.1f} ({min(ren):.1f}) | {statistics.median(dig):.1f} ({min(dig):.1f}) |")
    lines.append('')
    for one in results:
        if one['hosts'] == TARGET_HOSTS:
            for name, target in TARGETS.items():
                got = statistics.median(one['times'][name])
                lines.append(f"{name}.yml at {TARGET_HOSTS} hosts: **{got:.1f} s** against a target of {target:.0f} s "
                             f"({'met' if got <= target else 'NOT met'}; {target / got:.1f}x inside it).")
    if len(results) > 1:
        small, large = results[0], results[-1]
        per_host = ((statistics.median(large['times']['render']) - statistics.median(small['times']['render']))
                    / (large['hosts'] - small['hosts']))
        lines.append(f"Render cost per added host: {per_host * 1000:.1f} ms "
                     f"(between {small['hosts']} and {large['hosts']} hosts).")
    return '\n'.join(lines) + '\n'


def load_average():
    return ' / '.join(f'{value:.1f}' for value in os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--hosts', type=int, nargs='+', default=[32, 1000])
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--append', help='append the markdown section to this file')
    args = parser.parse_args()
    command = '.venv/bin/python bench/bench_render.py ' + ' '.join(sys.argv[1:])
    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix='bench-render-') as work:
        results = [measure(hosts, args.runs, work) for hosts in args.hosts]
    text = markdown(results, args.runs, load_start, load_average(), command)
    print(text)
    if args.append:
        with open(args.append, 'a', encoding='utf-8') as handle:
            handle.write('\n' + text)


if __name__ == '__main__':
    main()
