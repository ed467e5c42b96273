# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that turn the inventory into PD workers and launch command lines.

The roles, the dry-run render (playbooks/render.yml) and the preflight checks all use
these filters, so what is rendered and checked is what runs.

Everything here reads inventory variables only (``hostvars`` as the inventory and
extra vars define them), never gathered facts: a run with ``--limit`` sees the same
workers, addresses and ports as a full run.
"""
from __future__ import annotations

import ipaddress
import json
import posixpath
import re
import shlex
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import SECRET_MOUNT, WORKER_MODES, http_url, url_host


MODES = WORKER_MODES
# Production ports (seed deployment); each can be set per host or group in inventory.
DEFAULT_PORTS = {"prefill": 30100, "decode": 30200}
DEFAULT_BOOTSTRAP_PORT = 8998
DEFAULT_DIST_INIT_PORT = 20000
DEFAULT_ROUTER_PORT = 30000
DEFAULT_GPUS_PER_HOST = 8
REDACTED = "<redacted>"
WORKER_SPEC_KEYS = ("name", "port", "bootstrap_port", "gpus", "args", "env", "ib_device")

# Worker options that have their own role variable: (SGLang option, variable).
WORKER_OPTION_VARS = (
    ("host", "sglang_worker_host"),
    ("model_path", "sglang_worker_model_path"),
    ("served_model_name", "sglang_worker_served_model_name"),
    ("tp_size", "sglang_worker_tp_size"),
    ("dp_size", "sglang_worker_dp_size"),
    ("ep_size", "sglang_worker_ep_size"),
    ("pp_size", "sglang_worker_pp_size"),
    ("enable_dp_attention", "sglang_worker_enable_dp_attention"),
    ("page_size", "sglang_worker_page_size"),
    ("chunked_prefill_size", "sglang_worker_chunked_prefill_size"),
    ("mem_fraction_static", "sglang_worker_mem_fraction_static"),
    ("kv_cache_dtype", "sglang_worker_kv_cache_dtype"),
    ("attention_backend", "sglang_worker_attention_backend"),
    ("trust_remote_code", "sglang_worker_trust_remote_code"),
    ("disaggregation_transfer_backend", "sglang_worker_transfer_backend"),
)
# Options and arguments of one mode only.
WORKER_MODE_OPTIONS = {"prefill": "sglang_worker_prefill_options", "decode": "sglang_worker_decode_options"}
WORKER_MODE_EXTRA_ARGS = {"prefill": "sglang_worker_prefill_extra_args", "decode": "sglang_worker_decode_extra_args"}
# Options the collection sets from the inventory (ports, ranks, GPU base): never from
# option dicts, or the router and the worker would disagree.
FIXED_WORKER_OPTIONS = {
    "disaggregation_mode": "the inventory group (sglang_prefill / sglang_decode)",
    "port": "sglang_pd_<mode>_port, or port in sglang_pd_<mode>_workers",
    "disaggregation_bootstrap_port": "sglang_pd_bootstrap_port, or bootstrap_port in sglang_pd_prefill_workers",
    "base_gpu_id": "gpus in sglang_pd_<mode>_workers with sglang_worker_gpu_isolation: base_gpu_id",
    "dist_init_addr": "sglang_pd_worker_group (and sglang_pd_dist_init_port)",
    "nccl_init_addr": "sglang_pd_worker_group (and sglang_pd_dist_init_port)",
    "nnodes": "sglang_pd_worker_group",
    "node_rank": "sglang_pd_worker_group",
    "api_key": "sglang_worker_api_key (kept in the worker's secret file, out of every command line)",
    "admin_api_key": "sglang_worker_admin_api_key (kept in the worker's secret file, out of every command line)",
}
# Environment groups of a worker, merged in this order (later wins).
# Set in every container the roles start unless sglang_worker_hub_offline /
# sglang_router_hub_offline is false: nothing in a fleet downloads from a model hub.
HUB_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
WORKER_ENV_VARS = ("sglang_worker_rocm_env", "sglang_worker_nccl_env", "sglang_worker_mooncake_env",
                   "sglang_worker_pd_env", "sglang_worker_extra_env")

# Router options that have their own role variable: (router option, variable).
ROUTER_OPTION_VARS = tuple((name[len("sglang_router_"):], name) for name in (
    "sglang_router_policy", "sglang_router_prefill_policy", "sglang_router_decode_policy",
    "sglang_router_host", "sglang_router_port", "sglang_router_prometheus_host", "sglang_router_prometheus_port",
    "sglang_router_request_timeout_secs", "sglang_router_worker_startup_timeout_secs",
    "sglang_router_health_check_endpoint", "sglang_router_health_check_interval_secs",
    "sglang_router_health_check_timeout_secs", "sglang_router_health_failure_threshold",
    "sglang_router_health_success_threshold", "sglang_router_retry_max_retries",
    "sglang_router_retry_initial_backoff_ms", "sglang_router_retry_max_backoff_ms",
    "sglang_router_disable_retries", "sglang_router_cb_failure_threshold", "sglang_router_cb_success_threshold",
    "sglang_router_cb_timeout_duration_secs", "sglang_router_cb_window_duration_secs",
    "sglang_router_disable_circuit_breaker", "sglang_router_log_level", "sglang_router_tokenizer_path",
))
# A service's secrets are mounted at SECRET_MOUNT (module_utils/_layout.py; read-only, from a
# root-only file): the launcher below reads them in-process, so they are in no argv,
# environment or docker inspect.
# python -c LAUNCHER MODULE SECRET_FILE|- ARGS...: runs MODULE as `python -m` would, with the
# file's "env" added to os.environ and ARGS, the router's workers (SGLANG_PD_ROUTER_WORKERS,
# when set) and the file's "args" appended to sys.argv, all in-process: /proc/<pid>/cmdline
# and the container's configuration never hold them.
PY_LAUNCHER = (
    "import json,os,runpy,sys;m,f=sys.argv[1],sys.argv[2];"
    "s=json.load(open(f)) if f!='-' else {};os.environ.update(s.get('env',{}));"
    "sys.argv=[m]+sys.argv[3:]+os.environ.get('SGLANG_PD_ROUTER_WORKERS','').split()+s.get('args',[]);"
    "runpy.run_module(m,run_name='__main__',alter_sys=True)")
# Index of the first option in a launcher command line: python -c LAUNCHER MODULE SECRET_FILE|-.
LAUNCH_OPTIONS_START = 5
# A name that says it holds a secret (a variable, an environment variable), misspelt ones
# included: its value is never shown, and in a container's environment it moves into the
# service's secret file.
SECRET_NAME = re.compile(r"key|token|pas+w|pwd|secret|credential|auth", re.IGNORECASE)
# The router's static membership (--prefill URL PORT ... --decode URL ...), in an env file of
# its own so that a scale operation rewrites it from the plan without touching the command.
ROUTER_WORKERS_ENV = "SGLANG_PD_ROUTER_WORKERS"
# The router's generations (sglang_router_generation): the module each is started as. The
# router left the SGLang repository as sglang-router (its last release 0.3.2), then became
# SMG (PyPI smg). "auto" takes the generation the image's router probe found (tasks/flags.yml),
# sglang-router while it is unknown (the render).
# Each router generation's Python package, the module that starts it, and the files of the
# package a unified build compares with the cache-aware image's (unified_image_compare_with_ca).
ROUTER_PACKAGES = {"sglang-router": "sglang_router", "smg": "smg"}
ROUTER_LAUNCH_MODULES = {generation: f"{package}.launch_router" for generation, package in ROUTER_PACKAGES.items()}
ROUTER_PACKAGE_FILES = {
    "sglang-router": ("router.py", "launch_router.py", "mini_lb.py", "router_args.py", "sglang_router_rs.abi3.so"),
    "smg": ("router.py", "launch_router.py", "router_args.py", "smg_rs.abi3.so"),
}
ROUTER_GENERATION_DEFAULT = "sglang-router"
# The line the router probe prints before the router's --help (roles/sglang_router/tasks/flags.yml).
ROUTER_GENERATION_MARK = "sglang-pd-router-generation:"


def _ip(value):
    """The IP address in ``value`` (``10.0.0.4`` or ``10.0.0.4/24``), or None."""
    try:
        return ipaddress.ip_interface(str(value).strip()).ip
    except ValueError:
        return None


def address_candidates(hostvars_one):
    """Addresses listed in inventory for a host (``sglang_pd_addresses``), interface first."""
    listed = hostvars_one.get("sglang_pd_addresses")
    interface = hostvars_one.get("sglang_pd_service_interface")
    if isinstance(listed, Mapping):
        if interface:
            values = listed.get(interface) or []
        else:
            values = [a for v in listed.values() for a in (v if isinstance(v, (list, tuple)) else [v])]
    else:
        values = listed or []
    if isinstance(values, str):
        values = [values]
    return list(values)


def resolve_service_address(hostvars_one, host):
    """Return (address, source, problem) for one host, from inventory variables only.

    Order: ``sglang_pd_service_address``; else the first address of
    ``sglang_pd_addresses`` (of ``sglang_pd_service_interface`` when set) that lies in
    ``sglang_pd_cluster_cidr`` (when set); else ``ansible_host``; else the host name.
    """
    explicit = hostvars_one.get("sglang_pd_service_address")
    if explicit:
        return str(explicit), "sglang_pd_service_address", None
    interface = hostvars_one.get("sglang_pd_service_interface")
    listed = hostvars_one.get("sglang_pd_addresses")
    if interface or listed:
        source = "sglang_pd_addresses" + (f"[{interface}]" if interface else "")
        cidr = hostvars_one.get("sglang_pd_cluster_cidr")
        network = None
        if cidr:
            try:
                network = ipaddress.ip_network(str(cidr), strict=False)
            except ValueError:
                return None, source, f"sglang_pd_cluster_cidr {cidr!r} is not a network"
        for candidate in address_candidates(hostvars_one):
            ip = _ip(candidate)
            if ip is not None and (network is None or ip in network):
                return str(ip), source, None
        where = f" inside {cidr}" if cidr else ""
        return None, source, f"no address{where} in {source}"
    ansible_host = hostvars_one.get("ansible_host")
    if ansible_host:
        return str(ansible_host), "ansible_host", None
    return host, "inventory_hostname", None


def service_address(hostvars_one, host: str) -> str:
    """The address other nodes reach this host at: inventory first, never gathered facts."""
    address, source, problem = resolve_service_address(hostvars_one, host)
    if problem:
        raise AnsibleFilterError(
            f"{host}: {problem}; set sglang_pd_service_address, or list the host's addresses in "
            f"sglang_pd_addresses (source: {source})")
    return address


def parse_gpus(value):
    """GPU ids from ``"0,1,2,3"``, ``[0, 1, 2, 3]`` or ``"0-3"``; None when not given.

    Raises ValueError on anything else.
    """
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, bool):
        raise ValueError("a boolean is not a GPU list")
    if isinstance(value, str):
        ids = []
        for part in value.split(","):
            part = part.strip()
            match = re.fullmatch(r"(\d+)-(\d+)", part)
            if match and int(match.group(1)) > int(match.group(2)):
                raise ValueError(f"{part!r} is a reversed range: write {match.group(2)}-{match.group(1)}")
            if match:
                ids.extend(range(int(match.group(1)), int(match.group(2)) + 1))
            elif part.isdigit():
                ids.append(int(part))
            else:
                raise ValueError(f"{part!r} is not a GPU id")
        return ids
    if isinstance(value, (list, tuple)):
        ids = []
        for part in value:
            if isinstance(part, bool) or not str(part).strip().isdigit():
                raise ValueError(f"{part!r} is not a GPU id")
            ids.append(int(part))
        return ids
    raise ValueError(f"{value!r} is neither a list nor a comma-separated string of GPU ids")


def _int(value, default):
    if value is None or value == "":
        return default
    return int(value)


def pd_workers(hosts, hostvars, mode, ranks="serving"):
    """Every worker of one mode on the given hosts, from inventory variables only.

    A host runs one worker per entry of ``sglang_pd_<mode>_workers`` (a list of
    dicts with optional ``name``, ``port``, ``bootstrap_port``, ``gpus``, ``args``,
    ``env``, ``ib_device``); without that list it runs one worker on
    ``sglang_pd_<mode>_port`` (30100 for prefill, 30200 for decode) and
    ``sglang_pd_bootstrap_port`` (8998).

    Hosts of the mode's group that share ``sglang_pd_worker_group`` run ONE worker
    that spans them: node rank is the host's position in the group, and
    ``--dist-init-addr`` is the first host's service address with
    ``sglang_pd_dist_init_port`` (20000). Only rank 0 serves HTTP, so only rank 0 is
    returned unless ``ranks='all'`` (what the worker role runs on each host).
    """
    if mode not in MODES:
        raise AnsibleFilterError(f"mode must be one of {MODES}, got {mode!r}")
    if ranks not in ("serving", "all"):
        raise AnsibleFilterError(f"ranks must be 'serving' or 'all', got {ranks!r}")
    workers = []
    for host in hosts:
        one = hostvars[host]
        address = service_address(one, host)
        specs = one.get(f"sglang_pd_{mode}_workers") or [{}]
        group = one.get("sglang_pd_worker_group") or None
        default_port = _int(one.get(f"sglang_pd_{mode}_port"), DEFAULT_PORTS[mode])
        default_bootstrap_port = _int(one.get("sglang_pd_bootstrap_port"), DEFAULT_BOOTSTRAP_PORT)
        for index, spec in enumerate(specs):
            spec = spec or {}
            port = _int(spec.get("port"), default_port + index)
            bootstrap = _int(spec.get("bootstrap_port"), default_bootstrap_port + index)
            name = spec.get("name") or (f"sglang-{mode}" if index == 0 else f"sglang-{mode}-{index}")
            try:
                gpus = parse_gpus(spec.get("gpus"))
            except ValueError:
                gpus = None
            workers.append({
                "host": host,
                "name": name,
                "mode": mode,
                "index": index,
                "address": address,
                # Where the server listens: its service address, all interfaces only when asked.
                "listen": "0.0.0.0" if one.get("sglang_pd_listen_all") is True else address,
                "port": port,
                "bootstrap_port": bootstrap if mode == "prefill" else None,
                "url": http_url(address, port),
                "gpus": gpus,
                "gpus_per_host": _int(one.get("sglang_pd_gpus_per_host"), DEFAULT_GPUS_PER_HOST),
                "args": dict(spec.get("args") or {}),
                "env": dict(spec.get("env") or {}),
                "ib_device": spec.get("ib_device"),
                "group": group if len(specs) == 1 else None,
                "dist_init_port": _int(one.get("sglang_pd_dist_init_port"), DEFAULT_DIST_INIT_PORT),
                "nnodes": 1,
                "node_rank": 0,
                "dist_init_addr": None,
                "serves_http": True,
            })
    groups = {}
    for worker in workers:
        if worker["group"]:
            groups.setdefault(worker["group"], []).append(worker)
    for members in groups.values():
        first = members[0]
        for rank, worker in enumerate(members):
            worker.update({
                "nnodes": len(members),
                "node_rank": rank,
                "dist_init_addr": f"{url_host(first['address'])}:{first['dist_init_port']}",
                "serves_http": rank == 0,
            })
    if ranks == "serving":
        return [w for w in workers if w["serves_http"]]
    return workers


def _flag(name: str) -> str:
    return "--" + str(name).replace("_", "-")


def cli_options(options) -> list:
    """Turn a dict of snake_case options into command-line flags.

    ``True`` gives a bare flag, ``False``/``None``/``""`` omit it, a list repeats values
    after one flag, a dict is passed as JSON, anything else as its string form.
    """
    argv = []
    for key, value in (options or {}).items():
        argv.extend(_cli_option(key, value))
    return argv


def _cli_option(key, value):
    if value is None or value is False or value == "":
        return []
    if value is True:
        return [_flag(key)]
    if isinstance(value, (list, tuple)):
        return [_flag(key)] + [str(v) for v in value]
    if isinstance(value, Mapping):
        return [_flag(key), json.dumps(dict(value), sort_keys=True, separators=(",", ":"))]
    return [_flag(key), str(value)]


def ib_device_arg(value):
    """Render InfiniBand devices as ``--disaggregation-ib-device`` expects them.

    A list gives a comma list (``mlx5_0,mlx5_1``); a dict of GPU id to device(s) gives
    the per-GPU JSON map (``{"0":"mlx5_0,mlx5_1","1":"mlx5_2"}``); a string (one
    device, a comma list, a JSON map or the path of a JSON file) is passed as is.
    """
    if value is None or value == "" or value == [] or value == {}:
        return None
    if isinstance(value, Mapping):
        def _key(item):
            key = str(item[0])
            return (0, int(key)) if key.isdigit() else (1, key)
        rendered = {}
        for gpu, devices in sorted(value.items(), key=_key):
            rendered[str(gpu)] = ",".join(str(d) for d in devices) if isinstance(devices, (list, tuple)) else str(devices)
        return json.dumps(rendered, separators=(",", ":"))
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def worker_gpu_keys(worker, role_vars):
    """(key, physical GPU) of each GPU a worker uses, keyed as its per-GPU IB map counts them.

    With ``visible_devices`` isolation a worker given ``gpus`` sees them as 0..n-1; with
    ``base_gpu_id`` (or without ``gpus``) the keys are the node's GPU ordinals.
    """
    gpus = worker.get("gpus")
    if not gpus:
        return [(gpu, gpu) for gpu in range(worker.get("gpus_per_host") or DEFAULT_GPUS_PER_HOST)]
    if _value(role_vars, "sglang_worker_gpu_isolation", "visible_devices") == "base_gpu_id":
        return [(gpu, gpu) for gpu in gpus]
    return list(enumerate(gpus))


def auto_ib_device_map(worker, role_vars):
    """``sglang_worker_ib_device: auto``: GPU key -> its nearest NIC, from the node's pairing.

    The pairing is ``sglang_worker_fabric.pairs`` (gpu_nic_affinity over the node's sysfs,
    read by the role's tasks/fabric.yml). None when it is not known (the render without
    node facts) or the node has no RDMA device: SGLang's Mooncake then picks the devices.
    """
    pairs = (role_vars.get("sglang_worker_fabric") or {}).get("pairs") or []
    nic_of = dict((pair["gpu"], pair["nic"]) for pair in pairs)
    mapped = dict((key, nic_of[gpu]) for key, gpu in worker_gpu_keys(worker, role_vars) if gpu in nic_of)
    return mapped or None


def worker_ib_device(worker, role_vars):
    """The ``--disaggregation-ib-device`` setting of one worker and the variable it comes from.

    A worker's own ``ib_device`` wins over ``sglang_worker_ib_device``; ``auto`` is resolved
    to the per-GPU map of the node's GPU-NIC pairing (auto_ib_device_map).
    """
    if worker.get("ib_device"):
        value, origin = worker["ib_device"], "ib_device in sglang_pd_%s_workers" % worker["mode"]
    else:
        value, origin = role_vars.get("sglang_worker_ib_device"), "sglang_worker_ib_device"
    if value == "auto":
        return auto_ib_device_map(worker, role_vars), origin + ": auto (the node's GPU-NIC pairing)"
    return value, origin


def worker_nics(worker, role_vars):
    """The RDMA devices a worker's ``--disaggregation-ib-device`` names; None when not known.

    Unknown: unset (Mooncake picks), or a JSON string or file the collection does not read.
    """
    value = worker_ib_device(worker, role_vars)[0]
    if isinstance(value, Mapping):
        names = []
        for devices in value.values():
            names.extend(devices if isinstance(devices, (list, tuple)) else str(devices).split(","))
    elif isinstance(value, (list, tuple)):
        names = list(value)
    elif isinstance(value, str) and value and not value.lstrip().startswith(("{", "/")):
        names = value.split(",")
    else:
        return None
    return sorted(set(str(name).strip() for name in names))


def worker_gid_index(worker, role_vars):
    """``MC_GID_INDEX`` for a worker: the routable RoCE v2 GID index its NICs share, else None.

    The indexes come from ``sglang_worker_fabric.gid_index`` (NIC -> index, RoCE ports with a
    RoCE v2 GID in sglang_pd_cluster_cidr); NICs that disagree give None (the fabric check
    refuses that map).
    """
    known = (role_vars.get("sglang_worker_fabric") or {}).get("gid_index") or {}
    indexes = set(known.get(nic) for nic in worker_nics(worker, role_vars) or [])
    indexes.discard(None)
    return indexes.pop() if len(indexes) == 1 else None


def _value(role_vars, name, default=None):
    """The variable NAME of ROLE_VARS, DEFAULT when unset or null."""
    value = role_vars.get(name)
    return default if value is None else value


def worker_options(worker, role_vars):
    """The merged SGLang options of one worker and, per option, the variable it came from.

    Later sources win: the dedicated variables, ``sglang_worker_cp_options``,
    ``sglang_worker_options``, ``sglang_worker_<mode>_options``, then the worker's own
    ``args`` in ``sglang_pd_<mode>_workers``.
    """
    options, origins = {}, {}
    for option, name in WORKER_OPTION_VARS:
        options[option] = role_vars.get(name)
        origins[option] = name
    if options.get("host") in (None, ""):
        options["host"] = worker.get("listen") or worker["address"]
        origins["host"] = "sglang_pd_service_address (sglang_pd_listen_all: true for 0.0.0.0)"
    ib_device, origins["disaggregation_ib_device"] = worker_ib_device(worker, role_vars)
    options["disaggregation_ib_device"] = ib_device_arg(ib_device)
    sources = (
        ("sglang_worker_cp_options", role_vars.get("sglang_worker_cp_options")),
        ("sglang_worker_options", role_vars.get("sglang_worker_options")),
        (WORKER_MODE_OPTIONS[worker["mode"]], role_vars.get(WORKER_MODE_OPTIONS[worker["mode"]])),
        (f"args in sglang_pd_{worker['mode']}_workers", worker.get("args")),
    )
    for origin, values in sources:
        for key, value in (values or {}).items():
            options[str(key)] = value
            origins[str(key)] = origin
    return options, origins


def worker_launch(worker, role_vars):
    """Command line and environment of one worker, built from the sglang_worker_* variables.

    ``role_vars`` maps variable names (``sglang_worker_tp_size``, …) to values: the role
    passes its own variables, the preflight the inventory's over the role defaults.
    Returns ``argv``, ``origins`` (the variable behind each argv item), ``env``,
    ``options`` and ``option_origins`` (the variable behind each option).
    """
    mode = worker["mode"]
    python = _value(role_vars, "sglang_worker_python", "python")
    secret_args = []
    for flag, name in (("--api-key", "sglang_worker_api_key"), ("--admin-api-key", "sglang_worker_admin_api_key")):
        if role_vars.get(name):
            secret_args += [flag, str(role_vars[name])]
    env, secret_env = split_secret_env(worker_env(worker, role_vars), role_vars.get("sglang_worker_secret_env"))
    secret = service_secret(secret_args, secret_env)
    argv = launcher_argv(python, "sglang.launch_server", secret)
    argv += ["--disaggregation-mode", mode, "--port", str(worker["port"])]
    origins = ["sglang_worker_python", "", "", "", "the worker's secret file",
               "inventory group sglang_" + mode, "inventory group sglang_" + mode,
               f"sglang_pd_{mode}_port", f"sglang_pd_{mode}_port"]

    def add(items, origin):
        argv.extend(items)
        origins.extend([origin] * len(items))

    if mode == "prefill":
        add(["--disaggregation-bootstrap-port", str(worker["bootstrap_port"])], "sglang_pd_bootstrap_port")
    gpus = worker.get("gpus")
    isolation = _value(role_vars, "sglang_worker_gpu_isolation", "visible_devices")
    if gpus and isolation == "base_gpu_id":
        add(["--base-gpu-id", str(min(gpus))], f"gpus in sglang_pd_{mode}_workers")
    if worker.get("nnodes", 1) > 1:
        add(["--dist-init-addr", worker["dist_init_addr"], "--nnodes", str(worker["nnodes"]),
             "--node-rank", str(worker["node_rank"])], "sglang_pd_worker_group")
    options, option_origins = worker_options(worker, role_vars)
    for key, value in options.items():
        if key in FIXED_WORKER_OPTIONS:
            continue
        add(_cli_option(key, value), option_origins[key])
    for name in ("sglang_worker_extra_args", WORKER_MODE_EXTRA_ARGS[mode]):
        add([str(a) for a in (role_vars.get(name) or [])], name)
    return {
        "argv": argv,
        "origins": origins,
        "options_start": LAUNCH_OPTIONS_START,
        "env": env,
        "options": options,
        "option_origins": option_origins,
        "secret": secret,
        "secret_redacted": redact_secret(secret),
    }


def split_secret_env(env, secret_names=None):
    """``(plain, secret)``: the variables named in SECRET_NAMES or whose name says secret (SECRET_NAME) go apart."""
    named = set(secret_names or [])
    plain, secret = {}, {}
    for key, value in (env or {}).items():
        (secret if key in named or SECRET_NAME.search(key) else plain)[key] = value
    return plain, secret


def service_secret(args, env):
    """What a service's root-only secret file holds: ``{"args": [...], "env": {...}}`` (empty parts left out)."""
    secret = {}
    if args:
        secret["args"] = list(args)
    if env:
        secret["env"] = dict(env)
    return secret


