# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks of a PD inventory's snapshot (``{host: {variable: value}}``) and of its plan (``model.pd_model``).

Each ``pd_check_*`` returns its problems, one line each naming the hosts, the variable, its value and the fix.
"""
from __future__ import annotations

import difflib
import importlib
import ipaddress
import json
import os
import re
import socket
from collections import Counter
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.firewall import pd_firewall
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._artifact_checks import (
    DIGEST_LENGTHS, MIN_PREFIX, ArtifactError, normalize_digest)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import VARIABLE_PREFIXES, repository_problem
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._model_weights import parse_manifest
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.inputs import type_problem
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import (
    merge_problems, show_value, suggest, variable_problem)
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import (
    MODES, WORKER_SPEC_KEYS, address_candidates, parse_gpus, worker_gpu_keys, worker_ib_device)
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import FIXED_WORKER_OPTIONS, REDACTED, SECRET_NAME
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.model import PD_GROUPS

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
PINNED_IMAGE_RE = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
MD5_RE = re.compile(r"^[0-9a-f]{32}$")
IB_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
TRUE_WORDS = ("true", "yes", "on", "1", "y")
STRING_BOOLEANS = set(TRUE_WORDS) | {"false", "no", "off", "0", "n"}
ALLOWLIST_MODULE = "ansible_collections.mindverse.sglang_pd.plugins.module_utils._sglang_flags_v{}"
DEFAULT_SGLANG_VERSION = "0.5.14"
PORT_FIX = "write a port number between 1024 and 65535"


# --------------------------------------------------------------------------- groups and variables
def pd_check_groups(groups):
    """Each PD group has hosts, all of them in sglang_pd, and no group is a misspelt PD group."""
    problems = []
    members = set(groups.get("sglang_pd") or [])
    for name in PD_GROUPS:
        if not (groups.get(name) or []):
            problems.append(f"inventory: group {name} is empty; add at least one host to {name} "
                            f"(sglang_router, sglang_prefill and sglang_decode are children of sglang_pd)")
        outside = [host for host in groups.get(name) or [] if host not in members]
        if outside:
            problems.append(f"{', '.join(outside)}: in group {name} but not in sglang_pd, so the container engine, the "
                            f"firewall and the image would skip them while the router is told their workers; "
                            f"make {name} a child of sglang_pd (all: children: sglang_pd: children: {name})")
    known = set(PD_GROUPS) | {"sglang_pd", "sglang_router_lb", "all", "ungrouped"}
    for name in sorted(groups):
        close = difflib.get_close_matches(name, sorted(PD_GROUPS + ("sglang_pd",)), n=1, cutoff=0.85)
        if name not in known and close and groups.get(name):
            problems.append(f"{', '.join(groups[name])}: in group {name}, which no play of this collection runs on; "
                            f"did you mean {close[0]}? (the hosts would silently serve nothing)")
    return problems


def _fix_for_type(name, spec, value):
    kind = spec.get("type", "raw")
    if kind == "bool" and spec.get("switch"):
        return f"write -e {name}=true or -e {name}=false"
    if kind == "bool":
        literal = "true" if str(value).strip().lower() in TRUE_WORDS else "false"
        return (f"write {name}: {literal} (a YAML boolean, unquoted); on the command line use JSON: "
                f"-e '{{\"{name}\": {literal}}}'")
    if spec.get("choices"):
        return f"write one of {', '.join(str(c) for c in spec['choices'])}{suggest(value, spec['choices'])}"
    return f"write a value of type {kind}"


def pd_check_variables(hostvars, hosts, specs, removed, published=frozenset()):
    """Removed or renamed variables (REMOVED: old name -> what to write), unknown ones, values that do not fit their SPECS.

    PUBLISHED names the facts the collection's own plays set: a later play's preflight in the same run sees them.
    """
    problems = []
    required = sorted(n for n, spec in specs.items() if n.startswith("sglang_pd_") and (spec or {}).get("required"))
    for host in hosts:
        one = hostvars[host]
        problems += [variable_problem(host, name, None, "required, and not set",
                                      f"set {name} for every PD host (group_vars/all); see docs/variables.md")
                     for name in required if one.get(name) in (None, "")]
        for name in sorted(one):
            value, spec = one[name], specs.get(name)
            if name in removed:
                problems.append(variable_problem(host, name, value, "this variable was removed or renamed", f"write {removed[name]} instead"))
            elif name.startswith(VARIABLE_PREFIXES) and name not in specs and name not in published:
                hint = _role_variable_hint(name, specs)
                # A misspelling of a secret's name is a secret too ("did you mean ..._password?").
                if SECRET_NAME.search(hint) or (specs.get(hint.partition("did you mean ")[2].partition("?")[0]) or {}).get("no_log"):
                    value = REDACTED
                problems.append(variable_problem(host, name, value, "no role or playbook of this collection reads this variable",
                                                 f"{hint}see docs/variables.md for the variables each role takes"))
            elif spec is not None:
                found, variable = type_problem(spec, value), name
                if found and found[1] is not None:  # a wrong element of a list
                    variable, value, spec = f"{name}[{found[1]}]", value[found[1]], {"type": spec["elements"]}
                if found:
                    problems.append(variable_problem(host, variable, value, found[0], _fix_for_type(variable, spec, value)))
    return merge_problems(problems)


def _role_variable_hint(name, known):
    """What an unknown sglang_worker_* / sglang_router_* variable probably meant."""
    if name.startswith("sglang_worker_"):
        flag = "--" + name[len("sglang_worker_"):].replace("_", "-")
        entry = flag_table({})[1].FLAGS.get(flag)
        if entry:
            dest = entry[0]
            for suffix in (dest, {"disaggregation_transfer_backend": "transfer_backend", "disaggregation_ib_device": "ib_device"}.get(dest, dest)):
                if "sglang_worker_" + suffix in known:
                    return f"did you mean sglang_worker_{suffix}? "
            return f"to pass {flag}, write sglang_worker_options: {{{dest}: ...}}; "
    return _did_you_mean(name, known, 0.7)


def _port_problem(value):
    try:
        port = None if isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        port = None
    if port is None:
        return "not a port number"
    return None if 0 < port <= 65535 else "outside 1-65535"


def pd_check_worker_specs(hostvars, groups):
    """Entries of sglang_pd_<mode>_workers are well formed (the ports check refuses a port out of range on the plan)."""
    problems = []
    for mode in MODES:
        name = f"sglang_pd_{mode}_workers"
        for host in groups.get("sglang_" + mode) or []:
            one = hostvars[host]
            specs = one.get(name)
            if not specs or not isinstance(specs, list):
                continue  # a list of dicts by its argument spec: pd_check_variables refuses anything else
            if one.get("sglang_pd_worker_group") and len(specs) > 1:
                problems.append(variable_problem(host, "sglang_pd_worker_group", one["sglang_pd_worker_group"],
                                                 f"a host of a multi-node worker runs only that worker, but {name} lists {len(specs)}",
                                                 f"remove sglang_pd_worker_group, or give the host a single entry in {name}"))
            for index, spec in enumerate(specs):
                problems += _worker_spec_problems(host, mode, f"{name}[{index}]", spec)
    return merge_problems(problems)


def _worker_spec_problems(host, mode, variable, spec):
    """The problems of one entry of sglang_pd_<mode>_workers (VARIABLE names it)."""
    if not isinstance(spec, Mapping):
        return []  # pd_check_variables refuses it
    problems = [variable_problem(host, f"{variable}.{key}", spec[key], "not a worker key",
                                 _did_you_mean(key, WORKER_SPEC_KEYS) + "the keys are " + ", ".join(WORKER_SPEC_KEYS))
                for key in spec if key not in WORKER_SPEC_KEYS]
    problems += [variable_problem(host, f"{variable}.{key}", spec[key], _port_problem(spec[key]), PORT_FIX)
                 for key in ("port", "bootstrap_port") if key in spec and _port_problem(spec[key])]
    if mode == "decode" and "bootstrap_port" in spec:
        problems.append(variable_problem(host, f"{variable}.bootstrap_port", spec["bootstrap_port"], "the bootstrap server runs on prefill "
                                         "servers only", "remove it (decode workers learn the port from the router)"))
    for key, fix in (("args", "write snake_case options as a dict, e.g. {tp_size: 4}"),
                     ("env", "write environment variables as a dict, e.g. {NCCL_DEBUG: INFO}")):
        if key in spec and not isinstance(spec[key], Mapping):
            problems.append(variable_problem(host, f"{variable}.{key}", spec[key], "not a dict", fix))
    if "name" in spec and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(spec["name"])):
        problems.append(variable_problem(host, f"{variable}.name", spec["name"], "not a valid service/container name",
                                         "use letters, digits, '.', '_' and '-'"))
    return problems


def _did_you_mean(name, candidates, cutoff=0.6):
    close = difflib.get_close_matches(str(name), sorted(candidates), n=1, cutoff=cutoff)
    return f"did you mean {close[0]}? " if close else ""


def pd_check_names(model):
    """Service (container) names are unique on each host."""
    problems, seen = [], {}
    for worker in model["workers"]:
        key = (worker["host"], worker["name"])
        if key in seen:
            problems.append(variable_problem(worker["host"], f"name of {worker['mode']} worker {worker['index']}", worker["name"],
                                             f"the {seen[key]} on this host already has this name",
                                             f"give it its own name in sglang_pd_{worker['mode']}_workers"))
        seen[key] = f"{worker['mode']} worker {worker['index']}"
    for router in model["routers"]:
        name = router["role_vars"].get("sglang_router_name")
        if (router["host"], name) in seen:
            problems.append(variable_problem(router["host"], "sglang_router_name", name, f"the {seen[(router['host'], name)]} on this host "
                                             "already has this name", "write another sglang_router_name"))
    return merge_problems(problems)


# --------------------------------------------------------------------------- image and model weights
def pd_check_image(hostvars, hosts):
    """The image is pinned by a full sha256 digest; md5 and sha256 values follow the manifest rule."""
    problems = []
    for host in hosts:
        one = hostvars[host]
        digest, repository = one.get("sglang_pd_image_digest"), one.get("sglang_pd_image_repository")
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            problems.append(variable_problem(host, "sglang_pd_image_digest", digest, "the image must be pinned by its full digest",
                                             "write sha256: followed by all 64 hex characters (docker buildx imagetools inspect IMAGE, "
                                             "or the RepoDigests of docker image inspect)"))
        grammar = repository_problem(repository) if isinstance(repository, str) and repository else "it is empty"
        if grammar:
            problems.append(variable_problem(host, "sglang_pd_image_repository", repository, f"not an image repository Docker takes: {grammar}",
                                             "write the registry and repository only, e.g. myacr.azurecr.io/mindverse/sglang, and the digest "
                                             "in sglang_pd_image_digest"))
        for name in ("sglang_worker_image", "sglang_router_image"):
            if name in one and (not isinstance(one[name], str) or not PINNED_IMAGE_RE.match(one[name])):
                problems.append(variable_problem(host, name, one[name], "not pinned by a full sha256 digest",
                                                 "write REPOSITORY@sha256:<64 hex characters>, or leave it unset so it "
                                                 "follows sglang_pd_image_repository and sglang_pd_image_digest"))
        # A build pin (the file is at hand where it is set): whole, as prebuilt_artifact takes it.
        problems += [variable_problem(host, name, one[name], "not a whole md5", "write all 32 lowercase hex characters (md5sum FILE), not a prefix")
                     for name in sorted(one) if name.endswith("_md5") and one[name] and (not isinstance(one[name], str) or not MD5_RE.match(one[name]))]
        for name in ("sglang_pd_image_artifacts", "sglang_image_artifacts"):
            artifacts = one.get(name) if isinstance(one.get(name), list) else []  # a list by its argument spec
            problems += [variable_problem(host, f"{name}[{index}].{key}", item[key], _digest_problem(item[key], key),
                                          f"write all {DIGEST_LENGTHS[key]} lowercase hex characters ({key}sum {item.get('path', 'FILE')}); "
                                          f"a prefix of at least {MIN_PREFIX} is accepted and reported as match: prefix")
                         for index, item in enumerate(artifacts) if isinstance(item, Mapping)
                         for key in ("md5", "sha256") if key in item and _digest_problem(item[key], key)]
    return merge_problems(problems)


def _digest_problem(value, algorithm):
    """The manifest rule of image_artifacts: the whole digest, or a prefix of at least MIN_PREFIX hex characters."""
    if not isinstance(value, str):
        return f"not an {algorithm} (a string of hex characters)"
    try:
        normalize_digest(value, algorithm)
    except ArtifactError:
        return f"not an {algorithm}: the whole {DIGEST_LENGTHS[algorithm]} hex characters, or a prefix of at least {MIN_PREFIX}"
    return None


_MANIFEST_FIX = ("write one file a line as SHA256  SIZE  NAME (64 hex characters, the size in bytes, the path inside "
                 "the model folder without spaces; # starts a comment), as the model_weights module's mode=record "
                 "writes it; see docs/model_weights.md")


def manifest_problems(path):
    """The problems of the manifest file at PATH on the controller, each a (problem, fix) pair, by the modules' own parser."""
    try:
        with open(path, encoding="utf-8") as handle:
            entries = parse_manifest(handle.read())
    except FileNotFoundError:
        return [("no such file on the controller", "make the manifest (docs/model_weights.md) and write its path here")]
    except (OSError, UnicodeDecodeError) as exc:
        return [(f"cannot be read on the controller ({exc})", "make it a readable text file")]
    except ValueError as exc:
        return [(str(exc), _MANIFEST_FIX)]
    return [] if entries else [("lists no file, so any model folder would pass", _MANIFEST_FIX)]


