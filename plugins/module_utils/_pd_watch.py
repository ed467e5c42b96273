# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The PD path watcher: between playbook runs, a decode whose path to every prefill fails leaves rotation (private).

Runs on a router host as a long-running service. Every ``interval`` seconds it reads each router's
workers (``GET /workers``), sends the pair probe (``_pair_probe.probe_pairs``, the request the
router itself sends: the same body to a prefill and a decode, with bootstrap host, port and room)
through every (prefill, decode) pair, with a short timeout, and decides:

- a decode whose every pair failed ``fail_after`` rounds in a row is removed from every router it
  is in (``DELETE /workers/{id}``), unless that would leave no decode whose path passes in
  rotation: then it is kept and reported as ``kept`` (the metric ``sglang_pd_watch_kept`` alerts);
- a decode the watcher removed itself is added back (``POST /workers``, with the worker type and
  bootstrap port it had) to the routers it was removed from once one of its pairs passed
  ``heal_after`` rounds in a row. It never adds a worker it did not remove: a worker a playbook
  deregistered (for a restart, a drain, a scale-in) is not the watcher's to bring back;
- while the fleet lock file exists (a playbook run changes the fleet, ``_fleet_lock``), it probes
  and reports but neither removes nor adds.

Each round writes its state (JSON: every pair's result, every decode it holds out, when and why)
for ``playbooks/status.yml``, and Prometheus text for node-exporter's textfile collector.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._atomic_file import write_atomically
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._fleet_lock import describe, read as read_lock
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HttpClient, HttpRequestError, normalise_url
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._pair_probe import probe_pairs
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._router_api import API_WORKERS, RouterClient, RouterError

STATE_VERSION = 1


def pair_key(prefill_url, decode_url):
    return '%s -> %s' % (prefill_url, decode_url)


def count_rounds(previous, passed):
    """A pair's ``(ok_in_a_row, failed_in_a_row)`` after this round."""
    ok, failed = previous
    return (ok + 1, 0) if passed else (0, failed + 1)


def decide(streaks, in_rotation, held_out, fail_after, heal_after, locked):
    """What to do this round: ``dict(remove=[decode], add=[decode], kept=[decode])``.

    STREAKS: ``{decode: [(ok_in_a_row, failed_in_a_row) per prefill]}``; IN_ROTATION: the decodes
    the routers list; HELD_OUT: the decodes the watcher removed itself. No prefill: no verdict.
    """
    def failing(decode):
        pairs = streaks.get(decode) or []
        return bool(pairs) and all(failed >= fail_after for _ok, failed in pairs)

    def healed(decode):
        return any(ok >= heal_after for ok, _failed in streaks.get(decode) or [])

    def passing(decode):
        return any(ok >= 1 for ok, _failed in streaks.get(decode) or [])

    failed = sorted(d for d in in_rotation if failing(d))
    # Only while a decode whose path passes stays in rotation: when every decode fails, the fault is
    # more likely the prefill's (or the probe's) and taking every decode out would stop all service.
    keeps_one = any(passing(d) for d in in_rotation if d not in failed)
    remove, kept = (failed, []) if keeps_one else ([], failed)
    add = sorted(d for d in held_out if d not in in_rotation and healed(d))
    if locked:
        return dict(remove=[], add=[], kept=kept, paused=remove + add)
    return dict(remove=remove, add=add, kept=kept, paused=[])


def metrics_text(state):
    """The state as Prometheus text (node-exporter textfile collector)."""
    lines = ['# HELP sglang_pd_watch_pair_ok 1 when the last pair probe through this prefill and decode passed.',
             '# TYPE sglang_pd_watch_pair_ok gauge']
    for pair in state['pairs']:
        lines.append('sglang_pd_watch_pair_ok{prefill="%s",decode="%s"} %d'
                     % (pair['prefill_url'], pair['decode_url'], 0 if pair['failed'] else 1))
    lines += ['# HELP sglang_pd_watch_held_out 1 for a decode worker the watcher took out of rotation.',
              '# TYPE sglang_pd_watch_held_out gauge']
    lines += ['sglang_pd_watch_held_out{decode="%s"} 1' % entry['url'] for entry in state['held_out']]
    lines += ['# HELP sglang_pd_watch_kept 1 for a decode whose every path fails, kept because no other decode passes.',
              '# TYPE sglang_pd_watch_kept gauge']
    lines += ['sglang_pd_watch_kept{decode="%s"} 1' % url for url in state['kept']]
    lines += ['# HELP sglang_pd_watch_paused 1 while the fleet lock is held: the watcher only probes.',
              '# TYPE sglang_pd_watch_paused gauge', 'sglang_pd_watch_paused %d' % (1 if state['paused_by'] else 0),
              '# HELP sglang_pd_watch_last_round_timestamp_seconds When the watcher finished its last round.',
              '# TYPE sglang_pd_watch_last_round_timestamp_seconds gauge',
              'sglang_pd_watch_last_round_timestamp_seconds %.3f' % state['updated']]
    return '\n'.join(lines) + '\n'


class Watcher:
    """One router host's watcher over ROUTERS (base URLs)."""

    def __init__(self, routers, state_path, metrics_path=None, lock_path=None, api_key=None, probe_timeout=5.0,
                 fail_after=2, heal_after=2, parallel=8, model=None, clock=time.time, probe=probe_pairs,
                 http_factory=None):
        self.state_path, self.metrics_path, self.lock_path = state_path, metrics_path, lock_path
        self.fail_after, self.heal_after, self.parallel = fail_after, heal_after, parallel
        self.clock, self.probe = clock, probe
        self.common = dict(model=model, messages=None, max_tokens=1, timeout=probe_timeout, max_latency_ms=None,
                           api_key=None, validate_certs=True)
        factory = http_factory or (lambda: HttpClient(timeout=probe_timeout, api_key=api_key or None))
        self.routers = [RouterClient(factory(), url) for url in routers]
        self.streaks = {}
        self.held_out = self._load_held_out()

    def _load_held_out(self):
        """The decodes the watcher removed, from its state file: it survives its own restart."""
        try:
            with open(self.state_path, encoding='utf-8') as handle:
                data = json.load(handle)
            return {entry['url']: entry for entry in data.get('held_out') or []}
        except (OSError, ValueError, TypeError, KeyError):
            return {}

    def _workers(self):
        """``({router URL: [worker]}, [problem])``."""
        found, problems = {}, []
        for router in self.routers:
            try:
                found[router.base_url] = router.list_workers(API_WORKERS)
            except RouterError as exc:
                problems.append(str(exc))
        return found, problems

    def round(self):
        """One round: read, probe, decide, act, write. Returns the state written."""
        started = self.clock()
        by_router, problems = self._workers()
        prefills, in_rotation = {}, set()
        for workers in by_router.values():
            for worker in workers:
                url = normalise_url(worker['url'])
                if worker['worker_type'] == 'prefill':
                    prefills[url] = worker.get('bootstrap_port')
                elif worker['worker_type'] == 'decode':
                    in_rotation.add(url)
        # A decode the watcher removed and a playbook registered again is in rotation: no longer held out.
        for url in [u for u in self.held_out if u in in_rotation]:
            del self.held_out[url]
        decodes = sorted(in_rotation | set(self.held_out))
        pairs = [dict(prefill_url=p, decode_url=d, bootstrap_port=port)
                 for d in decodes for p, port in sorted(prefills.items()) if port]
        results = self.probe(pairs, self.common, self.parallel) if pairs else []
        streaks = {}
        for result in results:
            key = pair_key(result['prefill_url'], result['decode_url'])
            self.streaks[key] = count_rounds(self.streaks.get(key, (0, 0)), not result['failed'])
            streaks.setdefault(result['decode_url'], []).append(self.streaks[key])
        holder = read_lock(self.lock_path) if self.lock_path else None
        verdict = decide(streaks, in_rotation, set(self.held_out), self.fail_after, self.heal_after, holder is not None)
        now = self.clock()
        for decode in verdict['remove']:
            self.held_out[decode] = dict(url=decode, since=now, routers=self._remove(by_router, decode, problems),
                                         reason=self._reason(results, decode))
        for decode in verdict['add']:
            if self._add(self.held_out[decode], problems):
                del self.held_out[decode]
        state = dict(
            version=STATE_VERSION, updated=now, round_secs=round(now - started, 3), routers=sorted(by_router),
            fail_after=self.fail_after, heal_after=self.heal_after,
            pairs=[dict(prefill_url=r['prefill_url'], decode_url=r['decode_url'], failed=r['failed'],
                        ok_in_a_row=self.streaks[pair_key(r['prefill_url'], r['decode_url'])][0],
                        failed_in_a_row=self.streaks[pair_key(r['prefill_url'], r['decode_url'])][1],
                        latency_ms=r.get('latency_ms'), msg=r.get('msg')) for r in results],
            held_out=[self.held_out[url] for url in sorted(self.held_out)],
            removed=verdict['remove'], added=verdict['add'], kept=verdict['kept'],
            paused_by=describe(holder) if holder is not None else None, paused=verdict['paused'], problems=problems)
        write_atomically(self.state_path, json.dumps(state, indent=1, sort_keys=True) + '\n', 0o644)
        if self.metrics_path:
            write_atomically(self.metrics_path, metrics_text(state), 0o644)
        return state

    @staticmethod
    def _reason(results, decode):
        return ' | '.join(r.get('msg') or '' for r in results if r['decode_url'] == decode and r['failed'])

    def _remove(self, by_router, decode, problems):
        """Remove DECODE from every router that lists it; the routers it left, with what to register again."""
        left = []
        for router in self.routers:
            for worker in by_router.get(router.base_url, []):
                if worker['worker_type'] == 'decode' and normalise_url(worker['url']) == decode:
                    try:
                        resp = router.remove_worker(worker)
                    except HttpRequestError as exc:
                        problems.append('removing %s from %s: %s' % (decode, router.base_url, exc))
                        continue
                    if resp.status in (200, 202, 204):
                        left.append(dict(router=router.base_url, url=worker['url'], worker_type='decode',
                                         bootstrap_port=worker.get('bootstrap_port')))
                    else:
                        problems.append('removing %s from %s: HTTP %s %s'
                                        % (decode, router.base_url, resp.status, resp.excerpt()))
        return left

    def _add(self, entry, problems):
        """Register ENTRY's decode again on the routers it left; True once every one took it."""
        remaining = []
        for spec in entry.get('routers') or []:
            router = next((r for r in self.routers if r.base_url == spec['router']), None)
            if router is None:
                continue
            try:
                resp = router.add_worker(spec)
            except HttpRequestError as exc:
                problems.append('adding %s to %s: %s' % (entry['url'], spec['router'], exc))
                remaining.append(spec)
                continue
            if resp.status not in (200, 201, 202, 409):
                problems.append('adding %s to %s: HTTP %s %s' % (entry['url'], spec['router'], resp.status, resp.excerpt()))
                remaining.append(spec)
        entry['routers'] = remaining
        return not remaining


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--router', action='append', required=True, help='a router base URL on this host (repeat)')
    parser.add_argument('--state', required=True, help='the JSON state file status.yml reads')
    parser.add_argument('--metrics', help='the Prometheus text file for the node-exporter textfile collector')
    parser.add_argument('--lock', help='the fleet lock file: while it exists, probe only')
    parser.add_argument('--api-key-file', help='a file holding the router\'s API key')
    parser.add_argument('--interval', type=float, default=4.0, help='seconds between the starts of two rounds')
    parser.add_argument('--probe-timeout', type=float, default=3.0)
    parser.add_argument('--fail-after', type=int, default=2)
    parser.add_argument('--heal-after', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=0, help='stop after this many rounds (0: never)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    api_key = None
    if args.api_key_file:
        with open(args.api_key_file, encoding='utf-8') as handle:
            api_key = handle.read().strip()
    watcher = Watcher(args.router, args.state, args.metrics, args.lock, api_key, args.probe_timeout,
                      args.fail_after, args.heal_after)
    done = 0
    while not args.rounds or done < args.rounds:
        began = time.monotonic()
        state = watcher.round()
        done += 1
        for verb in ('removed', 'added', 'kept', 'paused'):
            if state[verb]:
                sys.stdout.write('%s: %s\n' % (verb, ', '.join(state[verb])))
        for problem in state['problems']:
            sys.stderr.write('problem: %s\n' % problem)
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(max(0.0, args.interval - (time.monotonic() - began)))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