def redact_secret(secret):
    """A secret file's content as it may be shown: flags and variable names kept, values redacted."""
    shown = {}
    if secret.get("args"):
        shown["args"] = [a if str(a).startswith("--") else REDACTED for a in secret["args"]]
    if secret.get("env"):
        shown["env"] = redact(secret["env"])
    return shown


def secret_volume(secret_file, secret):
    """The read-only mount of a service's secret file at SECRET_MOUNT, as a list (empty without secrets)."""
    return [f"{secret_file}:{SECRET_MOUNT}:ro"] if secret else []


def launcher_argv(python, module, secret):
    """``python -c PY_LAUNCHER MODULE SECRET_MOUNT|-``: MODULE's options follow."""
    return [python, "-c", PY_LAUNCHER, module, SECRET_MOUNT if secret else "-"]


def _env_value(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def worker_env(worker, role_vars):
    """Container environment of one worker: hub offline, ROCm/AITER, RCCL, Mooncake, PD, extra, own.

    With ``sglang_worker_gpu_isolation: visible_devices`` (default) a worker given
    ``gpus`` also gets ``HIP_VISIBLE_DEVICES``. A value of null removes a variable.
    """
    env = dict(HUB_OFFLINE_ENV) if _value(role_vars, "sglang_worker_hub_offline", True) else {}
    for name in WORKER_ENV_VARS:
        env.update(role_vars.get(name) or {})
    gid_index = worker_gid_index(worker, role_vars)
    if gid_index is not None and "MC_GID_INDEX" not in env and "MC_GID_INDEX" not in (worker.get("env") or {}):
        # Mooncake (config.cpp) reads the GID index from MC_GID_INDEX; unset, it may take a link-local GID.
        env["MC_GID_INDEX"] = gid_index
    env.update(worker.get("env") or {})
    isolation = _value(role_vars, "sglang_worker_gpu_isolation", "visible_devices")
    if worker.get("gpus") and isolation == "visible_devices":
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(g) for g in worker["gpus"])
    return {str(k): _env_value(v) for k, v in env.items() if v is not None}


