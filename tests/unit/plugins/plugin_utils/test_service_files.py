# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of a service's plan, with their text (plugins/plugin_utils/service_files.py).

The unit and the ready gate's rules are held here word for word: a deploy compares them with
what the hosts hold, so a changed byte restarts every service of the fleet.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from ansible_collections.mindverse.sglang_pd.plugins.filter import pd
from ansible_collections.mindverse.sglang_pd.plugins.filter import service_plan as service_plan_filters
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils import service_files as sf
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils import service_plan as sp

ROLE = Path(__file__).parents[4] / "roles" / "sglang_service"
ROUTER_VARS = {
    "sglang_router_python": "python", "sglang_router_host": "0.0.0.0", "sglang_router_port": 30000,
    "sglang_router_options": {}, "sglang_router_extra_args": [], "sglang_router_env": {},
    "sglang_router_stop_timeout": 30, "sglang_router_restart_sec": 1,
    "sglang_router_ready_path": "/readiness", "sglang_router_ready_timeout": 600,
}
WORKER_VARS = {"sglang_worker_model_path": "/models/m", "sglang_worker_stop_timeout": 120,
               "sglang_worker_extra_env": {"A": "x"}}
CUSTOM = {"sglang_service_config_dir": "/srv/pd/etc", "sglang_service_follower_path": "/opt/x/follow",
          "sglang_service_start_limit_burst": 3}
ROUTER_UNIT = """\
# managed here
[Unit]
Description=SGLang PD router on port 30000
# Wants, not Requires: restarting Docker neither stops nor restarts this unit, and the
# container, started detached, keeps running through it (live-restore).
Wants=docker.service network-online.target
After=docker.service network-online.target
# A service that keeps failing ends in a failed state instead of restarting forever.
StartLimitIntervalSec=900
StartLimitBurst=3

[Service]
Type=simple
# The launch script starts the container detached; the follower (docker wait) is the main
# process and exits with the container's exit code. The container's output: docker logs.
# Follower sha1 {follower}: a new follower changes this unit.
ExecStartPre=-/usr/bin/docker rm -f sglang-router
ExecStartPre=-/usr/sbin/nft -f /srv/pd/etc/sglang-router.gate.nft
ExecStartPre=/srv/pd/etc/sglang-router.sh
ExecStart=/opt/x/follow sglang-router
# Ready gate (open-when-ready sha1 {opener}): other hosts are
# refused port 30000 until http://[fd00::5]:30000/readiness answers 200.
ExecStartPost=/opt/x/open-when-ready sglang_pd_gate_sglang_router http://[fd00::5]:30000/readiness 600
ExecStopPost=-/usr/sbin/nft delete table inet sglang_pd_gate_sglang_router
ExecStop=/usr/bin/docker stop --time 30 sglang-router
Restart=on-failure
RestartSec=1
TimeoutStartSec=0
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
"""
ROUTER_GATE = """\
# managed here
# The ready gate of sglang-router: loaded before each start, deleted once
# http://[fd00::5]:30000/readiness answers 200. Until then other hosts' new connections to
# port 30000 are reset, as if the service were down.
table inet sglang_pd_gate_sglang_router
delete table inet sglang_pd_gate_sglang_router
table inet sglang_pd_gate_sglang_router {
  chain input {
    type filter hook input priority filter - 10; policy accept;
    iifname "lo" accept
    tcp dport 30000 reject with tcp reset
  }
}
"""


def _shipped(name):
    text = (ROLE / "files" / name).read_text(encoding="utf-8")
    return text, hashlib.sha1(text.encode("utf-8")).hexdigest()


def _worker():
    return pd.pd_workers(["p0"], {"p0": {"sglang_pd_service_address": "10.0.0.1"}}, "prefill")[0]


def _router_plan(extra=None):
    return sp.router_plan([], [], {**ROUTER_VARS, **CUSTOM, **(extra or {})}, "fd00::5", managed="managed here")


def _by_path(plan):
    return {entry["path"]: entry for entry in plan["files"]}


def test_a_router_plan_holds_its_unit_and_gate_word_for_word():
    files = _by_path(_router_plan())
    unit = ROUTER_UNIT.format(follower=_shipped("follow-container")[1], opener=_shipped("open-when-ready")[1])
    assert files["/etc/systemd/system/sglang-router.service"] == {"path": "/etc/systemd/system/sglang-router.service",
                                                                  "content": unit, "mode": "0644"}
    assert files["/srv/pd/etc/sglang-router.gate.nft"] == {"path": "/srv/pd/etc/sglang-router.gate.nft",
                                                           "content": ROUTER_GATE, "mode": "0644"}


def test_every_file_of_a_worker_is_in_its_plan_under_the_config_dir():
    plan = sp.worker_plan(_worker(), {**WORKER_VARS, **CUSTOM}, managed="managed here")
    assert [(entry["path"], entry["mode"]) for entry in plan["files"]] == [
        ("/srv/pd/etc/sglang-prefill.env", "0600"),
        ("/srv/pd/etc/sglang-prefill.sh", "0750"),
        ("/opt/x/follow", "0755"),
        ("/etc/systemd/system/sglang-prefill.service", "0644"),
    ]
    env, script, follower, unit = (entry["content"] for entry in plan["files"])
    assert env == sp.env_file(plan["env"]) and "A=x\n" in env
    assert script is plan["script"]
    assert follower == _shipped("follow-container")[0]
    # No gate: the unit neither loads nor opens one; the workers' restart wait is the service's default.
    assert "nft" not in unit and "open-when-ready" not in unit
    assert "RestartSec=10\n" in unit and "StartLimitBurst=3\n" in unit and "TimeoutStopSec=150\n" in unit


def test_the_router_unit_takes_the_routers_restart_wait_and_the_opener_sits_beside_the_follower():
    plan = _router_plan({"sglang_service_restart_sec": 10})
    files = _by_path(plan)
    assert files["/opt/x/open-when-ready"] == {"path": "/opt/x/open-when-ready", "content": _shipped("open-when-ready")[0],
                                               "mode": "0755"}
    assert "RestartSec=1\n" in files["/etc/systemd/system/sglang-router.service"]["content"]
    assert plan["problems"] == []


def test_the_plans_defaults_are_the_sglang_service_roles():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert sf.SERVICE_SETTINGS == {name: defaults[name] for name in sf.SERVICE_SETTINGS}


def test_an_env_value_with_a_newline_is_a_problem_of_the_plan_not_a_failure():
    plan = sp.worker_plan(_worker(), {**WORKER_VARS, "sglang_worker_extra_env": {"A": "x\ny"}})
    assert plan["problems"] == ["sglang-prefill: environment value of A contains a newline [SGLPD-SVC-007]"]
    assert [entry["path"] for entry in plan["files"]][0] == "/etc/sglang-pd/sglang-prefill.sh"


def test_a_stop_timeout_that_is_no_number_is_a_problem_of_the_plan():
    plan = sp.worker_plan(_worker(), {**WORKER_VARS, "sglang_worker_stop_timeout": "soon"})
    assert plan["files"] == [] and "sglang-prefill: its files cannot be made" in plan["problems"][0]


def test_the_render_writes_the_launch_script_a_deploy_writes():
    worker = _worker()
    worker["plan"] = sp.worker_plan(worker, WORKER_VARS)
    rendered = {entry["path"]: entry["content"] for entry in service_plan_filters.pd_render_files({"workers": [worker], "routers": []})}
    assert rendered["p0/sglang-prefill.sh"] == _by_path(worker["plan"])["/etc/sglang-pd/sglang-prefill.sh"]["content"]