def pd_check_model_weights(hostvars, hosts):
    """Model staging has a manifest and the cluster network; each manifest named is a readable list of files (read once)."""
    problems, cache = [], {}
    for host in hosts:
        one = hostvars[host]
        path = one.get("sglang_pd_model_manifest")
        if one.get("sglang_pd_model_stage", False) is True and path in (None, ""):
            problems.append(variable_problem(host, "sglang_pd_model_manifest", path,
                                             "sglang_pd_model_stage copies the files a manifest lists, and none is set",
                                             "write sglang_pd_model_manifest (the controller path of the model's manifest, "
                                             "see docs/model_weights.md), or sglang_pd_model_stage: false"))
        if one.get("sglang_pd_model_stage", False) is True and not one.get("sglang_pd_cluster_cidr"):
            problems.append(variable_problem(host, "sglang_pd_cluster_cidr", None, "sglang_pd_model_stage copies between nodes through a "
                                             "seed rsync daemon that admits only the cluster network",
                                             "set sglang_pd_cluster_cidr (e.g. 10.0.0.0/16) for every PD host"))
        if not isinstance(path, str) or not path:
            continue  # a value of the wrong type: pd_check_variables reports it
        expanded = os.path.expanduser(path)
        if not os.path.isabs(expanded):
            problems.append(variable_problem(host, "sglang_pd_model_manifest", path, "not an absolute path on the controller",
                                             "write an absolute path (or ~/...); an inventory can name its own folder with inventory_dir"))
            continue
        if expanded not in cache:
            cache[expanded] = manifest_problems(expanded)
        problems += [variable_problem(host, "sglang_pd_model_manifest", path, problem, fix) for problem, fix in cache[expanded]]
    return merge_problems(problems)