def router_membership(prefills, decodes):
    """The router's worker arguments: ``--prefill URL BOOTSTRAP_PORT`` ..., ``--decode URL`` ..."""
    argv = []
    for worker in prefills:
        argv += ["--prefill", worker["url"], str(worker["bootstrap_port"])]
    for worker in decodes:
        argv += ["--decode", worker["url"]]
    return argv


def router_worker_spec(worker):
    """A ``pd_workers`` item as the router's worker API takes it: ``{url, worker_type, bootstrap_port}``."""
    try:
        mode, url = worker["mode"], worker["url"]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"expected a worker with 'mode' and 'url' (pd_workers filter), got {worker!r}") from exc
    spec = {"url": url, "worker_type": mode}
    if mode == "prefill" and worker.get("bootstrap_port") is not None:
        spec["bootstrap_port"] = int(worker["bootstrap_port"])
    return spec


def router_workers_env(prefills, decodes):
    """The env file content that gives the router its workers at start (``ROUTER_WORKERS_ENV``)."""
    return {ROUTER_WORKERS_ENV: " ".join(router_membership(prefills, decodes))}


def router_port(role_vars, hostvars_one=None):
    """The router's port: sglang_router_port, else sglang_pd_router_port, else 30000."""
    for value in (role_vars.get("sglang_router_port"), (hostvars_one or {}).get("sglang_pd_router_port")):
        if value not in (None, ""):
            return int(value)
    return DEFAULT_ROUTER_PORT


