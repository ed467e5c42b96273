#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: adding a decode node with scale_out.yml against a full site.yml rerun.

On a local fleet of systemd node containers (the molecule `scale` topology under other
names and addresses, bench-node-0..3 at 172.30.57.111-114, so it can run beside the
scenario), with load flowing through the router (tests/load/loadgen.py):

* scale_out - ``ansible-playbook playbooks/scale_out.yml -l bench-node-3`` after the
              node joined sglang_decode in the inventory;
* site      - ``ansible-playbook site.yml`` on the same inventory (what an operator would
              run without scale_out.yml).

Each is timed from the start of ansible-playbook until the new decode worker has served
a request of the load, and until ansible-playbook exits. A request of the load is one the
new worker answers once the router lists it (GET /workers with the admin key): its
/get_server_info counter moves past the value it had before the router listed it. The pair
probes the playbooks send the new worker before registering it move that counter too, so
the counter alone would time the probe, not the traffic. Before each run the new node is a
fresh container (no image, no engine configuration) and the router does not know it. Also reported: whether the router
restarted and how many requests failed during the run.

Usage (from the repository root, after `make setup`):
    .venv/bin/python bench/bench_scale_out.py --runs 2 --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
VENV_BIN = os.path.dirname(sys.executable)
PLAYBOOK = os.path.join(VENV_BIN, 'ansible-playbook')
LOADGEN = os.path.join(REPO, 'tests', 'load', 'loadgen.py')
SCENARIO = os.path.join(REPO, 'molecule', 'scale')
PREFIX = 'bench-node-'
FIRST_OCTET = 111
NEW = PREFIX + '3'
NEW_URL = 'http://172.30.57.%d:30200' % (FIRST_OCTET + 3)
ROUTER_URL = 'http://172.30.57.%d:30000' % FIRST_OCTET


def log(message):
    print('[bench] %s' % message, flush=True)


def make_inventory(workdir):
    """The scenario's inventory and scale-out overlay with bench host names and addresses."""
    inv = os.path.join(workdir, 'inventory')
    os.makedirs(os.path.join(inv, 'group_vars'))

    def rename(text):
        for index in range(4):
            text = text.replace('scale-node-%d' % index, PREFIX + str(index))
            text = text.replace('172.30.57.%d' % (101 + index), '172.30.57.%d' % (FIRST_OCTET + index))
        return text

    with open(os.path.join(SCENARIO, 'inventory', 'hosts.yml'), encoding='utf-8') as src:
        hosts = rename(src.read())
    with open(os.path.join(inv, 'hosts.yml'), 'w', encoding='utf-8') as dst:
        dst.write(hosts)
    os.symlink(os.path.join(REPO, 'inventories', 'local', 'group_vars', 'all'), os.path.join(inv, 'group_vars', 'all'))
    shutil.copy(os.path.join(SCENARIO, 'inventory', 'group_vars', 'sglang_pd.yml'), os.path.join(inv, 'group_vars'))
    grown = os.path.join(workdir, 'grown.yml')
    with open(os.path.join(SCENARIO, 'phases', 'grown.yml'), encoding='utf-8') as src, \
            open(grown, 'w', encoding='utf-8') as dst:
        dst.write(rename(src.read()))
    return inv, grown


def playbook(inventories, *args, log_path=None):
    """Run ansible-playbook; return (seconds, returncode)."""
    cmd = [PLAYBOOK]
    for inv in inventories:
        cmd += ['-i', inv]
    cmd += list(args)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_FORCE_COLOR='0')
    start = time.monotonic()
    with open(log_path or os.devnull, 'w', encoding='utf-8') as out:
        rc = subprocess.call(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return time.monotonic() - start, rc


KEY_FILE = os.path.join(REPO, '.cache', 'router-api-key')  # the workers' key too
ADMIN_KEY_FILE = os.path.join(REPO, '.cache', 'router-control-plane-admin-key')


def get_json(url, key_file):
    """The JSON object at url, asked with the key in key_file; None when it does not answer."""
    with open(key_file, encoding='utf-8') as handle:
        request = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + handle.read().strip()})
    try:
        with urllib.request.urlopen(request, timeout=2) as resp:
            return json.load(resp)
    except (OSError, ValueError):
        return None


def served(url):
    """Requests the stand-in at url has answered, or None when it does not answer."""
    info = get_json(url + '/get_server_info', KEY_FILE)
    return None if info is None else int(info.get('standin_requests_served', 0))


def listed_by_router(url):
    """Whether the router lists the worker at url (GET /workers with the admin key)."""
    workers = (get_json(ROUTER_URL + '/workers', ADMIN_KEY_FILE) or {}).get('workers') or []
    return any(str(w.get('url') if isinstance(w, dict) else w).rstrip('/') == url for w in workers)