# --------------------------------------------------------------------------- network: addresses, ports, firewall
def pd_check_reachability(model):
    """The router reaches every worker at its URL: no worker listens on another address than its service address."""
    problems = []
    for worker in model["workers"]:
        listen = str(worker["launch"]["options"].get("host") or "")
        address = model["hosts"][worker["host"]]["address"]
        if not worker["serves_http"] or address is None or listen in ("0.0.0.0", "::", address):
            continue
        try:
            loopback = listen == "localhost" or ipaddress.ip_address(listen).is_loopback
        except ValueError:
            loopback = False
        why = "a server on a loopback address refuses every other node" if loopback else f"it would listen on {listen}, not on its service address {address}"
        problems.append(variable_problem(worker["host"], origin_of(worker["launch"], "host"), listen,
                                         f"the routers and the decode workers reach {worker['mode']} worker {worker['name']} at {worker['url']}: {why}",
                                         "leave the host unset (the service address, or every interface with sglang_pd_listen_all: true)"))
    return merge_problems(problems)


def _resolve(name, cache):
    if name not in cache:
        try:
            cache[name] = sorted({info[4][0] for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)})
        except (socket.gaierror, UnicodeError, OSError):
            cache[name] = []
    return cache[name]


def pd_check_addresses(model, hostvars):
    """Service addresses are valid, resolvable, reachable from other nodes and in the CIDR."""
    problems, cache = [], {}
    for host, info in model["hosts"].items():
        one, source, address = hostvars[host], info["address_source"], info["address"]
        if info["address_problem"]:
            problems.append(variable_problem(host, source, one.get(source.split("[")[0]), info["address_problem"],
                                             "set sglang_pd_service_address, or list the host's addresses in sglang_pd_addresses "
                                             "with one inside sglang_pd_cluster_cidr"))
            continue
        for candidate in address_candidates(one):  # as the service address is chosen from them
            try:
                ipaddress.ip_interface(str(candidate).strip())
            except ValueError:
                problems.append(variable_problem(host, "sglang_pd_addresses", candidate, "not an IP address",
                                                 "list IP addresses (10.0.0.4 or 10.0.0.4/24)"))
        try:
            ips = [ipaddress.ip_address(address)]
        except ValueError:
            ips = [ipaddress.ip_address(a.split("%")[0]) for a in _resolve(address, cache)]
        if not ips:
            problems.append(variable_problem(host, source, address, "this name does not resolve on the controller",
                                             "write the IP address other nodes reach this host at in sglang_pd_service_address"))
        elif len(model["hosts"]) > 1 and any(ip.is_loopback or ip.is_unspecified for ip in ips):
            problems.append(variable_problem(host, source, address, "other nodes cannot reach a loopback or unspecified address "
                                             "(the router gives prefill URLs to decode nodes)",
                                             "write the host's cluster address in sglang_pd_service_address"))
        elif one.get("sglang_pd_cluster_cidr"):
            problems += _cidr_problems(host, source, address, ips, one["sglang_pd_cluster_cidr"])
    return merge_problems(problems)