def router_url(hostvars_one, host):
    """The URL of the router on HOST, from the inventory: its service address and router port."""
    return http_url(service_address(hostvars_one, host), router_port(hostvars_one, hostvars_one))


def router_admin_key(hostvars_one):
    """The key the collection changes a router's workers with, from that router host's variables.

    With control-plane keys the router takes worker changes (and, for sglang-router, worker
    lists) only from one of them, with the admin role: the first such key of
    sglang_router_control_plane_api_keys; without them sglang_router_api_key ("" for none).
    """
    admin = first_admin_key(hostvars_one.get("sglang_router_control_plane_api_keys"))
    return str(admin["key"]) if admin else str(hostvars_one.get("sglang_router_api_key") or "")


def first_admin_key(control_plane_keys):
    """The first entry of sglang_router_control_plane_api_keys with the admin role and a key, or None."""
    for key in control_plane_keys or []:
        if isinstance(key, Mapping) and key.get("role") == "admin" and key.get("key"):
            return key
    return None


def router_metrics_url(hostvars_one, host, router_defaults=None):
    """The URL of the Prometheus endpoint of the router on HOST, or "" when it exports none.

    Its port is sglang_router_prometheus_port (ROUTER_DEFAULTS: the sglang_router role's
    defaults, read as data); its address sglang_router_prometheus_host unless that is a
    wildcard, else the host's service address.
    """
    port = hostvars_one.get("sglang_router_prometheus_port", (router_defaults or {}).get("sglang_router_prometheus_port"))
    if port in (None, "", 0):
        return ""
    address = hostvars_one.get("sglang_router_prometheus_host")
    if address in (None, "", "0.0.0.0", "::"):
        address = service_address(hostvars_one, host)
    return http_url(address, port)


