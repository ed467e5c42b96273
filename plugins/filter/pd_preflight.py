# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every preflight check in one pass on the controller (playbooks/preflight.yml).

Each check of ``plugin_utils/preflight`` is a function of plain data. Called one task
at a time, each would read the inventory again through ``hostvars`` (every lookup merges a
host's whole inventory) and walk the plan through lazily templated containers: seconds per
check at 1,000 hosts. ``pd_preflight`` reads each host's variables once (``pd_inventory``),
builds the plan once (``pd_model``) and runs the checks in the order the preflight reports
them, stopping at the first that finds a problem; the assert tasks then only read its result.
"""
from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.container import pd_check_container
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.pairing import pd_check_pairing
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.checks import (
    pd_check_addresses,
    pd_check_build,
    pd_check_firewall,
    pd_check_flags,
    pd_check_gpus,
    pd_check_groups,
    pd_check_ib_devices,
    pd_check_image,
    pd_check_model_weights,
    pd_check_names,
    pd_check_ports,
    pd_check_reachability,
    pd_check_router,
    pd_check_variables,
    pd_check_worker_specs,
    pd_inventory,
    pd_model,
)
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.router_rules import pd_check_router_options
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.sglang_rules import pd_check_sglang_values


def _inventory_checks(run):
    """Checks of the inventory alone, before the plan is built: (name, function of RUN)."""
    return [
        ("evaluation", lambda: run["inventory"]["problems"]),
        ("groups", lambda: pd_check_groups(run["groups"])),
        ("variables", lambda: pd_check_variables(run["hosts"], run["pd_hosts"], run["specs"], run["removed"])),
        ("worker_specs", lambda: pd_check_worker_specs(run["hosts"], run["groups"])),
        ("image", lambda: pd_check_image(run["hosts"], run["pd_hosts"])),
        ("model_weights", lambda: pd_check_model_weights(run["hosts"], run["pd_hosts"])),
    ]


def _plan_checks(run):
    """Checks of the plan, in the order the preflight's assert tasks report them."""
    model, hosts = run["model"], run["hosts"]
    return [
        ("build", lambda: pd_check_build(model)),
        ("names", lambda: pd_check_names(model)),
        ("container", lambda: pd_check_container(model)),
        ("addresses", lambda: pd_check_addresses(model, hosts)),
        ("reachability", lambda: pd_check_reachability(model)),
        ("ports", lambda: pd_check_ports(model)),
        ("gpus", lambda: pd_check_gpus(model, hosts)),
        ("ib_devices", lambda: pd_check_ib_devices(model)),
        ("flags", lambda: pd_check_flags(model, hosts)),
        ("sglang_values", lambda: pd_check_sglang_values(model, hosts)),
        ("pairing", lambda: pd_check_pairing(model)),
        ("router", lambda: pd_check_router(model) + pd_check_router_options(model)),
        ("firewall", lambda: pd_check_firewall(model, run["groups"], hosts)),
    ]


CHECKS = tuple(name for name, _check in _inventory_checks({}) + _plan_checks({"model": None, "hosts": None}))


def pd_preflight(hostvars, groups, pd_hosts, defaults, specs, removed):
    """Run every check; return ``{"problems": {check: [...]}, "model": plan or None, "failed": check or None}``.

    ``pd_hosts`` are the hosts of the PD groups; ``defaults`` the worker and router roles'
    defaults as data; ``specs`` every option the collection takes; ``removed`` the removed
    variables and what to write instead. Checks run in the order of ``CHECKS`` and stop at the
    first with problems (later checks assume what earlier ones assert), so ``problems`` holds
    the checks that ran. The plan (``pd_model``) holds API keys: keep the result out of logs.
    """
    groups = {name: list(members or []) for name, members in (groups or {}).items()}
    pd_hosts = list(pd_hosts or [])
    inventory = pd_inventory(hostvars, pd_hosts)
    run = {"inventory": inventory, "hosts": inventory["hosts"], "groups": groups, "pd_hosts": pd_hosts,
           "specs": dict(specs or {}), "removed": dict(removed or {}), "model": None}
    result = {"problems": {}, "model": None, "failed": None}
    for name, check in _inventory_checks(run):
        result["problems"][name] = list(check())
        if result["problems"][name]:
            result["failed"] = name
            return result
    run["model"] = result["model"] = pd_model(groups, run["hosts"], defaults)
    for name, check in _plan_checks(run):
        result["problems"][name] = list(check())
        if result["problems"][name]:
            result["failed"] = name
            return result
    return result


class FilterModule:
    """The preflight's one-pass filter."""

    def filters(self):
        return {"pd_preflight": pd_preflight}
