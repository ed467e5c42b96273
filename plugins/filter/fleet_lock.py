# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Whether a run holds the fleet lock on a strict majority of its lock hosts (playbooks/stages/lock.yml).

Each lock host's lock is taken atomically by one run at most, and two strict majorities of one list
of hosts share a host: two runs cannot both hold a majority. A lock host that cannot be reached
counts as not held, so that the lock survives the loss of any minority of the lock hosts.
"""

from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._fleet_lock import describe


def fleet_lock_quorum(results, hosts, run_id):
    """What the lock task's loop RESULTS (one per lock host of HOSTS, by ``item``) say for the run RUN_ID.

    Returns ``{hosts, needed, held, refused, unreachable, ok, msg}``: ``held`` the hosts whose lock this
    run holds, ``refused`` each other reachable host with why (who holds it, or the module's error),
    ``unreachable`` the hosts not reached, ``ok`` whether ``held`` is a strict majority of HOSTS, and
    ``msg`` a sentence for the operator when a lock host is missing (empty when every one is held).
    """
    by_host = {result.get('item'): result for result in results or []}
    hosts = list(hosts)
    held, refused, unreachable = [], {}, []
    for host in hosts:
        result = by_host.get(host, {})
        holder = result.get('holder') or {}
        if result.get('unreachable'):
            unreachable.append(host)
        elif holder.get('run_id') == run_id:
            held.append(host)
        else:
            refused[host] = 'locked by %s' % describe(holder) if holder else result.get('msg') or 'no answer'
    needed = len(hosts) // 2 + 1
    ok = bool(hosts) and len(held) >= needed
    missing = ['%s %s' % (host, refused[host]) for host in hosts if host in refused]
    missing += ['%s unreachable' % host for host in unreachable]
    counted = 'holds the fleet lock on %d of its %d lock hosts (%s), %d needed' % (
        len(held), len(hosts), ', '.join(hosts) or 'none: sglang_pd_lock_hosts is empty', needed)
    if ok:
        msg = 'This run %s: %s.' % (counted, '; '.join(missing)) if missing else ''
    else:
        msg = ('This run %s: %s. It released what it took. Wait until the other run ends '
               '(-e sglang_pd_lock_wait=SECONDS waits for it), bring the lock hosts back or name reachable ones '
               'in sglang_pd_lock_hosts, or, if the other run is gone, break its lock with '
               '-e sglang_pd_break_lock=true.' % (counted, '; '.join(missing) or 'no lock host answered'))
    return dict(hosts=hosts, needed=needed, held=held, refused=refused, unreachable=unreachable, ok=ok, msg=msg)


class FilterModule:
    """The fleet lock's count of lock hosts."""

    def filters(self):
        return {'fleet_lock_quorum': fleet_lock_quorum}