def router_launch(prefills, decodes, role_vars, address, supported=None, listen_all=False):
    """Command line, environment, membership and secrets of the router, from the sglang_router_* variables.

    ``supported`` is the router's flag list as detected from the image (``{"flags":
    [...]}``) or None when unknown (render): options whose flag the router lacks are
    left out and listed in ``dropped``. The workers go into ``workers_env`` (an env file) and
    the API keys into ``secret`` (a root-only file mounted at ``SECRET_MOUNT``); the launcher
    (``PY_LAUNCHER``) appends both to the router's arguments in-process, so neither is an
    argument of any process, and the keys are not in the container's environment either.
    """
    options = {}
    for option, name in ROUTER_OPTION_VARS:
        options[option] = role_vars.get(name)
    options["port"] = router_port(role_vars)
    if options.get("host") in (None, ""):
        options["host"] = "0.0.0.0" if listen_all is True else address
    if not options.get("prometheus_host") and options.get("prometheus_port"):
        options["prometheus_host"] = address
    options.update(role_vars.get("sglang_router_options") or {})
    flags = None
    if supported and supported.get("flags"):
        flags = set(supported["flags"])
    dropped = []
    if flags is not None:
        for key in list(options):
            if options[key] not in (None, False, "") and _flag(key) not in flags:
                dropped.append(_flag(key))
                del options[key]
    python = _value(role_vars, "sglang_router_python", "python")
    generation = router_generation(role_vars, supported)
    secret_args, missing = [], []
    api_key = role_vars.get("sglang_router_api_key")
    if api_key:
        secret_args += ["--api-key", str(api_key)]
    control_plane = role_vars.get("sglang_router_control_plane_api_keys") or []
    if control_plane:
        secret_args.append("--control-plane-api-keys")
        secret_args += [":".join(str(key.get(k, "")) for k in ("id", "name", "role", "key")) for key in control_plane]
    if flags is not None:
        missing = [f for f in secret_args if f in ("--api-key", "--control-plane-api-keys") and f not in flags]
    env, secret_env = split_secret_env(router_env(role_vars), role_vars.get("sglang_router_secret_env"))
    secret = service_secret(secret_args, secret_env)
    argv = launcher_argv(python, ROUTER_LAUNCH_MODULES[generation], secret) + ["--pd-disaggregation"]
    argv += cli_options(options) + [str(a) for a in (role_vars.get("sglang_router_extra_args") or [])]
    return {
        "argv": argv,
        "generation": generation,
        "workers": router_membership(prefills, decodes),
        "workers_env": router_workers_env(prefills, decodes),
        "options": options,
        "dropped": dropped,
        "missing_secret_flags": missing,
        "env": env,
        "secret": secret,
        "secret_redacted": redact_secret(secret),
    }


