# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan of one service: everything a worker or the router needs to run, built once.

``worker_plan`` and ``router_plan`` turn a worker (``pd_workers``, plugins/filter/pd.py: the
topology) or the router's workers, and the role's variables, into the service's whole plan:
its command line (argv, with the variable behind each item), environment, secret file,
container, ``docker run`` command line, launch script and ready gate, and every file of the
service with its text (``files``, plugins/plugin_utils/service_files.py: env file, launch
script, unit, ready gate). The roles hand the plan whole to the sglang_service role
(``sglang_service_plan``); the preflight builds the same plans for the whole fleet
(``pd_model``), and the render writes them (``pd_render_files``), so what is checked and
rendered is what runs.

Only what the controller cannot know is a parameter: the devices present on the host, its
group IDs, and the flags of the image's router.
"""
from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import router_port, worker_gid_index, worker_ib_device
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd_live import pd_service_labels
from ansible_collections.mindverse.sglang_pd.plugins.filter.layout import pd_service_files
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_files import service_files
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import SECRET_MOUNT, http_url

MANAGED = "Ansible managed"

REDACTED = "<redacted>"
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


def router_workers_env(prefills, decodes):
    """The env file content that gives the router its workers at start (``ROUTER_WORKERS_ENV``)."""
    return {ROUTER_WORKERS_ENV: " ".join(router_membership(prefills, decodes))}


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
                             f"{', '.join(ROUTER_PACKAGES.values())}); set unified_image_compare_with_ca to its files [SGLPD-IMG-021]")


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
            raise AnsibleFilterError(f"environment value of {key} contains a newline [SGLPD-SVC-007]")
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


def _value(role_vars, name, default=None):
    """The variable NAME of ROLE_VARS, DEFAULT when unset or null."""
    value = role_vars.get(name)
    return default if value is None else value


def _list(role_vars, name):
    return list(role_vars.get(name) or [])


# --------------------------------------------------------------------------- containers

def worker_container(worker, role_vars, launch, devices=None, groups=None):
    """The container of one worker (``docker_run_options`` turns it into ``docker run`` options).

    ``devices`` and ``groups`` are what the host resolved (devices that exist, group IDs);
    without them the configured ``sglang_worker_devices`` and ``sglang_worker_groups``.
    """
    files = pd_service_files(worker["name"], role_vars.get("sglang_service_config_dir"))
    return {
        "name": worker["name"],
        # Started detached: the unit follows the container (sglang_service's follower), so a
        # Docker daemon restart with live-restore leaves it running.
        "detach": True,
        "network": "host",
        "ipc": "host",
        "shm_size": role_vars.get("sglang_worker_shm_size"),
        "privileged": role_vars.get("sglang_worker_privileged"),
        "env_file": files["env"],
        "devices": _list(role_vars, "sglang_worker_devices") if devices is None else list(devices),
        "groups": _list(role_vars, "sglang_worker_groups") if groups is None else list(groups),
        "capabilities": _list(role_vars, "sglang_worker_capabilities"),
        "security_opts": _list(role_vars, "sglang_worker_security_opts"),
        "ulimits": _list(role_vars, "sglang_worker_ulimits"),
        "volumes": _list(role_vars, "sglang_worker_volumes") + secret_volume(files["secret"], launch["secret"]),
        # How the day-2 playbooks find the worker again: from Docker (pd_live_services).
        "labels": pd_service_labels(worker),
        "extra_args": _list(role_vars, "sglang_worker_docker_extra_args"),
    }


def router_container(role_vars, launch):
    """The container of the router (its workers come from a second env file, rewritten on scale)."""
    name = role_vars.get("sglang_router_name") or "sglang-router"
    files = pd_service_files(name, role_vars.get("sglang_service_config_dir"))
    return {
        "name": name,
        "detach": True,
        "network": "host",
        "env_file": files["env"],
        "env_files": [files["workers_env"]],
        "ulimits": _list(role_vars, "sglang_router_ulimits"),
        "volumes": _list(role_vars, "sglang_router_volumes") + secret_volume(files["secret"], launch["secret"]),
        "labels": pd_service_labels({"name": name, "mode": "router", "port": launch["options"]["port"]}),
        "extra_args": _list(role_vars, "sglang_router_docker_extra_args"),
    }


def worker_description(worker):
    """The one-line description of a worker (unit Description, launch script comment)."""
    text = f"SGLang {worker['mode']} worker on port {worker['port']}"
    if worker.get("nnodes", 1) > 1:
        text += f" (node {worker['node_rank']} of {worker['nnodes']})"
    return text


def router_description(launch):
    """The one-line description of the router."""
    return f"SGLang PD router on port {launch['options']['port']}"


def launch_script(docker_argv, description, managed=MANAGED):
    """The launch script a service's unit runs: it starts the container detached and returns."""
    return ("#!/bin/sh\n"
            f"# {managed}\n"
            f"# {description}\n"
            "# Starts the container detached and returns; the unit's follower then waits on it.\n"
            f"exec {shell_join(docker_argv)}\n")


