# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks of the router: its options against the flag table of each generation's pinned release, and its keys.

With ``sglang_router_generation: auto`` (the image decides) an option or value is refused only when no generation takes it.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from types import SimpleNamespace

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import first_admin_key
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import REDACTED, ROUTER_OPTION_VARS, cli_options
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.checks import check_argv
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems, suggest, variable_problem
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import (
    _sglang_router_flags_v0_3_2, _smg_router_flags_v1_13_0)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import endpoint_problem

DEDICATED = dict(ROUTER_OPTION_VARS)
# Given their own variables (checked by pd_check_router), never through the options map.
SECRET_OPTIONS = ("api_key", "control_plane_api_keys")
# Flags the router is always started with, from the inventory's groups.
FROM_INVENTORY = {"pd_disaggregation": "--pd-disaggregation", "prefill": "its prefill workers (--prefill)",
                  "decode": "its decode workers (--decode)", "worker_urls": "its workers"}
# The paths the collection and the router request on the servers, each a path on them.
ENDPOINT_VARIABLES = {"sglang_router_health_check_endpoint": "/health_generate", "sglang_router_ready_path": "/readiness"}
# sglang_router_generation: the flag table of each generation's pinned release.
GENERATIONS = {"sglang-router": _sglang_router_flags_v0_3_2, "smg": _smg_router_flags_v1_13_0}
AUTO = "auto"


def router_name(generation):
    """A generation as messages name it: the package and its pinned release (``smg 1.13.0``)."""
    return f"{generation} {GENERATIONS[generation].VERSION}"


def _shared_entry(entries):
    """One flag's (dest, kind, choices, replacement) across generations: any generation's choice is taken (None: any value)."""
    dest, kind, _choices, replacement = entries[0]
    if any(entry[2] is None for entry in entries):
        return dest, kind, None, replacement
    return dest, kind, tuple(dict.fromkeys(choice for entry in entries for choice in entry[2])), replacement


def _router_flags(generations):
    """The flags, choices and value types of the generations a router host may run (a flag any of them takes), and their names."""
    tables, names = [GENERATIONS[generation] for generation in generations], [router_name(generation) for generation in generations]
    flags = {flag: _shared_entry([table.FLAGS[flag] for table in tables if flag in table.FLAGS])
             for flag in dict.fromkeys(flag for table in tables for flag in table.FLAGS)}
    return SimpleNamespace(flags=flags, types={dest: kind for table in tables for dest, kind in table.TYPES.items()}, names=names,
                           label=" or ".join(names))  # as messages name them: sglang-router 0.3.2 or smg 1.13.0


ROUTER_FLAGS = {generation: _router_flags([generation]) for generation in GENERATIONS}
ROUTER_FLAGS[AUTO] = _router_flags(list(GENERATIONS))


def router_flags(role_vars):
    """The flags of a router host's sglang_router_generation (``auto`` for a value that is no generation)."""
    return ROUTER_FLAGS.get(role_vars.get("sglang_router_generation") or AUTO, ROUTER_FLAGS[AUTO])


def option_problem(option, value, flags):
    """(problem, fix) of one router option written as OPTION: VALUE, its command line checked as check_argv checks one, or None."""
    flag = "--" + str(option).replace("_", "-")
    if flag not in flags.flags:
        lacks = f"{flags.names[0]} has no flag {flag}" + "".join(f", nor does {name}" for name in flags.names[1:])
        return lacks, f"remove it{suggest(option, [known[2:].replace('-', '_') for known in flags.flags])}"
    found = check_argv(cli_options({option: value}), [], flags.flags, 0, flags.types, None)
    return (f"{found[0][3]} ({flags.label})", found[0][4]) if found else None


def _refusal(host, variable, option, value, flags):
    """The problem of one router option against FLAGS, naming the generation that takes it when another does."""
    found = option_problem(option, value, flags)
    if not found:
        return []
    other = next((g for g in GENERATIONS if ROUTER_FLAGS[g] is not flags and option_problem(option, value, ROUTER_FLAGS[g]) is None), None)
    takes = f" ({router_name(other)} takes it: set sglang_router_generation: {other} if the image runs it)" if other else ""
    return [variable_problem(host, variable, value, found[0], found[1] + takes)]


def _router_problems(host, role_vars):
    """The endpoints, the options from their own variables, the options map and the extra args of one router."""
    flags = router_flags(role_vars)
    problems = [variable_problem(host, variable, role_vars[variable], endpoint_problem(role_vars[variable]), f"write the path alone, such as {example}")
                for variable, example in ENDPOINT_VARIABLES.items()
                if isinstance(role_vars.get(variable), str) and role_vars[variable] and endpoint_problem(role_vars[variable])]
    options = role_vars.get("sglang_router_options") or {}
    problems += [variable_problem(host, f"sglang_router_options.{option}", value, f"the collection sets --{option.replace('_', '-')} "
                                  f"from {DEDICATED[option]}, and checks it there", f"write {DEDICATED[option]}: {value} instead")
                 for option, value in options.items() if option in DEDICATED]
    given = [(name, option, role_vars.get(name)) for option, name in ROUTER_OPTION_VARS]
    given += [(f"sglang_router_options.{option}", option, value) for option, value in options.items()
              if option not in DEDICATED and option not in SECRET_OPTIONS]
    for variable, option, value in given:
        problems += _refusal(host, variable, option, value, flags)
    extra = [str(a) for a in role_vars.get("sglang_router_extra_args") or []]
    for token in extra:
        option = token.split("=", maxsplit=1)[0][2:].replace("-", "_") if token.startswith("--") else ""
        if option in DEDICATED:
            problems.append(variable_problem(host, "sglang_router_extra_args", token, f"the collection sets {token.split('=')[0]} from "
                                             f"{DEDICATED[option]}, and checks it there", f"remove it and write {DEDICATED[option]}"))
        elif option in FROM_INVENTORY:
            problems.append(variable_problem(host, "sglang_router_extra_args", token, f"the collection gives the router {FROM_INVENTORY[option]}",
                                             "remove it: the workers come from the sglang_prefill and sglang_decode groups"))
    for _origin, flag, value, problem, fix in check_argv(extra, ["sglang_router_extra_args"] * len(extra), flags.flags, 0, flags.types, None):
        if flag not in ("--api-key", "--control-plane-api-keys"):
            problems.append((host, f"sglang_router_extra_args: {flag}" + (f" {value}" if value not in (None, "") else "")
                             + f": {problem} ({flags.label}); {fix}"))
    return problems