def _cidr_problems(host, source, address, ips, cidr):
    try:
        network = ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return [variable_problem(host, "sglang_pd_cluster_cidr", cidr, "not a network", "write a CIDR such as 10.0.0.0/16")]
    if any(ip in network for ip in ips):
        return []
    return [variable_problem(host, source, address, f"outside sglang_pd_cluster_cidr {cidr}",
                             f"write an address inside {cidr}, or correct sglang_pd_cluster_cidr")]


def _service_ports(model):
    """(host, address, port, what, variable) of every port a service listens on."""
    for worker in model["workers"]:
        if not worker["serves_http"]:
            continue
        host, address, mode, name = worker["host"], worker["address"], worker["mode"], worker["name"]
        yield host, address, worker["port"], f"{mode} worker {name}", f"port of {name} (sglang_pd_{mode}_port)"
        if mode == "prefill":
            yield host, address, worker["bootstrap_port"], f"bootstrap server of {name}", f"bootstrap port of {name} (sglang_pd_bootstrap_port)"
        if worker["nnodes"] > 1:
            yield host, address, worker["dist_init_port"], f"dist-init port of {name}", "sglang_pd_dist_init_port"
        if worker["launch"]["options"].get("nccl_port"):
            yield host, address, worker["launch"]["options"]["nccl_port"], f"NCCL port of {name}", "nccl_port in the worker options"
    for router in model["routers"]:
        options = router["launch"]["options"]
        yield router["host"], router["address"], options.get("port"), "the router", "sglang_router_port"
        if options.get("prometheus_port"):
            yield router["host"], router["address"], options["prometheus_port"], "the router's metrics", "sglang_router_prometheus_port"


