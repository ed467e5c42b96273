# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight's model: each PD host's variables read once, and every worker's and router's plan, built as the roles build it."""
from __future__ import annotations

from ansible import constants as C

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import MODES, pd_workers, resolve_service_address
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import VARIABLE_PREFIXES
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import router_plan, worker_plan

PD_GROUPS = ("sglang_router", "sglang_prefill", "sglang_decode")
# The roles whose variables the preflight resolves per host (their defaults, templated by Ansible).
RESOLVED_ROLES = ("sglang_worker", "sglang_router")
# Connection variables the checks read besides the collection's own (service address, SSH port).
SNAPSHOT_NAMES = ("ansible_host", "ansible_port")


def pd_inventory(hostvars, hosts):
    """``{"hosts": {host: {name: value}}, "problems": [...]}``: the collection's variables and SNAPSHOT_NAMES, each templated once.

    A ``hostvars`` lookup merges a host's whole inventory again (about a millisecond): the checks read this snapshot.
    """
    snapshot, problems = {}, []
    for host in hosts:
        one, values = hostvars[host], {}
        for name in sorted(one):  # the names alone: no value is templated
            if name.startswith(VARIABLE_PREFIXES) or name.startswith("sglang_") or name in SNAPSHOT_NAMES:
                try:
                    values[name] = one.get(name)
                except Exception as exc:  # pylint: disable=broad-except
                    problems.append((host, f"{name} cannot be evaluated: {exc}; fix the template or the variables it uses"))
        snapshot[host] = values
    return {"hosts": snapshot, "problems": merge_problems(problems)}


def pd_model(groups, hostvars, role_variables):
    """Everything the roles would run: ``hosts``, ``workers`` and ``routers`` (each with its ``plan`` and ``launch``), ``errors``.

    ``role_variables(host, variables, role)`` returns ``(values, errors)``, what the role gets on the host
    (``inputs.role_variables``); ``errors`` are reported by the build check.
    """
    errors = []
    model = {"hosts": {}, "workers": [], "routers": [], "errors": errors, "managed": C.DEFAULT_MANAGED_STR,
             "groups": {name: list(groups.get(name) or []) for name in PD_GROUPS}}
    overrides = {}
    for host in dict.fromkeys(host for name in PD_GROUPS for host in model["groups"][name]):
        one = hostvars[host]
        try:
            address, source, problem = resolve_service_address(one, host)
        except Exception as exc:  # pylint: disable=broad-except
            address, source, problem = None, "sglang_pd_service_address", str(exc)
        info = {"address": address, "address_source": source, "address_problem": problem, "role_vars": {}}
        if problem:
            overrides[host] = {"sglang_pd_service_address": "unresolved.invalid"}
        for role in RESOLVED_ROLES:
            info["role_vars"][role], found = role_variables(host, one, role)
            errors.extend(found)
            # Where the service files are: the roles pass the sglang_service role's option on.
            info["role_vars"][role]["sglang_service_config_dir"] = one.get("sglang_service_config_dir")
        model["hosts"][host] = info
    # A host whose address cannot be resolved gets a placeholder: its workers are still built and checked.
    safe = dict(hostvars)
    safe.update({host: dict({k: v for k, v in hostvars[host].items() if k.startswith("sglang_pd_")}, **override) for host, override in overrides.items()})
    for mode in MODES:
        try:
            workers = pd_workers(model["groups"]["sglang_" + mode], safe, mode, ranks="all")
        except Exception as exc:  # pylint: disable=broad-except
            errors.append(("inventory", f"the {mode} workers cannot be built: {exc}; "
                                        f"check sglang_pd_{mode}_port, sglang_pd_bootstrap_port and sglang_pd_{mode}_workers"))
            continue
        for worker in workers:
            try:
                worker["plan"] = worker_plan(worker, model["hosts"][worker["host"]]["role_vars"]["sglang_worker"], managed=model["managed"])
                worker["launch"] = worker["plan"]["launch"]
            except Exception as exc:  # pylint: disable=broad-except
                errors.append((worker["host"], f"the {mode} worker {worker['name']} cannot be built: {exc}"))
                continue
            model["workers"].append(worker)
    prefills, decodes = ([w for w in model["workers"] if w["mode"] == mode and w["serves_http"]] for mode in ("prefill", "decode"))
    for host in model["groups"]["sglang_router"]:
        info, listen_all = model["hosts"][host], hostvars[host].get("sglang_pd_listen_all") is True
        role_vars = info["role_vars"]["sglang_router"]
        try:
            plan = router_plan(prefills, decodes, role_vars, info["address"] or host, listen_all=listen_all, managed=model["managed"])
        except Exception as exc:  # pylint: disable=broad-except
            errors.append((host, f"the router cannot be built: {exc}"))
            continue
        model["routers"].append({"host": host, "address": info["address"], "plan": plan, "launch": plan["launch"],
                                 "role_vars": role_vars, "listen_all": listen_all})
    return model