def router_generation(role_vars, supported=None):
    """The router generation to start: sglang_router_generation, else what the image probe found."""
    generation = _value(role_vars, "sglang_router_generation", "auto")
    if generation in ROUTER_LAUNCH_MODULES:
        return generation
    found = (supported or {}).get("generation")
    return found if found in ROUTER_LAUNCH_MODULES else ROUTER_GENERATION_DEFAULT


def router_package_files(package_path):
    """The files of the router package at PACKAGE_PATH that identify its build, by the package's name."""
    name = posixpath.basename(str(package_path).rstrip("/"))
    for generation, package in ROUTER_PACKAGES.items():
        if name == package:
            return list(ROUTER_PACKAGE_FILES[generation])
    raise AnsibleFilterError(f"{package_path}: not a router package this collection knows ("
                             f"{', '.join(ROUTER_PACKAGES.values())}); set unified_image_compare_with_ca to its files")


def router_probe_script(generation="auto"):
    """Python that prints the router's generation, then its ``--help``, in the image.

    With GENERATION ``auto`` the image decides: SMG when its ``smg`` package is importable,
    else sglang-router.
    """
    if generation in ROUTER_LAUNCH_MODULES:
        pick = repr(generation)
    else:
        pick = "'smg' if importlib.util.find_spec('smg') else 'sglang-router'"
    modules = repr(ROUTER_LAUNCH_MODULES)
    return (f"import importlib.util,runpy,sys;g={pick};print({ROUTER_GENERATION_MARK!r},g,flush=True);"
            f"m={modules}[g];sys.argv=[m,'--help'];runpy.run_module(m,run_name='__main__',alter_sys=True)")