def router_started(node):
    out = subprocess.run(['docker', 'exec', node, 'systemctl', 'show', '-p', 'ActiveEnterTimestamp', '--value',
                          'sglang-router'], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def fresh_new_node(inv, grown, workdir):
    """Recreate the new node's container and Docker volume: no image, no configuration."""
    subprocess.run(['docker', 'rm', '-f', NEW], capture_output=True, check=False)
    subprocess.run(['docker', 'volume', 'rm', '-f', NEW + '-docker'], capture_output=True, check=False)
    seconds, rc = playbook([inv, grown], os.path.join(REPO, 'tests', 'fleet', 'up.yml'),
                           log_path=os.path.join(workdir, 'up.log'))
    if rc:
        raise SystemExit('recreating %s failed, see %s/up.log' % (NEW, workdir))


def load_between(records_path, start, end):
    """(requests, failed, longest refused window in s) of the load that started in [start, end)."""
    count = failed = 0
    refused = 0.0
    with open(records_path, encoding='utf-8') as handle:
        for line in handle:
            record = json.loads(line)
            if start <= record['start'] < end:
                count += 1
                failed += 0 if record['ok'] else 1
                refused = max(refused, record.get('refused_secs', 0.0))
    return count, failed, refused


def timed_run(mode, inv, grown, workdir, records):
    """One timed run; returns a dict of measurements."""
    args = (['playbooks/scale_out.yml', '-l', NEW] if mode == 'scale_out' else ['site.yml'])
    router_before = router_started(PREFIX + '0')
    log_path = os.path.join(workdir, '%s-%d.log' % (mode, int(time.time())))
    result = {}
    wall_start = time.time()
    start = time.monotonic()
    exited = None
    proc_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_FORCE_COLOR='0')
    with open(log_path, 'w', encoding='utf-8') as out:
        proc = subprocess.Popen([PLAYBOOK, '-i', inv, '-i', grown] + args, cwd=REPO, env=proc_env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        before_listed = 0  # the new worker's counter before the router listed it: the pair probes
        while True:
            now = time.monotonic()
            if 'serving' not in result:
                count = served(NEW_URL) or 0
                if 'listed' not in result and listed_by_router(NEW_URL):
                    result['listed'] = now - start
                elif 'listed' not in result:
                    before_listed = count
                elif count > before_listed:
                    result['serving'] = now - start
            if proc.poll() is not None:
                exited = now if exited is None else exited
                # After ansible-playbook exits, give the first request up to 60 s to arrive.
                if 'serving' in result or now - exited > 60:
                    break
            time.sleep(0.2)
    result['playbook'] = exited - start
    result['rc'] = proc.returncode
    result['router_restarted'] = router_started(PREFIX + '0') != router_before
    result['requests'], result['failed'], result['refused'] = load_between(records, wall_start, time.time())
    result['log'] = log_path
    if proc.returncode != 0 or 'serving' not in result:
        raise SystemExit('%s run failed (rc %s), see %s' % (mode, proc.returncode, log_path))
    return result


def reset(inv, grown, workdir):
    """Take the new worker out again (router included) and give the node a fresh container."""
    seconds, rc = playbook([inv, grown], 'playbooks/scale_in.yml', '-l', NEW, '-e', 'sglang_pd_confirm=false',
                           log_path=os.path.join(workdir, 'reset.log'))
    if rc:
        raise SystemExit('scale_in of %s failed, see %s/reset.log' % (NEW, workdir))
    fresh_new_node(inv, grown, workdir)


def image_size():
    """The pinned image's size as this machine's engine reports it, e.g. '561 MB'."""
    with open(os.path.join(REPO, 'inventories', 'local', 'group_vars', 'all', 'generated.yml'), encoding='utf-8') as handle:
        fleet = yaml.safe_load(handle)
    found = subprocess.run(['docker', 'image', 'inspect', '--format', '{{.Size}}',
                            '%s@%s' % (fleet['sglang_pd_image_repository'], fleet['sglang_pd_image_digest'])],
                           capture_output=True, text=True, check=False)
    return '%d MB' % round(int(found.stdout) / 1e6) if found.returncode == 0 else 'size unknown'


def markdown(args, rows, started, load, loadavg):
    def med(mode, key):
        values = [r[key] for r in rows if r['mode'] == mode]
        return statistics.median(values), min(values)

    so_serving, so_min = med('scale_out', 'serving')
    site_serving, site_min = med('site', 'serving')
    so_play = med('scale_out', 'playbook')[0]
    site_play = med('site', 'playbook')[0]
    lines = [
        '',
        '## scale_out.yml vs a full site.yml rerun: one decode node joins (%s)' % started.strftime('%Y-%m-%d %H:%M UTC'),
        '',
        'Command: `.venv/bin/python bench/bench_scale_out.py --runs %d%s`' % (
            args.runs, ' --append %s' % args.append if args.append else ''),
        '',
        'Fleet: 3 node containers (router + 2 prefill + 2 decode workers, the molecule `scale` topology), '
        'the new node a fresh container each run (image pulled from the local registry, %s). '
        'Load: %s. %s, %d CPUs, load average %.1f at the start. Median of %d run(s) each (min in brackets).' % (
            image_size(), load, platform.machine(), os.cpu_count(), loadavg, args.runs),
        '',
        '| run | until the new worker serves traffic (s) | ansible-playbook (s) | router restarted '
        '| router refused connections for | failed requests |',
        '|---|---:|---:|---|---:|---:|',
    ]
    for mode, label, serving, fastest, play in (
            ('scale_out', '`scale_out.yml -l %s`' % NEW, so_serving, so_min, so_play),
            ('site', '`site.yml`', site_serving, site_min, site_play)):
        mine = [r for r in rows if r['mode'] == mode]
        lines.append('| %s | %.1f (%.1f) | %.1f | %s | %.1f s | %d of %d |' % (
            label, serving, fastest, play, 'yes' if any(r['router_restarted'] for r in mine) else 'no',
            max(r['refused'] for r in mine), sum(r['failed'] for r in mine), sum(r['requests'] for r in mine)))
    lines += [
        '',
        'Ratio: site.yml / scale_out.yml until the new worker serves = **%.1fx**. Per run: %s.' % (
            site_serving / so_serving, ', '.join('%s %.1f s (listed by the router after %.1f s)' % (
                r['mode'], r['serving'], r['listed']) for r in rows)),
        'The new worker serves a request of the load once the router lists it and its request counter moves past '
        'the value it had before (the pair probes sent before the registration move it too, and are not counted).',
        'A request refused at connect is sent again by the load generator (as a load balancer would), so the '
        'router restart of site.yml shows as refused connections, not as failed requests.',
        '',
    ]
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--runs', type=int, default=1, help='timed runs of each kind')
    parser.add_argument('--append', help='append the Markdown result to this file')
    parser.add_argument('--keep', action='store_true', help='leave the bench fleet running')
    args = parser.parse_args()
    if args.runs < 1 or args.runs > 5:
        parser.error('--runs must be between 1 and 5')
    started = datetime.datetime.now(datetime.timezone.utc)
    loadavg = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix='bench-scale-out-')
    inv, grown = make_inventory(workdir)
    log('work directory %s' % workdir)
    records = os.path.join(workdir, 'records.jsonl')
    load = None
    rows = []
    try:
        log('creating the fleet')
        seconds, rc = playbook([inv], os.path.join(SCENARIO, 'create.yml'), log_path=os.path.join(workdir, 'create.log'))
        if rc:
            raise SystemExit('create failed, see %s/create.log' % workdir)
        log('deploying the initial fleet with site.yml')
        seconds, rc = playbook([inv], 'site.yml', log_path=os.path.join(workdir, 'converge.log'))
        if rc:
            raise SystemExit('site.yml failed, see %s/converge.log' % workdir)
        load = subprocess.Popen([sys.executable, LOADGEN, 'run', '--url', ROUTER_URL, '--model', 'glm-5.2-fp8',
                                 '--api-key-file', KEY_FILE,
                                 '--out', records, '--rate', '8', '--concurrency', '4',
                                 '--stop-file', os.path.join(workdir, 'stop'), '--max-seconds', '3000'],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for run in range(args.runs):
            for mode in ('scale_out', 'site'):
                log('run %d: %s' % (run + 1, mode))
                row = timed_run(mode, inv, grown, workdir, records)
                row['mode'] = mode
                rows.append(row)
                log('  listed by the router after %.1f s, serving after %.1f s, playbook %.1f s, router restarted: %s, '
                    'refused up to %.1f s, failed %d of %d'
                    % (row['listed'], row['serving'], row['playbook'], row['router_restarted'], row['refused'], row['failed'],
                       row['requests']))
                reset(inv, grown, workdir)
    finally:
        if load is not None:
            open(os.path.join(workdir, 'stop'), 'w', encoding='utf-8').close()
            load.wait(120)
        if not args.keep:
            log('removing the fleet')
            playbook([inv, grown], os.path.join(SCENARIO, 'destroy.yml'), log_path=os.path.join(workdir, 'destroy.log'))
    text = markdown(args, rows, started, '8 chat completions/s (half streamed) through the router', loadavg)
    print(text)
    if args.append:
        with open(args.append, 'a', encoding='utf-8') as handle:
            handle.write(text)


if __name__ == '__main__':
    main()