def pd_check_ports(model):
    """Every port is valid and no two services use one port on one address."""
    problems, used = [], {}
    for host, address, port, what, variable in _service_ports(model):
        if _port_problem(port):
            problems.append(variable_problem(host, variable, port, _port_problem(port), PORT_FIX))
        elif (address, int(port)) in used:
            other_host, other_what = used[(address, int(port))]
            problems.append(variable_problem(host, variable, port, f"port {port} on {address} is used by {what} and by {other_what} on {other_host}",
                                             "give each service on a host its own port (workers: port / bootstrap_port in "
                                             "sglang_pd_<mode>_workers; router: sglang_router_port, sglang_router_prometheus_port)"))
        else:
            used[(address, int(port))] = (host, what)
    return merge_problems(problems)


def pd_check_firewall(model, groups, hostvars):
    """With the firewall on (the default), every PD host has the networks it admits, and SSH stays open."""
    problems = []
    # Reported by the build and addresses checks: the firewall is not built then.
    unbuildable = bool(model["errors"]) or any(info["address_problem"] for info in model["hosts"].values())
    for host in model["hosts"]:
        one = hostvars[host]
        if one.get("sglang_firewall_enabled", True) is False:
            continue
        missing = [name for name in ("sglang_pd_cluster_cidr", "sglang_pd_client_cidrs") if not one.get(name)]
        problems += [variable_problem(host, name, None, "the firewall admits the service ports only from the cluster network (worker, "
                                      "bootstrap, dist-init and metrics ports) and the router port only from the client networks",
                                      "set sglang_pd_cluster_cidr (e.g. 10.0.0.0/16) and sglang_pd_client_cidrs (e.g. [10.1.0.0/16]) for "
                                      "every PD host, or sglang_firewall_enabled: false to leave the ports to your own firewall")
                     for name in missing]
        if missing or unbuildable:
            continue
        try:
            pd_firewall(host, groups, hostvars, model["hosts"][host]["role_vars"].get("sglang_router"))
        except AnsibleFilterError as exc:
            problems.append((host, f"the firewall cannot be built: {exc.message}"))
    return merge_problems(problems)


# --------------------------------------------------------------------------- GPUs and InfiniBand
def int_option(options, *names):
    """The first of NAMES set in a worker's OPTIONS as an integer (1 when none is set; None when not a number)."""
    value = next((options[name] for name in names if options.get(name) not in (None, "", False)), 1)
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def pd_check_gpus(model, hostvars):
    """GPU subsets are valid and disjoint, and TP x DP x PP equals the GPUs a worker gets (SGLang's own rules: sglang_rules)."""
    problems, by_host, groups = [], {}, {}
    for worker in model["workers"]:
        host, mode = worker["host"], worker["mode"]
        specs = hostvars[host].get(f"sglang_pd_{mode}_workers") or []
        variable = f"sglang_pd_{mode}_workers[{worker['index']}].gpus" if specs else f"sglang_pd_{mode}_workers"
        raw = specs[worker["index"]].get("gpus") if specs and isinstance(specs[worker["index"]], Mapping) else None
        try:
            gpus = parse_gpus(raw)
        except ValueError as exc:
            problems.append(variable_problem(host, variable, raw, str(exc), 'write GPU ids as a list [0, 1, 2, 3] or a string "0,1,2,3"'))
            continue
        if worker["group"]:
            groups.setdefault((mode, worker["group"]), []).append(worker)
        if hostvars[host].get("sglang_pd_validate_gpu_layout", True) is not False:
            problems += _gpu_problems(worker, variable, raw, gpus, by_host.setdefault(host, {}),
                                      model["hosts"][host]["role_vars"]["sglang_worker"].get("sglang_worker_gpu_isolation"))
    for (mode, group), members in groups.items():
        first = members[0]
        for worker in members[1:]:
            problems += [variable_problem(worker["host"], f"sglang_pd_{mode}_port" if key == "port" else "sglang_pd_bootstrap_port", worker[key],
                                          f"the hosts of multi-node worker {group} must agree ({first['host']} has {first[key]})",
                                          f"set the same value on every host of sglang_pd_worker_group {group}")
                         for key in ("port", "bootstrap_port") if worker[key] != first[key]]
            if (worker["gpus"] and len(worker["gpus"])) != (first["gpus"] and len(first["gpus"])):
                problems.append(variable_problem(worker["host"], f"sglang_pd_{mode}_workers", worker["gpus"],
                                                 f"the hosts of multi-node worker {group} must give it as many GPUs "
                                                 f"({first['host']}: {first['gpus'] or 'all'})", "give every host of the group the same number of GPUs"))
    return merge_problems(problems)