def router_env(role_vars):
    """Container environment of the router: hub offline unless turned off, then sglang_router_env."""
    env = dict(HUB_OFFLINE_ENV) if _value(role_vars, "sglang_router_hub_offline", True) else {}
    env.update(role_vars.get("sglang_router_env") or {})
    return {str(k): _env_value(v) for k, v in env.items() if v is not None}


def _holding_volume(container_path, volumes):
    """``(volume, source, target)`` of the bind mount that holds CONTAINER_PATH (the deepest), or None."""
    if not container_path:
        return None
    path = posixpath.normpath(str(container_path))
    best = None
    for volume in volumes or []:
        parts = str(volume).split(":")
        if len(parts) < 2 or not parts[0].startswith("/"):
            continue
        source, target = posixpath.normpath(parts[0]), posixpath.normpath(parts[1])
        if path == target or path.startswith(target.rstrip("/") + "/"):
            if best is None or len(target) > len(best[2]):
                best = (str(volume), source, target)
    return best


def volume_host_path(container_path, volumes):
    """Where CONTAINER_PATH lies on the host, through Docker ``--volume`` values ``SRC:DST[:OPTS]``.

    None when no bind mount (a SRC that starts with ``/``) holds the path: it is then in
    the image or on a named volume, and cannot be checked on the host.
    """
    found = _holding_volume(container_path, volumes)
    if found is None:
        return None
    rest = posixpath.relpath(posixpath.normpath(str(container_path)), found[2])
    return found[1] if rest == "." else posixpath.join(found[1], rest)