def pd_check_router_options(model):
    """Every router option, from its own variable, the options map or extra args, is one the router takes."""
    return merge_problems([problem for router in model["routers"] for problem in _router_problems(router["host"], router["role_vars"])])


def pd_check_router(model):
    """The router's metrics address is an IP, its API keys are given safely, and every worker wants its key."""
    problems = []
    for router in model["routers"]:
        host, role_vars = router["host"], router["role_vars"]
        problems += _metrics_host_problems(host, role_vars, router["launch"]["options"].get("prometheus_host"))
        if not str(role_vars.get("sglang_router_api_key") or "").strip() and role_vars.get("sglang_router_allow_unauthenticated") is not True:
            problems.append(variable_problem(host, "sglang_router_api_key", "", "empty: anyone who reaches the router could send requests and "
                                             "add or remove its workers (POST and DELETE /workers)",
                                             "set sglang_router_api_key (from a vault or a lookup, never in plain text), or "
                                             "sglang_router_allow_unauthenticated: true to run without a key knowingly"))
        problems += [variable_problem(host, "sglang_router_options", {key: REDACTED}, "an API key given as an option ends up in the launch "
                                      "script and in logs", f"write sglang_router_{key} instead (kept in a mode 0600 env file, never logged)")
                     for key in SECRET_OPTIONS if key in (role_vars.get("sglang_router_options") or {})]
        problems += [variable_problem(host, "sglang_router_extra_args", REDACTED, "an API key on the command line ends up in the launch script "
                                      "and in logs", "write sglang_router_api_key / sglang_router_control_plane_api_keys instead")
                     for token in role_vars.get("sglang_router_extra_args") or []
                     if str(token).split("=", maxsplit=1)[0] in ("--api-key", "--control-plane-api-keys")]
        problems += _control_plane_key_problems(host, role_vars.get("sglang_router_control_plane_api_keys") or [])
        problems += _worker_key_problems(model, host, role_vars.get("sglang_router_api_key"))
    return merge_problems(problems)


def _metrics_host_problems(host, role_vars, prometheus):
    if prometheus in (None, ""):
        return []
    try:
        ipaddress.ip_address(str(prometheus))
        return []
    except ValueError:
        pass
    if role_vars.get("sglang_router_prometheus_host"):
        return [variable_problem(host, "sglang_router_prometheus_host", prometheus, "not an IP address", "write the IP address the metrics listen on")]
    return [variable_problem(host, "sglang_router_prometheus_host", None, f"the metrics would listen on the service address {prometheus}, "
                             "which is not an IP address", "write sglang_router_prometheus_host (an IP address of this host; 0.0.0.0 exposes "
                             "them on every interface), or set sglang_pd_service_address to an IP")]


def _control_plane_key_problems(host, keys):
    problems, keys = [], keys if isinstance(keys, list) else [keys]
    for index, key in enumerate(keys):
        variable = f"sglang_router_control_plane_api_keys[{index}]"
        shown = {k: (REDACTED if k == "key" else v) for k, v in key.items()} if isinstance(key, Mapping) else REDACTED
        if not isinstance(key, Mapping) or not all(str(key.get(k, "")).strip() for k in ("id", "name", "role", "key")):
            problems.append(variable_problem(host, variable, shown, "each key needs id, name, role and key",
                                             "write {id: ops, name: Operations, role: admin, key: \"{{ vault_router_admin_key }}\"}"))
        elif key["role"] not in ("admin", "user"):
            problems.append(variable_problem(host, f"{variable}.role", key["role"], "not a control-plane role", "write admin or user"))
        elif any(":" in str(key[k]) for k in ("id", "name", "role", "key")):
            problems.append(variable_problem(host, variable, shown, "the router splits id:name:role:key on colons", "remove the colons"))
    if keys and first_admin_key(keys) is None:
        problems.append(variable_problem(host, "sglang_router_control_plane_api_keys", REDACTED, "with control-plane keys the router takes "
                                         "worker changes only from an admin key, and the collection registers and removes workers with the "
                                         "first one", "add a key with role admin"))
    return problems


def _worker_key_problems(model, router_host, router_key):
    """Each worker must want the router's key: the router forwards its clients' key to the workers."""
    if not router_key:
        return []
    keys = {worker["host"]: model["hosts"][worker["host"]]["role_vars"]["sglang_worker"].get("sglang_worker_api_key")
            for worker in model["workers"]}
    return [variable_problem(worker["host"], "sglang_worker_api_key", keys[worker["host"]], f"not the key of the router on {router_host}: the "
                             "router forwards its clients' key to the workers, so a worker with another key refuses every request, and one "
                             "without a key serves anyone who reaches it", "leave sglang_worker_api_key unset (it follows sglang_router_api_key) "
                             "and set sglang_router_api_key for every PD host (group_vars/all)")
            for worker in model["workers"] if worker["serves_http"] and (keys[worker["host"]] or "") != router_key]