def _gpu_problems(worker, variable, raw, gpus, taken, isolation):
    """The GPU problems of one worker (TAKEN: the host's GPUs given so far, GPU -> worker)."""
    host, mode, per_host, nnodes = worker["host"], worker["mode"], worker["gpus_per_host"], worker["nnodes"]
    ids = gpus if gpus is not None else list(range(per_host))
    bad = [g for g in ids if not 0 <= g < per_host]
    if bad:
        return [variable_problem(host, variable, raw, f"GPU ids {bad} do not exist on a host with sglang_pd_gpus_per_host {per_host}",
                                 f"use ids 0 to {per_host - 1}, or correct sglang_pd_gpus_per_host")]
    if len(set(ids)) != len(ids):
        return [variable_problem(host, variable, raw, "a GPU is listed twice", "list each GPU once")]
    problems = []
    if gpus and isolation == "base_gpu_id" and ids != list(range(min(ids), min(ids) + len(ids))):
        problems.append(variable_problem(host, variable, raw, "with sglang_worker_gpu_isolation base_gpu_id a worker needs consecutive GPUs",
                                         "list consecutive ids (e.g. [4, 5, 6, 7]) or use sglang_worker_gpu_isolation: visible_devices"))
    for gpu in ids:
        if gpu in taken:
            problems.append(variable_problem(host, variable, raw if raw is not None else "all GPUs", f"GPU {gpu} is also given to {taken[gpu]}",
                                             "give each worker on a host its own GPUs with gpus in sglang_pd_<mode>_workers"))
            break
        taken[gpu] = f"{mode} worker {worker['name']}"
    options = worker["launch"]["options"]
    sizes = (("tp_size", "tensor_parallel_size"), ("dp_size", "data_parallel_size"), ("pp_size", "pipeline_parallel_size"))
    tp, dp, pp = (int_option(options, *names) for names in sizes)
    if None in (tp, dp, pp):
        return problems + [variable_problem(host, "sglang_worker_tp_size / dp_size / pp_size", [tp, dp, pp], "not integers", "write whole numbers")]
    dp_attention = options.get("enable_dp_attention") is True
    world, given = tp * pp * (1 if dp_attention else dp), len(ids) * nnodes
    if world != given:
        formula = f"tp_size {tp} x pp_size {pp}" + ("" if dp_attention else f" x dp_size {dp}")
        gets = f"{len(ids)} GPUs" + (f" ({', '.join(str(g) for g in ids)})" if gpus else f" (all of the host's, sglang_pd_gpus_per_host {per_host})")
        gets += f" on each of {nnodes} nodes = {given}" if nnodes > 1 else ""
        problems.append(variable_problem(host, origin_of(worker["launch"], "tp_size"), tp, f"the {mode} worker {worker['name']} needs {formula} "
                                         f"= {world} GPUs but gets {gets}", f"set tp_size (or dp_size / pp_size) so the product is {given}, or "
                                         f"give the worker {world // max(nnodes, 1)} GPUs per node with gpus in sglang_pd_{mode}_workers"))
    return problems


IB_FIX = ("write a list of device names such as [mlx5_ib0, mlx5_ib1], or a map of GPU id to devices such as "
          "{0: [mlx5_ib0], 1: [mlx5_ib1]}")


def _ib_problem(value, worker, role_vars):
    """What is wrong with a worker's InfiniBand devices (names, a comma list, a JSON file or a per-GPU map), or None."""
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return "not valid JSON"
    if isinstance(value, str) and value.startswith("/"):
        return None if value.endswith(".json") else "a path must name a JSON file of the per-GPU map"
    if not isinstance(value, (str, list, tuple, Mapping)):
        return "neither a list, a map nor a string"
    keys = sorted(key for key, _gpu in worker_gpu_keys(worker, role_vars))
    wrong = [gpu for gpu in value if not str(gpu).isdigit() or int(gpu) not in keys] if isinstance(value, Mapping) else []
    if wrong:
        return f"GPU {show_value(wrong[0])} is not one of the worker's GPUs {keys} (keys are GPU ids as the worker sees them)"
    lists = value.values() if isinstance(value, Mapping) else [value]
    names = [n for one in lists for n in (one if isinstance(one, (list, tuple)) else [n.strip() for n in str(one).split(",")])]
    bad = [n for n in names if not isinstance(n, str) or not IB_NAME_RE.match(n)]
    return f"{', '.join(show_value(b) for b in bad)} is not a device name" if bad else None


