# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The batches of a rolling restart, decided before anything moves.

``rolling_upgrade.yml`` (a new image) and ``site.yml`` (a changed command, environment or
image of running workers) restart worker hosts the same way (``playbooks/stages/roll_workers.yml``):
one canary host, then the other prefill hosts, then the decode hosts, in batches of
``sglang_pd_serial`` hosts; each batch leaves every router while it restarts. A batch that
holds every prefill host (or every decode host) would leave the routers nothing to send to:
the plan names it, so the run refuses before its first batch instead of stopping half-way
with prefill and decode on different images, unless the operator accepts the gap
(``sglang_pd_allow_serving_gap``).
"""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import WORKER_MODES as MODES


def batch_size(serial, hosts):
    """Hosts per batch for Ansible's ``serial`` (a number, or a percentage of HOSTS), at least 1."""
    text = str(serial).strip()
    found = re.fullmatch(r"([1-9][0-9]*)(%?)", text)
    if not found:
        raise AnsibleFilterError(f"sglang_pd_serial = {serial!r}: write a number of hosts or a percentage such as 50% [SGLPD-ROL-001]")
    number = int(found.group(1))
    return max(1, hosts * number // 100) if found.group(2) else number


def _chunks(hosts, size):
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]


def pd_upgrade_plan(groups, serial=1, canary="", hosts=None, playbook="mindverse.sglang_pd.rolling_upgrade"):
    """``{canary, batches, problems}`` of a rolling upgrade of the fleet in GROUPS.

    HOSTS are the hosts this run moves, in play order (all of ``sglang_pd`` when not given,
    fewer under ``--limit``). The canary is CANARY when given, else the first of them with a
    decode worker, else the first with any worker. ``problems`` names every batch that would
    take all hosts of a mode (in the whole fleet) out of the routers at once, and what to do;
    PLAYBOOK is the playbook named in those messages.
    """
    members = {mode: list(groups.get("sglang_" + mode) or []) for mode in MODES}
    if hosts is not None:
        order = list(hosts)  # none: nothing moves
    else:
        order = list(groups.get("sglang_pd") or []) or members["prefill"] + members["decode"]
    candidates = [h for h in dict.fromkeys(order) if any(h in members[m] for m in MODES)]
    every_worker_host = list(dict.fromkeys(members["prefill"] + members["decode"]))
    if canary and canary not in every_worker_host:
        raise AnsibleFilterError(f"sglang_pd_canary = {canary!r}: not a host of sglang_prefill or sglang_decode "
                                 f"(write one of {', '.join(every_worker_host)}) [SGLPD-ROL-001]")
    # A canary whose workers do not move in this run leaves the choice to the plan.
    canary = (canary if canary in candidates else "") or next((h for h in candidates if h in members["decode"]), candidates[0] if candidates else "")
    if not canary:
        return {"canary": "", "batches": [], "problems": []}
    prefill_phase = [h for h in candidates if h != canary and h in members["prefill"]]
    decode_phase = [h for h in candidates if h != canary and h not in members["prefill"]]
    batches = [[canary]]
    for phase in (prefill_phase, decode_phase):
        if phase:
            batches += _chunks(phase, batch_size(serial, len(phase)))
    problems = []
    for index, batch in enumerate(batches):
        for mode in MODES:
            if members[mode] and set(members[mode]) <= set(batch):
                what = "the canary" if index == 0 else f"batch {index} ({', '.join(batch)})"
                only = (f"the fleet's only {mode} host, {members[mode][0]}," if len(members[mode]) == 1
                        else f"all {len(members[mode])} {mode} hosts")
                problems.append(
                    f"{what} would take {only} out of the routers at once: every request would fail until it is "
                    f"back, so {playbook} refuses before anything moves. "
                    + ("Add a second " + mode + " host (mindverse.sglang_pd.scale_out) first, or accept the gap: "
                       f"{playbook} -e sglang_pd_allow_serving_gap=true"
                       if len(members[mode]) == 1 else
                       "Lower sglang_pd_serial, or choose another sglang_pd_canary"))
    return {"canary": canary, "batches": batches, "problems": problems}


class FilterModule:
    """Rolling upgrade planning filters."""

    def filters(self):
        return {"pd_upgrade_plan": pd_upgrade_plan}
