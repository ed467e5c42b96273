# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks of a PD inventory, run on the controller before any host is touched.

``pd_model`` evaluates, for every host, the variables the roles would see (the
inventory's values over the roles' defaults) and builds every worker's and router's
command line with the same filters the roles use (plugins/filter/pd.py). The
``pd_check_*`` functions (called by the ``pd_preflight`` filter) then return a list of problems, each naming the host, the
variable, its value, and what to write instead. An empty list means the check passed.
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

from ansible import constants as C
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.firewall import pd_firewall
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._artifact_checks import (
    DIGEST_LENGTHS, MIN_PREFIX, ArtifactError, normalize_digest)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import VARIABLE_PREFIXES, repository_problem
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.inputs import type_problem
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import (
    merge_problems, show_value, suggest, variable_problem)
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import (
    MODES,
    first_admin_key,
    parse_gpus,
    WORKER_SPEC_KEYS,
    pd_workers,
    resolve_service_address,
)
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import (
    FIXED_WORKER_OPTIONS,
    REDACTED,
    SECRET_NAME,
    router_plan,
    worker_plan,
)

PD_GROUPS = ("sglang_router", "sglang_prefill", "sglang_decode")
# The roles whose variables the preflight resolves per host (their defaults, templated by Ansible).
RESOLVED_ROLES = ("sglang_worker", "sglang_router")
# A variable with one of these prefixes belongs to the collection: one that no role or
# playbook takes is refused (a misspelt digest would otherwise deploy the old image).
COLLECTION_PREFIXES = VARIABLE_PREFIXES
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
MD5_RE = re.compile(r"^[0-9a-f]{32}$")
IB_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
STRING_BOOLEANS = {"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n"}
# Connection variables the checks read besides the collection's own (service address, SSH port).
SNAPSHOT_NAMES = ("ansible_host", "ansible_port")
ALLOWLIST_MODULE = "ansible_collections.mindverse.sglang_pd.plugins.module_utils._sglang_flags_v{}"
DEFAULT_SGLANG_VERSION = "0.5.14"


# --------------------------------------------------------------------------- helpers

