# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of one service on its host, with their text: the one place that text is made.

``service_files`` gives the plan (plugins/plugin_utils/service_plan.py) its ``files``: the env
file, the launch script, the systemd unit, the ready gate's nftables rules and the two host
scripts the unit runs (the follower and the gate's opener), as ``[{path, content, mode}]``.
The sglang_service role writes them whole (``mindverse.sglang_pd.file_set``). The unit and
the rules are built here in Python rather than from templates so that the preflight and the
render, which run no template engine, hold the same text a deploy writes.

The unit's settings are variables of the sglang_service role (``SERVICE_SETTINGS``), read
from the caller's variables since the plan is built before that role runs.
"""
from __future__ import annotations

import functools
import hashlib
import posixpath
import re
from pathlib import Path

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import service_files as layout_files

# The sglang_service role's variables the unit is made from, with their defaults
# (roles/sglang_service/defaults/main.yml holds the same; a unit test compares them).
SERVICE_SETTINGS = {
    "sglang_service_follower_path": "/usr/local/libexec/sglang-pd/follow-container",
    "sglang_service_restart_sec": 10,
    "sglang_service_start_limit_interval_sec": 900,
    "sglang_service_start_limit_burst": 5,
}
# How long the gate's opener waits for the ready URL when the plan names no timeout (seconds).
GATE_TIMEOUT = 600
# The host scripts every unit runs, shipped as files of the sglang_service role.
HOST_SCRIPTS = Path(__file__).resolve().parents[2] / "roles" / "sglang_service" / "files"
FOLLOWER = "follow-container"
GATE_OPENER = "open-when-ready"


@functools.lru_cache(maxsize=None)
def host_script(name):
    """The text of host script NAME (FOLLOWER, GATE_OPENER) and its sha1, which the units name."""
    text = (HOST_SCRIPTS / name).read_text(encoding="utf-8")
    return text, hashlib.sha1(text.encode("utf-8")).hexdigest()


def service_settings(role_vars):
    """The sglang_service settings of ROLE_VARS, each its default when unset or null."""
    return {name: default if role_vars.get(name) is None else role_vars[name] for name, default in SERVICE_SETTINGS.items()}


def gate_table(name):
    """The nftables table of service NAME's ready gate (a name nft accepts)."""
    return "sglang_pd_gate_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


def gate_rules(name, gate, managed):
    """The ready gate's rules: other hosts' new connections to the port are reset until the opener deletes them."""
    table = gate_table(name)
    return (f"# {managed}\n"
            f"# The ready gate of {name}: loaded before each start, deleted once\n"
            f"# {gate['url']} answers 200. Until then other hosts' new connections to\n"
            f"# port {gate['port']} are reset, as if the service were down.\n"
            f"table inet {table}\n"
            f"delete table inet {table}\n"
            f"table inet {table} {{\n"
            "  chain input {\n"
            "    type filter hook input priority filter - 10; policy accept;\n"
            '    iifname "lo" accept\n'
            f"    tcp dport {int(gate['port'])} reject with tcp reset\n"
            "  }\n"
            "}\n")


def unit(plan, paths, settings, managed):
    """The systemd unit of PLAN: removes a stale container, runs the launch script, follows the container."""
    name, gate, stop_timeout = plan["name"], plan["ready_gate"], int(plan["stop_timeout"])
    follower = settings["sglang_service_follower_path"]
    lines = [
        f"# {managed}",
        "[Unit]",
        f"Description={plan['description']}",
        "# Wants, not Requires: restarting Docker neither stops nor restarts this unit, and the",
        "# container, started detached, keeps running through it (live-restore).",
        "Wants=docker.service network-online.target",
        "After=docker.service network-online.target",
        "# A service that keeps failing ends in a failed state instead of restarting forever.",
        f"StartLimitIntervalSec={settings['sglang_service_start_limit_interval_sec']}",
        f"StartLimitBurst={settings['sglang_service_start_limit_burst']}",
        "",
        "[Service]",
        "Type=simple",
        "# The launch script starts the container detached; the follower (docker wait) is the main",
        "# process and exits with the container's exit code. The container's output: docker logs.",
        f"# Follower sha1 {host_script(FOLLOWER)[1]}: a new follower changes this unit.",
        f"ExecStartPre=-/usr/bin/docker rm -f {name}",
    ]
    if gate:
        lines.append(f"ExecStartPre=-/usr/sbin/nft -f {paths['gate']}")
    lines += [f"ExecStartPre={paths['script']}", f"ExecStart={follower} {name}"]
    if gate:
        table, port = gate_table(name), int(gate["port"])
        timeout = int(GATE_TIMEOUT if gate.get("timeout") is None else gate["timeout"])
        lines += [
            f"# Ready gate ({GATE_OPENER} sha1 {host_script(GATE_OPENER)[1]}): other hosts are",
            f"# refused port {port} until {gate['url']} answers 200.",
            f"ExecStartPost={gate_opener_path(settings)} {table} {gate['url']} {timeout}",
            f"ExecStopPost=-/usr/sbin/nft delete table inet {table}",
        ]
    lines += [
        f"ExecStop=/usr/bin/docker stop --time {stop_timeout} {name}",
        "Restart=on-failure",
        f"RestartSec={settings['sglang_service_restart_sec']}",
        "TimeoutStartSec=0",
        f"TimeoutStopSec={stop_timeout + 30}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def gate_opener_path(settings):
    """Where the gate's opener is installed: beside the follower."""
    return posixpath.join(posixpath.dirname(settings["sglang_service_follower_path"]), GATE_OPENER)


def service_files(plan, env_text, role_vars, managed):
    """Every file of PLAN's service on its host, ``[{path, content, mode}]``, in the order they are written.

    ``env_text`` is the env file's text (None leaves the env file out: the plan's ``problems``
    say why). The follower, and with a ready gate its opener, are shared by every unit of the
    host; each unit names their sha1, so a new script changes (and restarts) every unit.
    """
    paths = layout_files(plan["name"], role_vars.get("sglang_service_config_dir"))
    settings = service_settings(role_vars)
    files = [] if env_text is None else [{"path": paths["env"], "content": env_text, "mode": "0600"}]
    files += [
        {"path": paths["script"], "content": plan["script"], "mode": "0750"},
        {"path": settings["sglang_service_follower_path"], "content": host_script(FOLLOWER)[0], "mode": "0755"},
        {"path": paths["unit"], "content": unit(plan, paths, settings, managed), "mode": "0644"},
    ]
    if plan["ready_gate"]:
        files += [
            {"path": gate_opener_path(settings), "content": host_script(GATE_OPENER)[0], "mode": "0755"},
            {"path": paths["gate"], "content": gate_rules(plan["name"], plan["ready_gate"], managed), "mode": "0644"},
        ]
    return files
