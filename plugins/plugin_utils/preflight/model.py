# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight's model: what each PD host's roles get, and every worker's and router's launch.

``pd_inventory`` reads each PD host's variables once; ``pd_model`` evaluates, for every host,
the variables the roles would see (the inventory's values over the roles' defaults) and builds
every worker's and router's command line with the same filters the roles use
(plugins/filter/pd.py). The checks read the model; the render writes from it.
"""
from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import VARIABLE_PREFIXES
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems
from ansible import constants as C

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import MODES, pd_workers, resolve_service_address
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import router_plan, worker_plan

PD_GROUPS = ("sglang_router", "sglang_prefill", "sglang_decode")
# The roles whose variables the preflight resolves per host (their defaults, templated by Ansible).
RESOLVED_ROLES = ("sglang_worker", "sglang_router")
# A variable with one of these prefixes belongs to the collection: one that no role or
# playbook takes is refused (a misspelt digest would otherwise deploy the old image).
COLLECTION_PREFIXES = VARIABLE_PREFIXES
# Connection variables the checks read besides the collection's own (service address, SSH port).
SNAPSHOT_NAMES = ("ansible_host", "ansible_port")


def _names(hostvars_one):
    """The variable names a host has, without templating any value."""
    try:
        return set(iter(hostvars_one))
    except TypeError:
        return set(hostvars_one.keys())


def _get(hostvars_one, name, errors, host, default=None):
    """One variable of a host; a templating error is recorded, not raised."""
    try:
        return hostvars_one.get(name, default)
    except Exception as exc:  # pylint: disable=broad-except
        errors.append((host, f"{name} cannot be evaluated: {exc}; fix the template or the variables it uses"))
        return default


class _Overlay(Mapping):
    """hostvars with some variables replaced (hosts whose address cannot be resolved)."""

    def __init__(self, hostvars, overrides):
        self._hostvars = hostvars
        self._overrides = overrides

    def __getitem__(self, host):
        one = self._hostvars[host]
        if host in self._overrides:
            merged = {k: one.get(k) for k in _names(one) if k.startswith("sglang_pd_")}
            merged.update(self._overrides[host])
            return merged
        return one

    def __iter__(self):
        return iter(self._hostvars)

    def __len__(self):
        return len(self._hostvars)


# --------------------------------------------------------------------------- inventory

def pd_inventory(hostvars, hosts):
    """What the checks read of each PD host, each variable templated once (called by pd_preflight).

    Returns ``{"hosts": {host: {name: value}}, "problems": [...]}``: every variable of the
    collection (COLLECTION_PREFIXES, and any other ``sglang_*``) and ``ansible_host`` /
    ``ansible_port``, and a problem for each variable whose template cannot be evaluated.
    Looking a host up in ``hostvars`` merges all of its inventory again (about a millisecond),
    so the checks read this snapshot instead: at 1,000 hosts that is one merge per host for the
    whole preflight instead of one per host per check.
    """
    snapshot, problems = {}, []
    for host in hosts:
        one = hostvars[host]
        values = {}
        for name in sorted(_names(one)):
            if not (name.startswith(COLLECTION_PREFIXES) or name.startswith("sglang_") or name in SNAPSHOT_NAMES):
                continue
            errors = []
            value = _get(one, name, errors, host)
            if errors:
                problems.extend(errors)
                continue
            values[name] = value
        snapshot[host] = values
    return {"hosts": snapshot, "problems": merge_problems(problems)}


# --------------------------------------------------------------------------- model

def pd_model(groups, hostvars, role_variables):
    """Everything the roles would run, computed on the controller from inventory.

    ``role_variables(host, variables, role)`` returns ``(values, errors)``: the variables role
    ``sglang_worker`` or ``sglang_router`` gets on the host, its defaults templated by Ansible
    (``inputs.role_variables``). Returns a dict with ``hosts``, ``workers`` (all node ranks,
    each with its ``plan``, the one its role runs, and that plan's ``launch``), ``routers`` (the
    same), ``errors`` (problems found while building: they are reported by pd_check_build) and
    ``managed`` (the launch scripts' header).
    """
    errors = []
    model = {"hosts": {}, "workers": [], "routers": [], "errors": errors, "groups": {}, "managed": C.DEFAULT_MANAGED_STR}
    for name in PD_GROUPS:
        model["groups"][name] = list(groups.get(name) or [])
    pd_hosts = []
    for name in PD_GROUPS:
        for host in model["groups"][name]:
            if host not in pd_hosts:
                pd_hosts.append(host)
    overrides = {}
    for host in pd_hosts:
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
            info["role_vars"][role]["sglang_service_config_dir"] = _get(one, "sglang_service_config_dir", errors, host)
        model["hosts"][host] = info
    safe = _Overlay(hostvars, overrides)
    for mode in MODES:
        try:
            workers = pd_workers(model["groups"]["sglang_" + mode], safe, mode, ranks="all")
        except Exception as exc:  # pylint: disable=broad-except
            errors.append(("inventory", f"the {mode} workers cannot be built: {exc}; "
                                        f"check sglang_pd_{mode}_port, sglang_pd_bootstrap_port and sglang_pd_{mode}_workers"))
            continue
        for worker in workers:
            role_vars = model["hosts"][worker["host"]]["role_vars"]["sglang_worker"]
            try:
                worker["plan"] = worker_plan(worker, role_vars, managed=model["managed"])
                worker["launch"] = worker["plan"]["launch"]
            except Exception as exc:  # pylint: disable=broad-except
                errors.append((worker["host"], f"the {mode} worker {worker['name']} cannot be built: {exc}"))
                continue
            model["workers"].append(worker)
    prefills = [w for w in model["workers"] if w["mode"] == "prefill" and w["serves_http"]]
    decodes = [w for w in model["workers"] if w["mode"] == "decode" and w["serves_http"]]
    for host in model["groups"]["sglang_router"]:
        info = model["hosts"][host]
        role_vars = info["role_vars"]["sglang_router"]
        try:
            plan = router_plan(prefills, decodes, role_vars, info["address"] or host,
                               listen_all=hostvars[host].get("sglang_pd_listen_all") is True, managed=model["managed"])
        except Exception as exc:  # pylint: disable=broad-except
            errors.append((host, f"the router cannot be built: {exc}"))
            continue
        model["routers"].append({"host": host, "address": info["address"], "plan": plan, "launch": plan["launch"],
                                 "role_vars": role_vars, "listen_all": hostvars[host].get("sglang_pd_listen_all") is True})
    return model