def _plain(value):
    """VALUE as plain dicts and lists: a filter gets lazily templated containers, whose every
    access costs a template check; checks that read the plan many times read this copy."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


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


def pd_check_build(model):
    """Problems found while evaluating variables and building the commands."""
    return merge_problems(model.get("errors") or [])


# --------------------------------------------------------------------------- groups

def pd_check_groups(groups):
    """Each PD group has hosts, all of them in sglang_pd, and no group is a misspelt PD group."""
    problems = []
    members = set(groups.get("sglang_pd") or [])
    for name in PD_GROUPS:
        if not (groups.get(name) or []):
            problems.append(
                f"inventory: group {name} is empty; add at least one host to {name} "
                f"(sglang_router, sglang_prefill and sglang_decode are children of sglang_pd)")
        outside = [host for host in groups.get(name) or [] if host not in members]
        if outside:
            problems.append(
                f"{', '.join(outside)}: in group {name} but not in sglang_pd, so the container engine, the "
                f"firewall and the image would skip them while the router is told their workers; "
                f"make {name} a child of sglang_pd (all: children: sglang_pd: children: {name})")
    known = set(PD_GROUPS) | {"sglang_pd", "all", "ungrouped"}
    for name in sorted(groups):
        close = difflib.get_close_matches(name, sorted(PD_GROUPS + ("sglang_pd",)), n=1, cutoff=0.85)
        if name not in known and close and groups.get(name):
            problems.append(
                f"{', '.join(groups[name])}: in group {name}, which no play of this collection runs on; "
                f"did you mean {close[0]}? (the hosts would silently serve nothing)")
    return problems


# --------------------------------------------------------------------------- variables

def _fix_for_type(name, spec, value):
    kind = spec.get("type", "raw")
    if kind == "bool" and spec.get("switch"):
        return f"write -e {name}=true or -e {name}=false"
    if kind == "bool":
        literal = "true" if str(value).strip().lower() in ("true", "yes", "on", "1", "y") else "false"
        return (f"write {name}: {literal} (a YAML boolean, unquoted); on the command line use JSON: "
                f"-e '{{\"{name}\": {literal}}}'")
    if spec.get("choices"):
        return f"write one of {', '.join(str(c) for c in spec['choices'])}{suggest(value, spec['choices'])}"
    return f"write a value of type {kind}"


def pd_check_variables(hostvars, hosts, specs, removed):
    """Removed or renamed variables, unknown role variables and values of the wrong type.

    ``specs`` maps variable names to argument-spec options (type, choices, elements);
    ``removed`` maps old variable names to what to write instead.
    """
    problems = []
    known = set(specs)
    required = sorted(n for n, spec in specs.items() if n.startswith("sglang_pd_") and (spec or {}).get("required"))
    for host in hosts:
        one = hostvars[host]
        names = _names(one)
        for name in required:
            if name not in names or _get(one, name, [], host) in (None, ""):
                problems.append(variable_problem(host, name, None, "required, and not set",
                                                 f"set {name} for every PD host (group_vars/all); see docs/variables.md"))
        for name in sorted(names):
            if name in removed:
                problems.append(variable_problem(host, name, _get(one, name, [], host), "this variable was removed or renamed",
                                                 f"write {removed[name]} instead"))
                continue
            if name.startswith(COLLECTION_PREFIXES) and name not in known:
                hint = _role_variable_hint(name, known)
                value = _get(one, name, [], host)
                # A misspelling of a secret's name is a secret too ("did you mean ..._password?").
                if SECRET_NAME.search(hint) or (specs.get(hint.partition("did you mean ")[2].partition("?")[0]) or {}).get("no_log"):
                    value = REDACTED
                problems.append(variable_problem(host, name, value, "no role or playbook of this collection "
                                                 "reads this variable", f"{hint}see docs/variables.md for the variables each role takes"))
                continue
            spec = specs.get(name)
            if spec is None:
                continue
            errors = []
            value = _get(one, name, errors, host)
            if errors:
                problems.extend(errors)
                continue
            found = type_problem(spec, value)
            if found and found[1] is None:
                problems.append(variable_problem(host, name, value, found[0], _fix_for_type(name, spec, value)))
            elif found:
                item, element_spec = value[found[1]], {"type": spec["elements"]}
                problems.append(variable_problem(host, f"{name}[{found[1]}]", item, found[0],
                                                 _fix_for_type(f"{name}[{found[1]}]", element_spec, item)))
    return merge_problems(problems)


def _role_variable_hint(name, known):
    """What an unknown sglang_worker_* / sglang_router_* variable probably meant."""
    if name.startswith("sglang_worker_"):
        flag = "--" + name[len("sglang_worker_"):].replace("_", "-")
        entry = (load_allowlist(DEFAULT_SGLANG_VERSION) or {}).get(flag)
        if entry:
            dest = entry[0]
            for suffix in (dest, {"disaggregation_transfer_backend": "transfer_backend",
                                  "disaggregation_ib_device": "ib_device"}.get(dest, dest)):
                if "sglang_worker_" + suffix in known:
                    return f"did you mean sglang_worker_{suffix}? "
            return f"to pass {flag}, write sglang_worker_options: {{{dest}: ...}}; "
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.7)
    return f"did you mean {close[0]}? " if close else ""


def pd_check_worker_specs(hostvars, groups):
    """Entries of sglang_pd_<mode>_workers are well formed."""
    problems = []
    for mode in MODES:
        name = f"sglang_pd_{mode}_workers"
        for host in groups.get("sglang_" + mode) or []:
            one = hostvars[host]
            specs = _get(one, name, problems, host)
            if specs in (None, "", []):
                continue
            if not isinstance(specs, list):
                problems.append(variable_problem(host, name, specs, "not a list",
                                                 "write a list with one entry per worker, e.g. [{port: 30200, gpus: [0, 1, 2, 3]}]"))
                continue
            group = _get(one, "sglang_pd_worker_group", problems, host)
            if group and len(specs) > 1:
                problems.append(variable_problem(host, "sglang_pd_worker_group", group,
                                                 f"a host of a multi-node worker runs only that worker, but {name} lists {len(specs)}",
                                                 f"remove sglang_pd_worker_group, or give the host a single entry in {name}"))
            for index, spec in enumerate(specs):
                variable = f"{name}[{index}]"
                if not isinstance(spec, Mapping):
                    problems.append(variable_problem(host, variable, spec, "not a dict",
                                                     "write {port: ..., gpus: [...]} (keys: " + ", ".join(WORKER_SPEC_KEYS) + ")"))
                    continue
                for key in spec:
                    if key not in WORKER_SPEC_KEYS:
                        close = difflib.get_close_matches(str(key), WORKER_SPEC_KEYS, n=1)
                        problems.append(variable_problem(host, f"{variable}.{key}", spec[key], "not a worker key",
                                                         (f"did you mean {close[0]}? " if close else "")
                                                         + "the keys are " + ", ".join(WORKER_SPEC_KEYS)))
                for key in ("port", "bootstrap_port"):
                    if key in spec and _port_problem(spec[key]):
                        problems.append(variable_problem(host, f"{variable}.{key}", spec[key], _port_problem(spec[key]),
                                                         "write a port number between 1024 and 65535"))
                if mode == "decode" and "bootstrap_port" in spec:
                    problems.append(variable_problem(host, f"{variable}.bootstrap_port", spec["bootstrap_port"],
                                                     "the bootstrap server runs on prefill servers only",
                                                     "remove it (decode workers learn the port from the router)"))
                for key in ("args", "env"):
                    if key in spec and not isinstance(spec[key], Mapping):
                        problems.append(variable_problem(host, f"{variable}.{key}", spec[key], "not a dict",
                                                         "write snake_case options as a dict, e.g. {tp_size: 4}" if key == "args"
                                                         else "write environment variables as a dict, e.g. {NCCL_DEBUG: INFO}"))
                if "name" in spec and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(spec["name"])):
                    problems.append(variable_problem(host, f"{variable}.name", spec["name"], "not a valid service/container name",
                                                     "use letters, digits, '.', '_' and '-'"))
        for host in groups.get("sglang_" + mode) or []:
            for key in ("sglang_pd_%s_port" % mode, "sglang_pd_bootstrap_port", "sglang_pd_dist_init_port"):
                value = _get(hostvars[host], key, problems, host)
                if value is not None and _port_problem(value):
                    problems.append(variable_problem(host, key, value, _port_problem(value), "write a port number between 1024 and 65535"))
    return merge_problems(problems)


def pd_check_names(model):
    """Service (container) names are unique on each host."""
    problems = []
    seen = {}
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
            problems.append(variable_problem(router["host"], "sglang_router_name", name,
                                             f"the {seen[(router['host'], name)]} on this host already has this name",
                                             "write another sglang_router_name"))
    return merge_problems(problems)


# --------------------------------------------------------------------------- image

def pd_check_image(hostvars, hosts):
    """The image is pinned by a full sha256 digest; md5 and sha256 values follow the manifest rule."""
    problems = []
    for host in hosts:
        one = hostvars[host]
        names = _names(one)
        errors = []
        digest = _get(one, "sglang_pd_image_digest", errors, host)
        repository = _get(one, "sglang_pd_image_repository", errors, host)
        problems.extend(errors)
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            problems.append(variable_problem(
                host, "sglang_pd_image_digest", digest, "the image must be pinned by its full digest",
                "write sha256: followed by all 64 hex characters (docker buildx imagetools inspect IMAGE, "
                "or the RepoDigests of docker image inspect)"))
        grammar = repository_problem(repository) if isinstance(repository, str) and repository else "it is empty"
        if grammar:
            problems.append(variable_problem(
                host, "sglang_pd_image_repository", repository, f"not an image repository Docker takes: {grammar}",
                "write the registry and repository only, e.g. myacr.azurecr.io/mindverse/sglang, and the digest "
                "in sglang_pd_image_digest"))
        for name in ("sglang_worker_image", "sglang_router_image"):
            if name not in names:
                continue
            value = _get(one, name, problems, host)
            pattern = DIGEST_RE if name.endswith("_digest") else re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
            if not isinstance(value, str) or not pattern.match(value):
                problems.append(variable_problem(host, name, value, "not pinned by a full sha256 digest",
                                                 "write REPOSITORY@sha256:<64 hex characters>, or leave it unset so it "
                                                 "follows sglang_pd_image_repository and sglang_pd_image_digest"))
        for name in sorted(names):
            if name.endswith("_md5"):
                value = _get(one, name, problems, host)
                # A build pin (the file is at hand where it is set): whole, as prebuilt_artifact takes it.
                if value and (not isinstance(value, str) or not MD5_RE.match(value)):
                    problems.append(variable_problem(host, name, value, "not a whole md5",
                                                     "write all 32 lowercase hex characters (md5sum FILE), not a prefix"))
        for name in ("sglang_pd_image_artifacts", "sglang_image_artifacts"):
            if name not in names:
                continue
            artifacts = _get(one, name, problems, host) or []
            if not isinstance(artifacts, list):
                problems.append(variable_problem(host, name, artifacts, "not a list", "write a list of {path, md5 | sha256}"))
                continue
            for index, item in enumerate(artifacts):
                if not isinstance(item, Mapping):
                    continue
                for key in ("md5", "sha256"):
                    if key in item and _digest_problem(item[key], key):
                        problems.append(variable_problem(host, f"{name}[{index}].{key}", item[key], _digest_problem(item[key], key),
                                                         _digest_fix(key, item.get("path", "FILE"))))
    return merge_problems(problems)


def _digest_problem(value, algorithm):
    """The manifest rule of image_artifacts, the one rule everywhere: the whole digest, or a prefix of at
    least MIN_PREFIX hex characters (the production records of two files are prefixes)."""
    if not isinstance(value, str):
        return f"not an {algorithm} (a string of hex characters)"
    try:
        normalize_digest(value, algorithm)
    except ArtifactError:
        return f"not an {algorithm}: the whole {DIGEST_LENGTHS[algorithm]} hex characters, or a prefix of at least {MIN_PREFIX}"
    return None


def _digest_fix(algorithm, path):
    return (f"write all {DIGEST_LENGTHS[algorithm]} lowercase hex characters ({algorithm}sum {path}); "
            f"a prefix of at least {MIN_PREFIX} is accepted and reported as match: prefix")


# --------------------------------------------------------------------------- model weights

MANIFEST_FORMAT = "SHA256  SIZE  NAME"
MANIFEST_SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
_MANIFEST_FIX = ("write one file a line as SHA256  SIZE  NAME (64 hex characters, the size in bytes, the path inside "
                 "the model folder without spaces; # starts a comment), as the model_weights module's mode=record "
                 "writes it; see docs/model_weights.md")


def _manifest_line_problem(line, seen):
    """What is wrong with one line of a model manifest, or None (SEEN holds the names so far).

    The same rules as the model_weights module, which reads the manifest on the nodes.
    """
    fields = line.split()
    if len(fields) != 3:
        return f"not {MANIFEST_FORMAT} ({len(fields)} fields, a name holds no whitespace)"
    digest, size, name = fields
    if not MANIFEST_SHA256_RE.match(digest):
        return f"the sha256 {digest!r} is not 64 hex characters"
    if not size.isdigit():
        return f"the size {size!r} is not a whole number of bytes"
    if name.startswith("/") or ".." in name.split("/"):
        return f"the name {name!r} must be a relative path inside the model folder, without '..'"
    if name in seen:
        return f"{name!r} is listed twice (line {seen[name]} too)"
    return None


def manifest_problems(path):
    """The problems of the manifest file at PATH on the controller, each a (problem, fix) pair."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return [("no such file on the controller", "make the manifest (docs/model_weights.md) and write its path here")]
    except (OSError, UnicodeDecodeError) as exc:
        return [(f"cannot be read on the controller ({exc})", "make it a readable text file")]
    problems, seen = [], {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        problem = _manifest_line_problem(line, seen)
        if problem:
            problems.append((f"line {number} ({json.dumps(line[:120])}): {problem}", _MANIFEST_FIX))
        else:
            seen[line.split()[2]] = number
    if not problems and not seen:
        problems.append(("lists no file, so any model folder would pass", _MANIFEST_FIX))
    return problems


def _manifest_path_problems(host, path, cache):
    """The problems of the manifest a host names (each file is read once)."""
    if not isinstance(path, str):
        return []  # a value of the wrong type: pd_check_variables reports it
    expanded = os.path.expanduser(path)
    if not os.path.isabs(expanded):
        return [variable_problem(host, "sglang_pd_model_manifest", path, "not an absolute path on the controller",
                                 "write an absolute path (or ~/...); an inventory can name its own folder with inventory_dir")]
    if expanded not in cache:
        cache[expanded] = manifest_problems(expanded)
    return [variable_problem(host, "sglang_pd_model_manifest", path, problem, fix) for problem, fix in cache[expanded]]


def pd_check_model_weights(hostvars, hosts):
    """Model staging has what it needs, and the manifest each host names is a readable list of files.

    ``sglang_pd_model_stage: true`` needs ``sglang_pd_model_manifest`` (the files to copy) and
    ``sglang_pd_cluster_cidr`` (the seed rsync daemon admits only the cluster network). A
    manifest, when set, must be a file on the controller whose every line, besides blank lines
    and ``#`` comments, is ``SHA256  SIZE  NAME``; a problem names the file and the line.
    """
    problems = []
    cache = {}
    for host in hosts:
        one = hostvars[host]
        manifest = _get(one, "sglang_pd_model_manifest", problems, host)
        if _get(one, "sglang_pd_model_stage", problems, host, False) is True:
            problems += _stage_problems(host, one, manifest, problems)
        if manifest not in (None, ""):
            problems += _manifest_path_problems(host, manifest, cache)
    return merge_problems(problems)


def _stage_problems(host, one, manifest, errors):
    """What sglang_pd_model_stage: true misses on a host (templating errors go to ERRORS)."""
    problems = []
    if manifest in (None, ""):
        problems.append(variable_problem(host, "sglang_pd_model_manifest", manifest,
                                         "sglang_pd_model_stage copies the files a manifest lists, and none is set",
                                         "write sglang_pd_model_manifest (the controller path of the model's manifest, "
                                         "see docs/model_weights.md), or sglang_pd_model_stage: false"))
    if not _get(one, "sglang_pd_cluster_cidr", errors, host):
        problems.append(variable_problem(host, "sglang_pd_cluster_cidr", None,
                                         "sglang_pd_model_stage copies between nodes through a seed rsync daemon that "
                                         "admits only the cluster network",
                                         "set sglang_pd_cluster_cidr (e.g. 10.0.0.0/16) for every PD host"))
    return problems


# --------------------------------------------------------------------------- addresses

def pd_check_reachability(model):
    """The router reaches every worker at its URL: no worker listens on another address than its service address."""
    problems = []
    for worker in model["workers"]:
        if not worker["serves_http"]:
            continue
        listen = str(worker["launch"]["options"].get("host") or "")
        address = model["hosts"][worker["host"]]["address"]
        if address is None or listen in ("0.0.0.0", "::", address):
            continue
        try:
            loopback = listen == "localhost" or ipaddress.ip_address(listen).is_loopback
        except ValueError:
            loopback = False
        why = ("a server on a loopback address refuses every other node" if loopback
               else f"it would listen on {listen}, not on its service address {address}")
        problems.append(variable_problem(worker["host"], origin_of(worker["launch"], "host"), listen,
                                         f"the routers and the decode workers reach {worker['mode']} worker {worker['name']} "
                                         f"at {worker['url']}: {why}",
                                         "leave the host unset (the service address, or every interface with "
                                         "sglang_pd_listen_all: true)"))
    return merge_problems(problems)


def _resolve(name, cache):
    if name not in cache:
        try:
            infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            cache[name] = sorted({info[4][0] for info in infos})
        except (socket.gaierror, UnicodeError, OSError):
            cache[name] = []
    return cache[name]


def pd_check_addresses(model, hostvars):
    """Service addresses are valid, resolvable, reachable from other nodes and in the CIDR."""
    problems = []
    cache = {}
    hosts = list(model["hosts"])
    distinct = len(hosts) > 1
    for host, info in model["hosts"].items():
        one = hostvars[host]
        names = _names(one)
        source = info["address_source"]
        if info["address_problem"]:
            problems.append(variable_problem(host, source, _get(one, source.split("[")[0], [], host), info["address_problem"],
                                             "set sglang_pd_service_address, or list the host's addresses in sglang_pd_addresses "
                                             "with one inside sglang_pd_cluster_cidr"))
            continue
        if "sglang_pd_addresses" in names:
            for candidate in _as_list(_get(one, "sglang_pd_addresses", problems, host)):
                try:
                    ipaddress.ip_interface(str(candidate).strip())
                except ValueError:
                    problems.append(variable_problem(host, "sglang_pd_addresses", candidate, "not an IP address",
                                                     "list IP addresses (10.0.0.4 or 10.0.0.4/24)"))
        address = info["address"]
        try:
            ips = [ipaddress.ip_address(address)]
        except ValueError:
            resolved = _resolve(address, cache)
            if not resolved:
                problems.append(variable_problem(host, source, address, "this name does not resolve on the controller",
                                                 "write the IP address other nodes reach this host at in sglang_pd_service_address"))
                continue
            ips = [ipaddress.ip_address(a.split("%")[0]) for a in resolved]
        if distinct and any(ip.is_loopback or ip.is_unspecified for ip in ips):
            problems.append(variable_problem(host, source, address, "other nodes cannot reach a loopback or unspecified address "
                                             "(the router gives prefill URLs to decode nodes)",
                                             "write the host's cluster address in sglang_pd_service_address"))
            continue
        cidr = _get(one, "sglang_pd_cluster_cidr", problems, host)
        if cidr:
            try:
                network = ipaddress.ip_network(str(cidr), strict=False)
            except ValueError:
                problems.append(variable_problem(host, "sglang_pd_cluster_cidr", cidr, "not a network",
                                                 "write a CIDR such as 10.0.0.0/16"))
                continue
            if not any(ip in network for ip in ips):
                problems.append(variable_problem(host, source, address, f"outside sglang_pd_cluster_cidr {cidr}",
                                                 f"write an address inside {cidr}, or correct sglang_pd_cluster_cidr"))
    return merge_problems(problems)


def _as_list(value):
    if isinstance(value, Mapping):
        return [a for v in value.values() for a in _as_list(v)]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [] if value in (None, "") else [value]


# --------------------------------------------------------------------------- ports

def _port_problem(value):
    if isinstance(value, bool):
        return "not a port number"
    try:
        port = int(value)
    except (TypeError, ValueError):
        return "not a port number"
    if not 0 < port <= 65535:
        return "outside 1-65535"
    return None


def pd_check_ports(model):
    """Every port is valid and no two services use one port on one address."""
    problems = []
    used = {}

    def claim(host, address, port, what, variable):
        issue = _port_problem(port)
        if issue:
            problems.append(variable_problem(host, variable, port, issue, "write a port number between 1024 and 65535"))
            return
        key = (address, int(port))
        if key in used:
            other_host, other_what = used[key]
            problems.append(variable_problem(
                host, variable, port,
                f"port {port} on {address} is used by {what} and by {other_what} on {other_host}",
                "give each service on a host its own port (workers: port / bootstrap_port in "
                "sglang_pd_<mode>_workers; router: sglang_router_port, sglang_router_prometheus_port)"))
        else:
            used[key] = (host, what)

    for worker in model["workers"]:
        if not worker["serves_http"]:
            continue
        host, address, mode = worker["host"], worker["address"], worker["mode"]
        claim(host, address, worker["port"], f"{mode} worker {worker['name']}", f"port of {worker['name']} (sglang_pd_{mode}_port)")
        if mode == "prefill":
            claim(host, address, worker["bootstrap_port"], f"bootstrap server of {worker['name']}",
                  f"bootstrap port of {worker['name']} (sglang_pd_bootstrap_port)")
        if worker["nnodes"] > 1:
            claim(host, address, worker["dist_init_port"], f"dist-init port of {worker['name']}", "sglang_pd_dist_init_port")
        nccl = worker["launch"]["options"].get("nccl_port")
        if nccl:
            claim(host, address, nccl, f"NCCL port of {worker['name']}", "nccl_port in the worker options")
    for router in model["routers"]:
        options = router["launch"]["options"]
        claim(router["host"], router["address"], options.get("port"), "the router", "sglang_router_port")
        if options.get("prometheus_port"):
            claim(router["host"], router["address"], options["prometheus_port"], "the router's metrics",
                  "sglang_router_prometheus_port")
    return merge_problems(problems)


# --------------------------------------------------------------------------- GPUs

def _int_option(options, *names, default=1):
    for name in names:
        value = options.get(name)
        if value not in (None, "", False):
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return default


def pd_check_gpus(model, hostvars):
    """GPU subsets are valid and disjoint, and TP x DP x PP equals the GPUs a worker gets."""
    problems = []
    by_host = {}
    groups = {}
    for worker in model["workers"]:
        host, mode = worker["host"], worker["mode"]
        one = hostvars[host]
        role_vars = model["hosts"][host]["role_vars"]["sglang_worker"]
        validate = _get(one, "sglang_pd_validate_gpu_layout", problems, host, True)
        specs = _get(one, f"sglang_pd_{mode}_workers", problems, host) or []
        variable = f"sglang_pd_{mode}_workers[{worker['index']}].gpus" if specs else f"sglang_pd_{mode}_workers"
        raw = specs[worker["index"]].get("gpus") if specs and isinstance(specs[worker["index"]], Mapping) else None
        per_host = worker["gpus_per_host"]
        try:
            gpus = parse_gpus(raw)
        except ValueError as exc:
            problems.append(variable_problem(host, variable, raw, str(exc), 'write GPU ids as a list [0, 1, 2, 3] or a string "0,1,2,3"'))
            continue
        if worker["group"]:
            groups.setdefault((mode, worker["group"]), []).append(worker)
        if validate is False:
            continue
        ids = gpus if gpus is not None else list(range(per_host))
        bad = [g for g in ids if not 0 <= g < per_host]
        if bad:
            problems.append(variable_problem(host, variable, raw, f"GPU ids {bad} do not exist on a host with sglang_pd_gpus_per_host {per_host}",
                                             f"use ids 0 to {per_host - 1}, or correct sglang_pd_gpus_per_host"))
            continue
        if len(set(ids)) != len(ids):
            problems.append(variable_problem(host, variable, raw, "a GPU is listed twice", "list each GPU once"))
            continue
        if gpus and role_vars.get("sglang_worker_gpu_isolation") == "base_gpu_id" and ids != list(range(min(ids), min(ids) + len(ids))):
            problems.append(variable_problem(host, variable, raw, "with sglang_worker_gpu_isolation base_gpu_id a worker needs consecutive GPUs",
                                             "list consecutive ids (e.g. [4, 5, 6, 7]) or use sglang_worker_gpu_isolation: visible_devices"))
        for gpu in ids:
            other = by_host.setdefault(host, {}).get(gpu)
            if other:
                problems.append(variable_problem(host, variable, raw if raw is not None else "all GPUs",
                                                 f"GPU {gpu} is also given to {other}",
                                                 "give each worker on a host its own GPUs with gpus in sglang_pd_<mode>_workers"))
                break
            by_host[host][gpu] = f"{mode} worker {worker['name']}"
        options = worker["launch"]["options"]
        tp = _int_option(options, "tp_size", "tensor_parallel_size")
        dp = _int_option(options, "dp_size", "data_parallel_size")
        pp = _int_option(options, "pp_size", "pipeline_parallel_size")
        if None in (tp, dp, pp):
            problems.append(variable_problem(host, "sglang_worker_tp_size / dp_size / pp_size", [tp, dp, pp], "not integers",
                                             "write whole numbers"))
            continue
        dp_attention = options.get("enable_dp_attention") is True
        world = tp * pp * (1 if dp_attention else dp)
        given = len(ids) * worker["nnodes"]
        if world != given:
            formula = f"tp_size {tp} x pp_size {pp}" + ("" if dp_attention else f" x dp_size {dp}")
            gets = f"{len(ids)} GPUs" + (f" ({', '.join(str(g) for g in ids)})" if gpus else f" (all of the host's, sglang_pd_gpus_per_host {per_host})")
            if worker["nnodes"] > 1:
                gets += f" on each of {worker['nnodes']} nodes = {given}"
            problems.append(variable_problem(
                host, origin_of(worker["launch"], "tp_size"), tp,
                f"the {mode} worker {worker['name']} needs {formula} = {world} GPUs but gets {gets}",
                f"set tp_size (or dp_size / pp_size) so the product is {given}, or give the worker "
                f"{world // max(worker['nnodes'], 1)} GPUs per node with gpus in sglang_pd_{mode}_workers"))
        if dp_attention and (dp > tp or tp % dp):
            problems.append(variable_problem(host, "sglang_worker_dp_size", dp,
                                             f"with enable_dp_attention dp_size must divide tp_size {tp}",
                                             f"write a dp_size that divides {tp} (usually equal to it)"))
    for (mode, group), members in groups.items():
        first = members[0]
        for worker in members[1:]:
            for key in ("port", "bootstrap_port"):
                if worker[key] != first[key]:
                    problems.append(variable_problem(worker["host"], f"sglang_pd_{mode}_port" if key == "port" else "sglang_pd_bootstrap_port",
                                                     worker[key], f"the hosts of multi-node worker {group} must agree ({first['host']} has {first[key]})",
                                                     f"set the same value on every host of sglang_pd_worker_group {group}"))
            if (worker["gpus"] and len(worker["gpus"])) != (first["gpus"] and len(first["gpus"])):
                problems.append(variable_problem(worker["host"], f"sglang_pd_{mode}_workers", worker["gpus"],
                                                 f"the hosts of multi-node worker {group} must give it as many GPUs "
                                                 f"({first['host']}: {first['gpus'] or 'all'})",
                                                 "give every host of the group the same number of GPUs"))
    return merge_problems(problems)


# --------------------------------------------------------------------------- InfiniBand

def _ib_name_problems(names):
    return [n for n in names if not isinstance(n, str) or not IB_NAME_RE.match(n)]


def pd_check_ib_devices(model):
    """InfiniBand device names are well formed; per-GPU maps name GPUs the worker has."""
    problems = []
    for worker in model["workers"]:
        host, mode = worker["host"], worker["mode"]
        role_vars = model["hosts"][host]["role_vars"]["sglang_worker"]
        value = worker.get("ib_device") or role_vars.get("sglang_worker_ib_device")
        variable = f"ib_device in sglang_pd_{mode}_workers" if worker.get("ib_device") else "sglang_worker_ib_device"
        if value in (None, "", [], {}, "auto"):
            continue
        fix = ('write a list of device names such as [mlx5_ib0, mlx5_ib1], or a map of GPU id to devices such as '
               '{0: [mlx5_ib0], 1: [mlx5_ib1]}')
        if isinstance(value, str) and value.strip().startswith("{"):
            try:
                value = json.loads(value)
            except ValueError:
                problems.append(variable_problem(host, variable, value, "not valid JSON", fix))
                continue
        if isinstance(value, str):
            if value.startswith("/"):
                if not value.endswith(".json"):
                    problems.append(variable_problem(host, variable, value, "a path must name a JSON file of the per-GPU map", fix))
                continue
            bad = _ib_name_problems([v.strip() for v in value.split(",")])
            if bad:
                problems.append(variable_problem(host, variable, value, f"{', '.join(show_value(b) for b in bad)} is not a device name", fix))
        elif isinstance(value, (list, tuple)):
            bad = _ib_name_problems(list(value))
            if bad:
                problems.append(variable_problem(host, variable, value, f"{', '.join(show_value(b) for b in bad)} is not a device name", fix))
        elif isinstance(value, Mapping):
            isolation = role_vars.get("sglang_worker_gpu_isolation")
            gpus = worker["gpus"]
            if gpus and isolation == "base_gpu_id":
                valid = set(gpus)
            else:
                valid = set(range(len(gpus) if gpus else worker["gpus_per_host"]))
            for gpu, devices in value.items():
                if not str(gpu).isdigit() or int(gpu) not in valid:
                    problems.append(variable_problem(host, variable, value, f"GPU {show_value(gpu)} is not one of the worker's GPUs {sorted(valid)} "
                                                     "(keys are GPU ids as the worker sees them)", fix))
                    break
                names = devices if isinstance(devices, (list, tuple)) else str(devices).split(",")
                bad = _ib_name_problems([n.strip() if isinstance(n, str) else n for n in names])
                if bad:
                    problems.append(variable_problem(host, variable, value, f"{', '.join(show_value(b) for b in bad)} is not a device name", fix))
                    break
        else:
            problems.append(variable_problem(host, variable, value, "neither a list, a map nor a string", fix))
    return merge_problems(problems)


# --------------------------------------------------------------------------- flags

def load_flag_module(version):
    """The flag module (FLAGS, TYPES, DEFAULTS) of one SGLang version shipped in the collection, or None."""
    name = ALLOWLIST_MODULE.format(str(version).replace(".", "_"))
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def load_allowlist(version):
    """The flag table of one SGLang version shipped in the collection, or None."""
    module = load_flag_module(version)
    return module.FLAGS if module else None


def worker_sglang_version(hostvars_one):
    """The SGLang version a host's workers run (sglang_pd_sglang_version)."""
    return str(_get(hostvars_one, "sglang_pd_sglang_version", [], "", DEFAULT_SGLANG_VERSION) or DEFAULT_SGLANG_VERSION)


def _extra_flags(extra):
    table = {}
    if isinstance(extra, str):
        raise AnsibleFilterError(f"sglang_pd_sglang_extra_flags = {extra!r}: a string, not a list of flags; "
                                 f"write [{extra}] (a YAML list) or a map of flag to kind")
    if isinstance(extra, Mapping):
        items = extra.items()
    else:
        items = ((flag, "any") for flag in (extra or []))
    for flag, kind in items:
        flag = str(flag)
        if not flag.startswith("--"):
            flag = "--" + flag.replace("_", "-")
        table[flag] = (flag[2:].replace("-", "_"), kind if kind in ("switch", "value", "list", "optional") else "any", None, None)
    return table


def flag_value_problem(value, kind):
    """Why VALUE is not of KIND (``int`` or ``float`` from a flag module's TYPES), or None."""
    try:
        number = float(value)
    except ValueError:
        return f"not a number (read as {kind})"
    if kind == "int" and number != int(number):
        return "not a whole number"
    return None


def check_argv(argv, origins, flags, start=3, types=None, escape="sglang_pd_sglang_extra_flags"):
    """Problems of one command line against a flag table: [(origin, flag, value, problem, fix)].

    TYPES (dest -> int/float/str, from the flag module) refuses values of the wrong type;
    ESCAPE names the variable that admits flags the table lacks (None: there is none).
    """
    problems = []
    seen = {}
    index = start
    while index < len(argv):
        token, origin = str(argv[index]), origins[index] if index < len(origins) else ""
        index += 1
        if not token.startswith("--"):
            problems.append((origin, token, token, "a value without a flag", "put it after the flag it belongs to"))
            continue
        flag, _sep, inline = token.partition("=")
        values = [inline] if inline else []
        entry = flags.get(flag)
        if entry is None:
            candidates = sorted(flags)
            prefixed = [f for f in candidates if f.startswith(flag)]
            close = difflib.get_close_matches(flag, candidates, n=1)
            if prefixed:
                hint = f"write the whole flag {' or '.join(prefixed[:3])} (abbreviations are refused: they break when a release adds a flag)"
            elif close:
                hint = f"did you mean {close[0]}?" + (f" (or, if your SGLang build has {flag}, list it in {escape})" if escape else "")
            else:
                hint = "remove it" + (f", or add it to {escape} if your SGLang build has it" if escape else "")
            while index < len(argv) and not str(argv[index]).startswith("--"):
                values.append(str(argv[index]))
                index += 1
            problems.append((origin, flag, " ".join(values) or None, "no such flag", hint))
            continue
        dest, kind, choices, replacement = entry
        if kind != "switch" or inline:
            while index < len(argv) and not str(argv[index]).startswith("--") and (kind in ("list", "any") or not values):
                values.append(str(argv[index]))
                index += 1
        if kind == "switch" and index < len(argv) and not str(argv[index]).startswith("--"):
            stray = str(argv[index])
            index += 1
            fix = "write a YAML boolean (true to set the switch, false to leave it out)"
            if stray.lower() in STRING_BOOLEANS:
                fix = f"write {dest}: {'true' if stray.lower() in ('true', 'yes', 'on', '1', 'y') else 'false'} (unquoted)"
            problems.append((origin, flag, stray, "a switch, it takes no value (a string was given)", fix))
        elif kind == "value" and len(values) != 1:
            problems.append((origin, flag, None, "needs one value", "give it a value"))
        elif kind == "list" and not values:
            problems.append((origin, flag, None, "needs at least one value", "give it one value or a list"))
        if choices:
            allowed = [str(c) for c in choices]
            for value in values:
                if value not in allowed:
                    problems.append((origin, flag, value, "not a valid choice", f"write one of {', '.join(allowed)}{suggest(value, allowed)}"))
        kind_of_value = (types or {}).get(dest)
        if kind_of_value in ("int", "float") and not choices:
            for value in values:
                problem = flag_value_problem(value, kind_of_value)
                if problem:
                    example = "8" if kind_of_value == "int" else "0.85"
                    problems.append((origin, flag, value, problem, f"write a {'whole ' if kind_of_value == 'int' else ''}"
                                     f"number such as {example}, unquoted and without units"))
        if replacement is not None:
            instead = f"use {replacement}" if replacement else "remove it (it is ignored)"
            problems.append((origin, flag, values[0] if values else None, "deprecated", instead))
        if dest in seen and dest not in ("", None):
            first_flag, first_origin = seen[dest]
            problems.append((origin, flag, values[0] if values else None,
                             f"{first_flag} is already given by {first_origin}",
                             "set each option in one place only"))
        else:
            seen[dest] = (flag, origin)
    return problems


def pd_check_flags(model, hostvars):
    """Every worker flag exists in the pinned SGLang version, with a valid value."""
    problems = []
    tables = {}
    for worker in model["workers"]:
        host, mode = worker["host"], worker["mode"]
        one = hostvars[host]
        version = str(_get(one, "sglang_pd_sglang_version", problems, host, DEFAULT_SGLANG_VERSION) or DEFAULT_SGLANG_VERSION)
        if version not in tables:
            tables[version] = load_flag_module(version)
        table = tables[version].FLAGS if tables[version] else None
        if table is None:
            problems.append(variable_problem(host, "sglang_pd_sglang_version", version, "the collection ships no flag list for this version",
                                             f"run python scripts/gen_sglang_allowlist.py --version {version} and ship the result, "
                                             f"or write a shipped version such as {DEFAULT_SGLANG_VERSION}"))
            continue
        extra = _get(one, "sglang_pd_sglang_extra_flags", problems, host) or []
        flags = dict(table)
        try:
            flags.update(_extra_flags(extra))
        except AnsibleFilterError as exc:
            problems.append((host, exc.message))
            continue
        launch = worker["launch"]
        for key in launch["options"]:
            if str(key).startswith("-"):
                origin = origin_of(launch, key)
                problems.append(variable_problem(host, f"{origin}.{key}", launch["options"][key],
                                                 "an option's name is written as SGLang's ServerArgs field, not as its flag",
                                                 f"write {str(key).lstrip('-').replace('-', '_')} (the collection turns it into "
                                                 f"--{str(key).lstrip('-').replace('_', '-')})"))
            elif key in FIXED_WORKER_OPTIONS:
                origin = origin_of(launch, key)
                shown = REDACTED if SECRET_NAME.search(key) else launch["options"][key]
                problems.append(variable_problem(host, origin, {key: shown},
                                                 f"{key} is set by the collection from the inventory",
                                                 f"remove it and set {FIXED_WORKER_OPTIONS[key]}"))
        if mode == "prefill" and launch["options"].get("disaggregation_transfer_backend") == "fake":
            problems.append(variable_problem(host, origin_of(launch, "disaggregation_transfer_backend"), "fake",
                                             "SGLang refuses the fake transfer backend on prefill servers",
                                             "write mooncake (default), nixl, mori or mooncake_tcp"))
        given = Counter(str(token).split("=", maxsplit=1)[0] for token in launch["argv"])
        for index in range(launch["options_start"], len(launch["argv"])):
            flag = str(launch["argv"][index]).split("=", maxsplit=1)[0]
            fixed = flag[2:].replace("-", "_") if flag.startswith("--") else ""
            # Given twice (the collection's and the extra one): check_argv below names both places.
            if fixed in FIXED_WORKER_OPTIONS and str(launch["origins"][index]).endswith("extra_args") and given[flag] == 1:
                problems.append(variable_problem(host, launch["origins"][index], flag,
                                                 f"{flag} is set by the collection from the inventory (the router and the "
                                                 "other workers are told the same)",
                                                 f"remove it and set {FIXED_WORKER_OPTIONS[fixed]}"))
            if flag.startswith("--") and SECRET_NAME.search(flag):
                problems.append(variable_problem(host, launch["origins"][index], REDACTED,
                                                 f"{flag} on the command line ends up in the launch script, in ps and in logs",
                                                 "write sglang_worker_api_key / sglang_worker_admin_api_key instead (a root-only "
                                                 "file the worker reads in-process)"))
        for origin, flag, value, problem, fix in check_argv(launch["argv"], launch["origins"], flags, launch["options_start"],
                                                            tables[version].TYPES):
            if flag.startswith("---"):
                continue  # an option key written as a flag: reported above
            if SECRET_NAME.search(flag):
                value = REDACTED
            text = f"{flag}" + (f" {value}" if value not in (None, "") else "")
            problems.append((host, f"{origin or 'command line'}: {text}: {problem} (SGLang {version}, "
                                   f"{mode} worker {worker['name']}); {fix}"))
    return merge_problems(problems)


def origin_of(launch, key):
    """The variable an option of a worker came from."""
    origins = launch.get("option_origins") or {}
    if key in origins:
        return origins[key]
    flag = "--" + key.replace("_", "-")
    for token, origin in zip(launch["argv"], launch["origins"]):
        if token == flag:
            return origin
    return "sglang_worker_options"


def option_variable(launch, key):
    """The variable an option of a worker came from, down to the key of an options map."""
    origin = origin_of(launch, key)
    return f"{origin}.{key}" if origin.endswith("_options") else origin


# --------------------------------------------------------------------------- router

def pd_check_router(model):
    """Router options are valid, API keys are given safely, and it sees every worker."""
    problems = []
    prefills = {w["url"]: w for w in model["workers"] if w["mode"] == "prefill" and w["serves_http"]}
    decodes = {w["url"]: w for w in model["workers"] if w["mode"] == "decode" and w["serves_http"]}
    for worker in prefills.values():
        argv = worker["launch"]["argv"]
        given = [argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "--disaggregation-bootstrap-port"]
        if given != [str(worker["bootstrap_port"])]:
            problems.append(variable_problem(worker["host"], "sglang_worker_extra_args", given,
                                             f"prefill worker {worker['name']} would listen for bootstrap on {given}, "
                                             f"but the router is told {worker['bootstrap_port']}",
                                             "set bootstrap ports only with sglang_pd_bootstrap_port or bootstrap_port in sglang_pd_prefill_workers"))
    for router in model["routers"]:
        host, role_vars, launch = router["host"], router["role_vars"], router["launch"]
        prometheus = launch["options"].get("prometheus_host")
        if prometheus not in (None, ""):
            try:
                ipaddress.ip_address(str(prometheus))
            except ValueError:
                if role_vars.get("sglang_router_prometheus_host"):
                    problems.append(variable_problem(host, "sglang_router_prometheus_host", prometheus, "not an IP address",
                                                     "write the IP address the metrics listen on"))
                else:
                    problems.append(variable_problem(host, "sglang_router_prometheus_host", None,
                                                     f"the metrics would listen on the service address {prometheus}, which is not an IP address",
                                                     "write sglang_router_prometheus_host (an IP address of this host; 0.0.0.0 exposes "
                                                     "them on every interface), or set sglang_pd_service_address to an IP"))
        if not str(role_vars.get("sglang_router_api_key") or "").strip() \
                and role_vars.get("sglang_router_allow_unauthenticated") is not True:
            problems.append(variable_problem(host, "sglang_router_api_key", "", "empty: anyone who reaches the router could send "
                                             "requests and add or remove its workers (POST and DELETE /workers)",
                                             "set sglang_router_api_key (from a vault or a lookup, never in plain text), or "
                                             "sglang_router_allow_unauthenticated: true to run without a key knowingly"))
        options = role_vars.get("sglang_router_options") or {}
        for key in ("api_key", "control_plane_api_keys"):
            if key in options:
                problems.append(variable_problem(host, "sglang_router_options", {key: REDACTED},
                                                 "an API key given as an option ends up in the launch script and in logs",
                                                 f"write sglang_router_{key} instead (kept in a mode 0600 env file, never logged)"))
        for token in role_vars.get("sglang_router_extra_args") or []:
            if str(token).split("=", maxsplit=1)[0] in ("--api-key", "--control-plane-api-keys"):
                problems.append(variable_problem(host, "sglang_router_extra_args", REDACTED,
                                                 "an API key on the command line ends up in the launch script and in logs",
                                                 "write sglang_router_api_key / sglang_router_control_plane_api_keys instead"))
        keys = role_vars.get("sglang_router_control_plane_api_keys") or []
        if not isinstance(keys, list):
            keys = [keys]
        for index, key in enumerate(keys):
            shown = {k: (REDACTED if k == "key" else v) for k, v in key.items()} if isinstance(key, Mapping) else REDACTED
            if not isinstance(key, Mapping) or not all(str(key.get(k, "")).strip() for k in ("id", "name", "role", "key")):
                problems.append(variable_problem(host, f"sglang_router_control_plane_api_keys[{index}]", shown,
                                                 "each key needs id, name, role and key",
                                                 "write {id: ops, name: Operations, role: admin, key: \"{{ vault_router_admin_key }}\"}"))
            elif key["role"] not in ("admin", "user"):
                problems.append(variable_problem(host, f"sglang_router_control_plane_api_keys[{index}].role", key["role"],
                                                 "not a control-plane role", "write admin or user"))
            elif any(":" in str(key[k]) for k in ("id", "name", "role", "key")):
                problems.append(variable_problem(host, f"sglang_router_control_plane_api_keys[{index}]", shown,
                                                 "the router splits id:name:role:key on colons", "remove the colons"))
        if keys and first_admin_key(keys) is None:
            problems.append(variable_problem(host, "sglang_router_control_plane_api_keys", REDACTED,
                                             "with control-plane keys the router takes worker changes only from an admin key, "
                                             "and the collection registers and removes workers with the first one",
                                             "add a key with role admin"))
        problems += _worker_key_problems(model, host, role_vars.get("sglang_router_api_key"))
        argv = " ".join(launch["workers_env"].values()).split()
        told = {}
        for i, token in enumerate(argv):
            if token == "--prefill" and i + 2 < len(argv):
                told[argv[i + 1]] = argv[i + 2]
        listed_decodes = {argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "--decode"}
        for url, worker in prefills.items():
            if told.get(url) != str(worker["bootstrap_port"]):
                problems.append(variable_problem(host, "router --prefill", told.get(url), f"the router is not told prefill {url} "
                                                 f"with its bootstrap port {worker['bootstrap_port']}", "report this as a bug"))
        if set(decodes) != listed_decodes:
            problems.append(variable_problem(host, "router --decode", sorted(listed_decodes), f"the router must list the decode workers {sorted(decodes)}",
                                             "report this as a bug"))
    return merge_problems(problems)


def pd_check_firewall(model, groups, hostvars):
    """With the firewall on (the default), every PD host has the networks it admits, and SSH stays open."""
    problems = []
    model, hostvars = _plain(model), _plain(hostvars)
    # Reported by pd_check_build / pd_check_addresses: the firewall is not built then.
    unbuildable = bool(model["errors"]) or any(info["address_problem"] for info in model["hosts"].values())
    for host in model["hosts"]:
        one = hostvars[host]
        if _get(one, "sglang_firewall_enabled", problems, host, True) is False:
            continue
        missing = [name for name in ("sglang_pd_cluster_cidr", "sglang_pd_client_cidrs") if not _get(one, name, problems, host)]
        for name in missing:
            problems.append(variable_problem(host, name, None, "the firewall admits the service ports only from the cluster "
                                             "network (worker, bootstrap, dist-init and metrics ports) and the router port only "
                                             "from the client networks",
                                             "set sglang_pd_cluster_cidr (e.g. 10.0.0.0/16) and sglang_pd_client_cidrs (e.g. "
                                             "[10.1.0.0/16]) for every PD host, or sglang_firewall_enabled: false to leave "
                                             "the ports to your own firewall"))
        if missing:
            continue
        if unbuildable:
            continue
        try:
            pd_firewall(host, groups, hostvars, model["hosts"][host]["role_vars"].get("sglang_router"))
        except AnsibleFilterError as exc:
            problems.append((host, f"the firewall cannot be built: {exc.message}"))
    return merge_problems(problems)


def _worker_key_problems(model, router_host, router_key):
    """Each worker must want the router's key: the router forwards its clients' key to the workers."""
    problems = []
    if not router_key:
        return problems
    for worker in model["workers"]:
        worker_key = model["hosts"][worker["host"]]["role_vars"]["sglang_worker"].get("sglang_worker_api_key")
        if worker["serves_http"] and (worker_key or "") != router_key:
            problems.append(variable_problem(worker["host"], "sglang_worker_api_key", worker_key,
                                             f"not the key of the router on {router_host}: the router forwards its clients' "
                                             "key to the workers, so a worker with another key refuses every request, "
                                             "and one without a key serves anyone who reaches it",
                                             "leave sglang_worker_api_key unset (it follows sglang_router_api_key) and set "
                                             "sglang_router_api_key for every PD host (group_vars/all)"))
    return problems
