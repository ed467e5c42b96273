# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every preflight check in one pass, in the order of ``RULES``, stopping at the first that finds a problem."""
from __future__ import annotations

from collections import ChainMap

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import checks
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.container import pd_check_container
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.inputs import role_variables
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.model import PD_GROUPS, pd_inventory, pd_model
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.pairing import pd_check_pairing
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.router_rules import pd_check_router, pd_check_router_options
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.sglang_rules import pd_check_sglang_values

# (check, what it asserts: the first line of the preflight's message when it fails, the check
# as a function of the run). The checks of the inventory alone come first; "build" and those
# after it read the plan.
RULES = (
    ("evaluation", "every variable of the PD hosts can be evaluated", lambda run: run["inventory"]["problems"]),
    ("groups", "every PD group has hosts", lambda run: checks.pd_check_groups(run["groups"])),
    ("variables", "no removed, unknown or mistyped variables (booleans are not strings)",
     lambda run: checks.pd_check_variables(run["hosts"], run["pd_hosts"], run["specs"], run["removed"], run["published"])),
    ("worker_specs", "the workers of each host are well formed", lambda run: checks.pd_check_worker_specs(run["hosts"], run["groups"])),
    ("image", "the image is pinned by a full digest and checksums are whole", lambda run: checks.pd_check_image(run["hosts"], run["pd_hosts"])),
    ("model_weights", "model staging has a manifest and a cluster network, and the manifest is whole",
     lambda run: checks.pd_check_model_weights(run["hosts"], run["pd_hosts"])),
    ("build", "every variable could be evaluated and every command built", lambda run: merge_problems(run["model"]["errors"])),
    ("names", "the services of each host have distinct names", lambda run: checks.pd_check_names(run["model"])),
    ("container", "Docker sizes have units and environment values are strings or numbers", lambda run: pd_check_container(run["model"])),
    ("addresses", "service addresses are valid, reachable by other nodes and in the cluster CIDR",
     lambda run: checks.pd_check_addresses(run["model"], run["hosts"])),
    ("reachability", "every worker listens where the routers and the other workers reach it",
     lambda run: checks.pd_check_reachability(run["model"])),
    ("ports", "no two services share a port on one address", lambda run: checks.pd_check_ports(run["model"])),
    ("gpus", "each worker gets the GPUs its parallelism needs, and no GPU twice", lambda run: checks.pd_check_gpus(run["model"], run["hosts"])),
    ("ib_devices", "InfiniBand device names are well formed", lambda run: checks.pd_check_ib_devices(run["model"])),
    ("flags", "every worker flag exists in the pinned SGLang release with a valid value",
     lambda run: checks.pd_check_flags(run["model"], run["hosts"])),
    ("sglang_values", "every worker's values pass the rules SGLang asserts at start",
     lambda run: pd_check_sglang_values(run["model"], run["hosts"])),
    ("pairing", "prefill and decode workers agree on what the KV transfer needs", lambda run: pd_check_pairing(run["model"])),
    ("router", "the router's options are valid and it is told every worker and bootstrap port",
     lambda run: pd_check_router(run["model"]) + pd_check_router_options(run["model"])),
    ("firewall", "the firewall knows the cluster and client networks",
     lambda run: checks.pd_check_firewall(run["model"], run["groups"], run["hosts"])),
)
CHECKS = tuple(name for name, _title, _check in RULES)
TITLES = {name: title for name, title, _check in RULES}


def run_checks(templar, hostvars, groups, sources):
    """``{"problems": {check: [...]}, "model": plan or None, "failed": check or None}``; the plan holds API keys.

    SOURCES holds the roles' ``defaults`` (trusted templates), ``specs`` (every option taken) and ``removed``.
    Later checks rely on what earlier ones refuse, so ``problems`` holds the checks that ran.
    """
    groups = {name: list(members or []) for name, members in (groups or {}).items()}
    pd_hosts = list(dict.fromkeys(host for name in PD_GROUPS for host in groups.get(name, [])))
    inventory = pd_inventory(hostvars, pd_hosts)
    defaults = sources.get("defaults") or {}
    cache = {}

    def resolve(host, variables, role):
        # The snapshot (plain mappings, each variable templated once) holds all the defaults read.
        scope = ChainMap(variables, {"inventory_hostname": host})
        return role_variables(templar, scope, defaults.get(role) or {}, role + "_", host, cache)

    run = {"inventory": inventory, "hosts": inventory["hosts"], "groups": groups, "pd_hosts": pd_hosts,
           "specs": dict(sources.get("specs") or {}), "removed": dict(sources.get("removed") or {}),
           "published": frozenset(sources.get("published") or ()), "model": None}
    result = {"problems": {}, "model": None, "failed": None}
    for name, _title, check in RULES:
        if name == "build":
            run["model"] = result["model"] = pd_model(groups, run["hosts"], resolve)
        result["problems"][name] = list(check(run))
        if result["problems"][name]:
            result["failed"] = name
            break
    return result
