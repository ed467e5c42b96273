# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that turn the inventory into PD workers and launch command lines.

The roles and the dry-run render use these filters, so what is rendered is what runs.
"""
from __future__ import annotations

import json
import shlex


MODES = ("prefill", "decode")
# Production ports (seed deployment); each can be set per host or group in inventory.
DEFAULT_PORTS = {"prefill": 30100, "decode": 30200}
DEFAULT_BOOTSTRAP_PORT = 8998


def _url_host(address: str) -> str:
    """Bracket an IPv6 address for use in a URL."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def service_address(hostvars_one, host: str) -> str:
    """The address other nodes reach this host at: inventory first, never gathered facts."""
    for key in ("sglang_pd_service_address", "ansible_host"):
        value = hostvars_one.get(key)
        if value:
            return str(value)
    return host


def pd_workers(hosts, hostvars, mode):
    """Every worker of one mode on the given hosts, from inventory variables only.

    A host runs one worker per entry of ``sglang_pd_<mode>_workers`` (a list of
    dicts with optional ``port``, ``bootstrap_port``, ``gpus``, ``name``, ``args``);
    without that list it runs one worker on ``sglang_pd_<mode>_port`` (30100 for
    prefill, 30200 for decode) and ``sglang_pd_bootstrap_port`` (8998).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    workers = []
    for host in hosts:
        one = hostvars[host]
        address = service_address(one, host)
        specs = one.get(f"sglang_pd_{mode}_workers") or [{}]
        default_port = int(one.get(f"sglang_pd_{mode}_port", DEFAULT_PORTS[mode]))
        default_bootstrap_port = int(one.get("sglang_pd_bootstrap_port", DEFAULT_BOOTSTRAP_PORT))
        for index, spec in enumerate(specs):
            port = int(spec.get("port", default_port + index))
            bootstrap = int(spec.get("bootstrap_port", default_bootstrap_port + index))
            name = spec.get("name") or (f"sglang-{mode}" if index == 0 else f"sglang-{mode}-{index}")
            workers.append({
                "host": host,
                "name": name,
                "mode": mode,
                "address": address,
                "port": port,
                "bootstrap_port": bootstrap if mode == "prefill" else None,
                "url": f"http://{_url_host(address)}:{port}",
                "gpus": spec.get("gpus"),
                "args": dict(spec.get("args") or {}),
            })
    return workers


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def cli_options(options) -> list:
    """Turn a dict of snake_case options into command-line flags.

    ``True`` gives a bare flag, ``False``/``None`` omit it, a list repeats values after
    one flag, a dict is passed as JSON, anything else as its string form.
    """
    argv = []
    for key, value in (options or {}).items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(_flag(key))
        elif isinstance(value, (list, tuple)):
            argv.append(_flag(key))
            argv.extend(str(v) for v in value)
        elif isinstance(value, dict):
            argv.extend([_flag(key), json.dumps(value, sort_keys=True, separators=(",", ":"))])
        else:
            argv.extend([_flag(key), str(value)])
    return argv


def sglang_server_argv(worker, options, extra_args=None, python="python"):
    """The ``python -m sglang.launch_server`` command line of one worker."""
    argv = [python, "-m", "sglang.launch_server",
            "--disaggregation-mode", worker["mode"],
            "--port", str(worker["port"])]
    if worker["mode"] == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(worker["bootstrap_port"])]
    merged = dict(options or {})
    merged.update(worker.get("args") or {})
    argv += cli_options(merged)
    argv += [str(a) for a in (extra_args or [])]
    return argv


def sglang_router_argv(prefills, decodes, options, extra_args=None, python="python"):
    """The ``python -m sglang_router.launch_router --pd-disaggregation`` command line."""
    argv = [python, "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for worker in prefills:
        argv += ["--prefill", worker["url"], str(worker["bootstrap_port"])]
    for worker in decodes:
        argv += ["--decode", worker["url"]]
    argv += cli_options(options)
    argv += [str(a) for a in (extra_args or [])]
    return argv


def docker_run_argv(container, image, command, docker="/usr/bin/docker"):
    """The ``docker run`` command line that runs ``command`` from ``image``."""
    argv = [docker, "run", "--rm", "--name", container["name"]]
    for key, flag in (("network", "--network"), ("ipc", "--ipc"), ("shm_size", "--shm-size"),
                      ("env_file", "--env-file"), ("stop_timeout", "--stop-timeout")):
        if container.get(key):
            argv += [flag, str(container[key])]
    for key, flag in (("devices", "--device"), ("groups", "--group-add"),
                      ("capabilities", "--cap-add"), ("security_opts", "--security-opt"),
                      ("ulimits", "--ulimit"), ("volumes", "--volume"), ("labels", "--label")):
        for value in container.get(key) or []:
            argv += [flag, str(value)]
    argv.append(image)
    argv += [str(a) for a in command]
    return argv


def shell_join(argv) -> str:
    """Quote an argv list for a POSIX shell: each flag starts a continued line."""
    lines = []
    for arg in argv:
        word = shlex.quote(str(arg))
        if lines and not str(arg).startswith("-"):
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
            raise ValueError(f"environment value of {key} contains a newline")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + ("\n" if lines else "")


class FilterModule:
    """PD inventory and launch-command filters."""

    def filters(self):
        return {
            "pd_workers": pd_workers,
            "service_address": service_address,
            "cli_options": cli_options,
            "sglang_server_argv": sglang_server_argv,
            "sglang_router_argv": sglang_router_argv,
            "docker_run_argv": docker_run_argv,
            "shell_join": shell_join,
            "env_file": env_file,
        }