def volumes_holding(volumes, container_path):
    """The one bind mount of VOLUMES that holds CONTAINER_PATH, as a list (empty when none)."""
    found = _holding_volume(container_path, volumes)
    return [found[0]] if found else []


def router_help_flags(text):
    """The flags and choices a router's ``--help`` output lists, and its generation.

    Returns ``{"flags": [...], "choices": {flag: [...]}, "generation": NAME|None}``; the
    generation is the one the probe (``router_probe_script``) printed. A flag cut where the
    help text wraps mid-word (``--api-`` at the end of a line) is not a flag.
    """
    flags, choices = set(), {}
    for match in re.finditer(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)(?:[ =]\{([^}]*)\})?", text or ""):
        if match.group(1).endswith("-"):
            continue
        flags.add(match.group(1))
        if match.group(2):
            choices.setdefault(match.group(1), [c.strip() for c in match.group(2).split(",") if c.strip()])
    flags.discard("--help")
    found = re.search(re.escape(ROUTER_GENERATION_MARK) + r"\s*(\S+)", text or "")
    generation = found.group(1) if found and found.group(1) in ROUTER_LAUNCH_MODULES else None
    return {"flags": sorted(flags), "choices": choices, "generation": generation}


def docker_run_options(container):
    """The ``docker run`` options (between ``run`` and the image) of a container spec.

    ``detach: true`` puts ``--detach`` first: ``docker run`` starts the container and returns,
    so the container does not depend on the client (the roles' units follow it with
    ``docker wait`` instead, and a Docker daemon restart with live-restore keeps it running).
    A detached container is not started with ``--rm``: Docker 20.10 removes an auto-remove
    container when its daemon restarts, live-restore or not. It stays after it stops, with
    its log, until its unit starts it again (``ExecStartPre`` removes it) or the service is
    removed. A container that is not detached is removed when it stops (``--rm``).
    """
    argv = ["--detach"] if container.get("detach") else ["--rm"]
    argv += ["--name", container["name"]]
    for key, flag in (("network", "--network"), ("ipc", "--ipc"), ("shm_size", "--shm-size"),
                      ("stop_timeout", "--stop-timeout"), ("user", "--user")):
        if container.get(key):
            argv += [flag, str(container[key])]
    if container.get("privileged"):
        argv.append("--privileged")
    env_files = container.get("env_files") or []
    if container.get("env_file"):
        env_files = [container["env_file"]] + list(env_files)
    for value in env_files:
        argv += ["--env-file", str(value)]
    for key, flag in (("devices", "--device"), ("groups", "--group-add"),
                      ("capabilities", "--cap-add"), ("security_opts", "--security-opt"),
                      ("ulimits", "--ulimit"), ("volumes", "--volume"), ("labels", "--label")):
        for value in container.get(key) or []:
            argv += [flag, str(value)]
    argv += [str(a) for a in (container.get("extra_args") or [])]
    return argv


def docker_run_argv(container, image, command, docker="/usr/bin/docker"):
    """The ``docker run`` command line that runs ``command`` from ``image``."""
    return [docker, "run"] + docker_run_options(container) + [image] + [str(a) for a in command]


def shell_join(argv) -> str:
    """Quote an argv list for a POSIX shell: each flag (and a digest-pinned image) starts a line."""
    lines = []
    for arg in argv:
        word = shlex.quote(str(arg))
        if lines and not str(arg).startswith("-") and "@sha256:" not in str(arg):
            lines[-1] += " " + word
        else:
            lines.append(word)
    return " \\\n  ".join(lines)


def env_file(env) -> str:
    """Render a dict as a Docker ``--env-file`` (KEY=VALUE, one per line, sorted)."""
    lines = []
    for key in sorted(env or {}):
        value = env[key]
        if isinstance(value, bool):
            value = "1" if value else "0"
        if "\n" in str(value):
            raise AnsibleFilterError(f"environment value of {key} contains a newline")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + ("\n" if lines else "")


def redact(env, secret_names=None):
    """The same mapping with the values of ``secret_names`` (all when None) redacted."""
    return {k: (REDACTED if secret_names is None or k in secret_names else v) for k, v in (env or {}).items()}


def redact_values(text, secret):
    """TEXT with every value of a service's secret (its key arguments and secret environment) redacted."""
    text = str(text)
    values = [a for a in (secret or {}).get("args", []) if not str(a).startswith("--")]
    values += list(((secret or {}).get("env") or {}).values())
    for value in sorted({str(v) for v in values if str(v)}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


class FilterModule:
    """PD inventory and launch-command filters."""

    def filters(self):
        return {
            "pd_workers": pd_workers,
            "redact_values": redact_values,
            "service_address": service_address,
            "sglang_worker_launch": worker_launch,
            "sglang_router_workers_env": router_workers_env,
            "router_url": router_url,
            "router_metrics_url": router_metrics_url,
            "router_admin_key": router_admin_key,
            "router_worker_spec": router_worker_spec,
            "sglang_router_launch": router_launch,
            "sglang_router_help_flags": router_help_flags,
            "sglang_router_probe_script": router_probe_script,
            "router_package_files": router_package_files,
            "volume_host_path": volume_host_path,
            "volumes_holding": volumes_holding,
            "docker_run_argv": docker_run_argv,
            "env_file": env_file,
        }