# --------------------------------------------------------------------------- plans

def _plan(launch, container, image, description, role_vars, stop_timeout, managed, ready_gate=None):
    """The plan of the service CONTAINER runs: what the sglang_service role takes (sglang_service_plan)."""
    docker_argv = docker_run_argv(container, image, launch["argv"])
    plan = {
        "name": container["name"],
        "description": description,
        "image": image,
        # The command line's parts (argv, origins, options, secret redacted): the preflight checks
        # them, the render shows them.
        "launch": launch,
        "docker_args": docker_run_options(container),
        "docker_argv": docker_argv,
        "script": launch_script(docker_argv, description, managed),
        "env": launch["env"],
        "secret": launch["secret"],
        "secret_file": pd_service_files(container["name"], role_vars.get("sglang_service_config_dir"))["secret"],
        "stop_timeout": stop_timeout,
        "ready_gate": ready_gate or {},
        "problems": [],
    }
    # A value with a newline cannot be written to an env file: the plan says so (the sglang_service
    # role refuses it, the preflight reports it as the variable's mistake) rather than failing.
    try:
        env_text = env_file(launch["env"])
    except AnsibleFilterError as exc:
        env_text = None
        plan["problems"].append(f"{plan['name']}: {exc}")
    try:
        plan["files"] = service_files(plan, env_text, role_vars, managed)
    except (TypeError, ValueError) as exc:  # a stop timeout or port that is no number: the argument specs say which
        plan["files"] = []
        plan["problems"].append(f"{plan['name']}: its files cannot be made: {exc}")
    return plan


def worker_plan(worker, role_vars, devices=None, groups=None, managed=MANAGED):
    """The whole plan of one worker (one node rank) from the sglang_worker_* variables.

    ``devices`` and ``groups`` are what the host resolved (present devices, group IDs); None
    (the preflight, the render) takes the configured ones. ``managed`` heads the launch script.
    Returns ``name``, ``description``, ``image``, ``launch`` (``worker_launch``: argv, origins,
    options, env, secret), ``docker_args`` (the ``docker run`` options), ``docker_argv``,
    ``script`` (the launch script), ``env`` (its env file's variables), ``secret`` and
    ``secret_file``, ``stop_timeout``, ``ready_gate`` (none), ``files`` (every file of the
    service with its text: ``service_files``) and ``problems`` (why a file cannot be written).
    """
    launch = worker_launch(worker, role_vars)
    container = worker_container(worker, role_vars, launch, devices, groups)
    return _plan(launch, container, role_vars.get("sglang_worker_image"), worker_description(worker), role_vars,
                 role_vars.get("sglang_worker_stop_timeout"), managed)


def router_plan(prefills, decodes, role_vars, address, supported=None, listen_all=False, managed=MANAGED):
    """The whole plan of the router from its workers and the sglang_router_* variables.

    ``address`` is the router host's service address; ``supported`` the flags of the image's
    router (``router_launch``), None when unknown. Returns what ``worker_plan`` returns (the
    launch with the router's ``workers``, ``workers_env`` and ``dropped`` options), with its
    ``url``, ``workers_env_file`` and ``workers_env_text`` (the workers it starts with), and its
    ready gate: other hosts are kept out until ``sglang_router_ready_path`` answers.
    """
    launch = router_launch(prefills, decodes, role_vars, address, supported, listen_all)
    port = launch["options"]["port"]
    url = http_url(address, port)
    gate = {"port": port, "url": url + str(role_vars.get("sglang_router_ready_path") or ""),
            "timeout": role_vars.get("sglang_router_ready_timeout")}
    # The router's unit restarts it after sglang_router_restart_sec, not the workers' wait.
    unit_vars = dict(role_vars)
    if role_vars.get("sglang_router_restart_sec") is not None:
        unit_vars["sglang_service_restart_sec"] = role_vars["sglang_router_restart_sec"]
    plan = _plan(launch, router_container(role_vars, launch), role_vars.get("sglang_router_image"),
                 router_description(launch), unit_vars, role_vars.get("sglang_router_stop_timeout"), managed, gate)
    plan["url"] = url
    plan["workers_env_file"] = pd_service_files(plan["name"], role_vars.get("sglang_service_config_dir"))["workers_env"]
    plan["workers_env_text"] = env_file(launch["workers_env"])
    return plan