def pd_check_ib_devices(model):
    """InfiniBand device names are well formed; per-GPU maps name GPUs the worker has."""
    problems = []
    for worker in model["workers"]:
        role_vars = model["hosts"][worker["host"]]["role_vars"]["sglang_worker"]
        value, variable = worker_ib_device(worker, role_vars)
        # auto: the node's own GPU-NIC pairing, read on the node.
        problem = None if value in (None, "", [], {}) or ": auto" in variable else _ib_problem(value, worker, role_vars)
        if problem:
            problems.append(variable_problem(worker["host"], variable, value, problem, IB_FIX))
    return merge_problems(problems)


# --------------------------------------------------------------------------- worker flags
def flag_table(hostvars_one):
    """(version, flag module with FLAGS, TYPES, DEFAULTS or None) of the SGLang release a host's workers run (sglang_pd_sglang_version)."""
    version = str(hostvars_one.get("sglang_pd_sglang_version") or DEFAULT_SGLANG_VERSION)
    try:
        return version, importlib.import_module(ALLOWLIST_MODULE.format(version.replace(".", "_")))
    except ImportError:
        return version, None


def _extra_flags(extra):
    table = {}
    for flag, kind in extra.items() if isinstance(extra, Mapping) else ((flag, "any") for flag in (extra or [])):
        flag = str(flag) if str(flag).startswith("--") else "--" + str(flag).replace("_", "-")
        table[flag] = (flag[2:].replace("-", "_"), kind if kind in ("switch", "value", "list", "optional") else "any", None, None)
    return table


def flag_value_problem(value, kind):
    """Why VALUE is not of KIND (``int`` or ``float`` from a flag module's TYPES), or None."""
    try:
        number = float(value)
    except ValueError:
        return f"not a number (read as {kind})"
    return "not a whole number" if kind == "int" and number != int(number) else None


def _unknown_flag_hint(flag, flags, escape):
    prefixed = [f for f in sorted(flags) if f.startswith(flag)]
    close = difflib.get_close_matches(flag, sorted(flags), n=1)
    if prefixed:
        return f"write the whole flag {' or '.join(prefixed[:3])} (abbreviations are refused: they break when a release adds a flag)"
    if close:
        return f"did you mean {close[0]}?" + (f" (or, if your SGLang build has {flag}, list it in {escape})" if escape else "")
    return "remove it" + (f", or add it to {escape} if your SGLang build has it" if escape else "")


def _value_problems(kind, choices, values, kind_of_value):
    """(value, problem, fix) of the values given to one known flag."""
    found = []
    if kind == "value" and len(values) != 1:
        found.append((None, "needs one value", "give it a value"))
    elif kind == "list" and not values:
        found.append((None, "needs at least one value", "give it one value or a list"))
    allowed = [str(c) for c in choices or ()]
    found += [(value, "not a valid choice", f"write one of {', '.join(allowed)}{suggest(value, allowed)}") for value in values
              if choices and value not in allowed]
    if kind_of_value in ("int", "float") and not choices:
        found += [(value, flag_value_problem(value, kind_of_value), f"write a {'whole ' if kind_of_value == 'int' else ''}number such as "
                   f"{'8' if kind_of_value == 'int' else '0.85'}, unquoted and without units")
                  for value in values if flag_value_problem(value, kind_of_value)]
    return found


def flag_tokens(argv, flags, start=0):
    """(position, flag, values) of each flag of ARGV from START, split by FLAGS' kinds (flag None: a value without one).

    An unknown flag takes every value up to the next flag; a switch takes a stray value, for check_argv to refuse.
    """
    index = start
    while index < len(argv):
        position, (flag, _sep, inline) = index, str(argv[index]).partition("=")
        index += 1
        if not flag.startswith("--"):
            yield position, None, [str(argv[position])]
            continue
        kind, values = flags[flag][1] if flag in flags else "any", [inline] if inline else []
        while index < len(argv) and not str(argv[index]).startswith("--") and (kind in ("list", "any") or not values):
            values.append(str(argv[index]))
            index += 1
        yield position, flag, values


def check_argv(argv, origins, flags, start=3, types=None, escape="sglang_pd_sglang_extra_flags"):
    """[(origin, flag, value, problem, fix)] of one command line against FLAGS, TYPES (dest -> int/float/str) and ESCAPE
    (the variable that admits flags the table lacks, or None)."""
    problems, seen = [], {}
    for position, flag, values in flag_tokens(argv, flags, start):
        origin = origins[position] if position < len(origins) else ""
        if flag is None:
            problems.append((origin, values[0], values[0], "a value without a flag", "put it after the flag it belongs to"))
            continue
        if flag not in flags:
            problems.append((origin, flag, " ".join(values) or None, "no such flag", _unknown_flag_hint(flag, flags, escape)))
            continue
        dest, kind, choices, replacement = flags[flag]
        if kind == "switch" and values:
            stray, values = values[0], []
            fix = "write a YAML boolean (true to set the switch, false to leave it out)"
            if stray.lower() in STRING_BOOLEANS:
                fix = f"write {dest}: {'true' if stray.lower() in TRUE_WORDS else 'false'} (unquoted)"
            problems.append((origin, flag, stray, "a switch, it takes no value (a string was given)", fix))
        problems += [(origin, flag, value, problem, fix) for value, problem, fix in
                     _value_problems(kind, choices, values, (types or {}).get(dest))]
        if replacement is not None:
            problems.append((origin, flag, values[0] if values else None, "deprecated",
                             f"use {replacement}" if replacement else "remove it (it is ignored)"))
        if dest in seen and dest not in ("", None):
            problems.append((origin, flag, values[0] if values else None, f"{seen[dest][0]} is already given by {seen[dest][1]}",
                             "set each option in one place only"))
        else:
            seen[dest] = (flag, origin)
    return problems


