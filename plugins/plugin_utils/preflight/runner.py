# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every preflight check in one pass on the controller (the ``preflight`` action, playbooks/preflight.yml).

Each check of ``plugin_utils/preflight`` is a function of plain data. ``run_checks`` reads each
host's variables once (``pd_inventory``: every ``hostvars`` lookup merges a host's whole
inventory again), resolves what each role gets with Ansible's templar (``inputs``), builds the
plan once (``pd_model``) and runs the checks in the order of ``CHECKS``, stopping at the first
that finds a problem.
"""
from __future__ import annotations

from collections import ChainMap

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.container import pd_check_container
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.pairing import pd_check_pairing
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.inputs import role_variables
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
)
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.model import PD_GROUPS, pd_inventory, pd_model
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
# What each check asserts: the first line of the preflight's message when it fails.
TITLES = {
    "evaluation": "every variable of the PD hosts can be evaluated",
    "groups": "every PD group has hosts",
    "variables": "no removed, unknown or mistyped variables (booleans are not strings)",
    "worker_specs": "the workers of each host are well formed",
    "image": "the image is pinned by a full digest and checksums are whole",
    "model_weights": "model staging has a manifest and a cluster network, and the manifest is whole",
    "build": "every variable could be evaluated and every command built",
    "names": "the services of each host have distinct names",
    "container": "Docker sizes have units and environment values are strings or numbers",
    "addresses": "service addresses are valid, reachable by other nodes and in the cluster CIDR",
    "reachability": "every worker listens where the routers and the other workers reach it",
    "ports": "no two services share a port on one address",
    "gpus": "each worker gets the GPUs its parallelism needs, and no GPU twice",
    "ib_devices": "InfiniBand device names are well formed",
    "flags": "every worker flag exists in the pinned SGLang release with a valid value",
    "sglang_values": "every worker's values pass the rules SGLang asserts at start",
    "pairing": "prefill and decode workers agree on what the KV transfer needs",
    "router": "the router's options are valid and it is told every worker and bootstrap port",
    "firewall": "the firewall knows the cluster and client networks",
}


def run_checks(templar, hostvars, groups, sources):
    """Run every check; return ``{"problems": {check: [...]}, "model": plan or None, "failed": check or None}``.

    TEMPLAR is Ansible's (the action's); SOURCES holds ``defaults`` (the worker and router roles'
    defaults, loaded as trusted templates), ``specs`` (every option the collection takes) and
    ``removed`` (removed variables and what to write instead). Checks run in the order of
    ``CHECKS`` and stop at the first with problems (later checks rely on what earlier ones
    refuse), so ``problems`` holds the checks that ran. The plan (``pd_model``) holds API keys:
    keep the result out of logs.
    """
    groups = {name: list(members or []) for name, members in (groups or {}).items()}
    pd_hosts = []
    for name in PD_GROUPS:
        pd_hosts.extend(host for host in groups.get(name, []) if host not in pd_hosts)
    inventory = pd_inventory(hostvars, pd_hosts)
    defaults = sources.get("defaults") or {}
    cache = {}

    def resolve(host, variables, role):
        # The snapshot holds every variable of the collection (all that the roles' defaults read),
        # each templated once; the templar takes plain mappings, not hostvars' lazy ones.
        scope = ChainMap(variables, {"inventory_hostname": host})
        return role_variables(templar, scope, defaults.get(role) or {}, role + "_", host, cache)

    run = {"inventory": inventory, "hosts": inventory["hosts"], "groups": groups, "pd_hosts": pd_hosts,
           "specs": dict(sources.get("specs") or {}), "removed": dict(sources.get("removed") or {}), "model": None}
    result = {"problems": {}, "model": None, "failed": None}
    for name, check in _inventory_checks(run):
        result["problems"][name] = list(check())
        if result["problems"][name]:
            result["failed"] = name
            return result
    run["model"] = result["model"] = pd_model(groups, run["hosts"], resolve)
    for name, check in _plan_checks(run):
        result["problems"][name] = list(check())
        if result["problems"][name]:
            result["failed"] = name
            return result
    return result