def pd_check_flags(model, hostvars):
    """Every worker flag exists in the pinned SGLang version, with a valid value."""
    problems = []
    for worker in model["workers"]:
        host, mode, launch = worker["host"], worker["mode"], worker["launch"]
        version, table = flag_table(hostvars[host])
        if table is None:
            problems.append(variable_problem(host, "sglang_pd_sglang_version", version, "the collection ships no flag list for this version",
                                             f"run python scripts/gen_sglang_allowlist.py --version {version} and ship the result, "
                                             f"or write a shipped version such as {DEFAULT_SGLANG_VERSION}"))
            continue
        extra = hostvars[host].get("sglang_pd_sglang_extra_flags") or []
        if isinstance(extra, str):
            problems.append((host, f"sglang_pd_sglang_extra_flags = {extra!r}: a string, not a list of flags; "
                                   f"write [{extra}] (a YAML list) or a map of flag to kind"))
            continue
        flags = dict(table.FLAGS, **_extra_flags(extra))
        problems += _option_problems(host, mode, launch)
        for origin, flag, value, problem, fix in check_argv(launch["argv"], launch["origins"], flags, launch["options_start"], table.TYPES):
            if flag.startswith("---"):
                continue  # an option key written as a flag: reported above
            value = REDACTED if SECRET_NAME.search(flag) else value
            text = flag + (f" {value}" if value not in (None, "") else "")
            problems.append((host, f"{origin or 'command line'}: {text}: {problem} (SGLang {version}, {mode} worker {worker['name']}); {fix}"))
    return merge_problems(problems)


def _option_problems(host, mode, launch):
    """Options the collection sets itself, or that would put a secret or an invalid backend on the command line."""
    problems = []
    for key in launch["options"]:
        if str(key).startswith("-"):
            problems.append(variable_problem(host, f"{origin_of(launch, key)}.{key}", launch["options"][key],
                                             "an option's name is written as SGLang's ServerArgs field, not as its flag",
                                             f"write {str(key).lstrip('-').replace('-', '_')} (the collection turns it into "
                                             f"--{str(key).lstrip('-').replace('_', '-')})"))
        elif key in FIXED_WORKER_OPTIONS:
            problems.append(variable_problem(host, origin_of(launch, key), {key: REDACTED if SECRET_NAME.search(key) else launch["options"][key]},
                                             f"{key} is set by the collection from the inventory", f"remove it and set {FIXED_WORKER_OPTIONS[key]}"))
    if mode == "prefill" and launch["options"].get("disaggregation_transfer_backend") == "fake":
        problems.append(variable_problem(host, origin_of(launch, "disaggregation_transfer_backend"), "fake",
                                         "SGLang refuses the fake transfer backend on prefill servers",
                                         "write mooncake (default), nixl, mori or mooncake_tcp"))
    given = Counter(str(token).split("=", maxsplit=1)[0] for token in launch["argv"])
    for index in range(launch["options_start"], len(launch["argv"])):
        flag, origin = str(launch["argv"][index]).split("=", maxsplit=1)[0], launch["origins"][index]
        fixed = flag[2:].replace("-", "_") if flag.startswith("--") else ""
        # Given twice (the collection's and the extra one): check_argv names both places.
        if fixed in FIXED_WORKER_OPTIONS and str(origin).endswith("extra_args") and given[flag] == 1:
            problems.append(variable_problem(host, origin, flag, f"{flag} is set by the collection from the inventory (the router and the "
                                             "other workers are told the same)", f"remove it and set {FIXED_WORKER_OPTIONS[fixed]}"))
        if flag.startswith("--") and SECRET_NAME.search(flag):
            problems.append(variable_problem(host, origin, REDACTED, f"{flag} on the command line ends up in the launch script, in ps and in logs",
                                             "write sglang_worker_api_key / sglang_worker_admin_api_key instead (a root-only "
                                             "file the worker reads in-process)"))
    return problems


def origin_of(launch, key):
    """The variable an option of a worker came from."""
    origins = launch.get("option_origins") or {}
    if key in origins:
        return origins[key]
    flag = "--" + key.replace("_", "-")
    return next((origin for token, origin in zip(launch["argv"], launch["origins"]) if token == flag), "sglang_worker_options")


def option_variable(launch, key):
    """The variable an option of a worker came from, down to the key of an options map."""
    origin = origin_of(launch, key)
    return f"{origin}.{key}" if origin.endswith("_options") else origin
