# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The containers, descriptions and launch scripts the roles run and the render writes."""

from __future__ import annotations

import shlex

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import service_launch as sl
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import docker_run_options

WORKER = {"host": "n0", "name": "sglang-prefill", "mode": "prefill", "port": 30100, "bootstrap_port": 8998,
          "nnodes": 1, "node_rank": 0, "serves_http": True, "url": "http://10.0.0.10:30100"}
ROLE_VARS = {"sglang_worker_shm_size": "64g", "sglang_worker_privileged": False,
             "sglang_worker_devices": ["/dev/kfd", "/dev/dri"], "sglang_worker_groups": ["video"],
             "sglang_worker_capabilities": ["SYS_PTRACE"], "sglang_worker_security_opts": [],
             "sglang_worker_ulimits": ["memlock=-1:-1"], "sglang_worker_volumes": ["/m:/models:ro"],
             "sglang_worker_docker_extra_args": ["--pids-limit", "4096"]}


def test_a_services_container_reads_its_files_from_sglang_service_config_dir():
    role_vars = {**ROLE_VARS, "sglang_service_config_dir": "/srv/pd/etc"}
    worker = sl.worker_container(WORKER, role_vars, {"secret": {"args": ["--api-key", "k"]}})
    assert worker["env_file"] == "/srv/pd/etc/sglang-prefill.env"
    assert worker["volumes"][-1] == "/srv/pd/etc/sglang-prefill.secret.json:/run/sglang-pd/secret.json:ro"
    router = sl.router_container({"sglang_service_config_dir": "/srv/pd/etc"}, {"secret": {}, "options": {"port": 30000}})
    assert (router["env_file"], router["env_files"]) == ("/srv/pd/etc/sglang-router.env", ["/srv/pd/etc/sglang-router.workers.env"])


def test_worker_container_mounts_the_secret_only_when_there_is_one():
    with_secret = sl.worker_container(WORKER, ROLE_VARS, {"secret": {"args": ["--api-key", "k"]}})
    assert with_secret["volumes"] == ["/m:/models:ro", "/etc/sglang-pd/sglang-prefill.secret.json:/run/sglang-pd/secret.json:ro"]
    without = sl.worker_container(WORKER, ROLE_VARS, {"secret": {}})
    assert without["volumes"] == ["/m:/models:ro"]
    options = docker_run_options(with_secret)
    assert options[:3] == ["--detach", "--name", "sglang-prefill"]
    assert "--label" in options and "org.mindverse.sglang_pd.bootstrap_port=8998" in options
    assert options[-2:] == ["--pids-limit", "4096"]


def test_worker_container_takes_what_the_host_resolved():
    container = sl.worker_container(WORKER, ROLE_VARS, {"secret": {}}, devices=["/dev/kfd"], groups=["44"])
    assert container["devices"] == ["/dev/kfd"] and container["groups"] == ["44"]


def test_router_container_reads_its_workers_from_a_second_env_file():
    container = sl.router_container({"sglang_router_name": "sglang-router", "sglang_router_ulimits": [],
                                     "sglang_router_volumes": []}, {"secret": {}, "options": {"port": 30000}})
    assert container["env_files"] == ["/etc/sglang-pd/sglang-router.workers.env"]
    assert "org.mindverse.sglang_pd.port=30000" in container["labels"]


def test_descriptions_name_the_rank_of_a_multi_node_worker():
    assert sl.worker_description(WORKER) == "SGLang prefill worker on port 30100"
    assert sl.worker_description(dict(WORKER, nnodes=2, node_rank=1)) == "SGLang prefill worker on port 30100 (node 1 of 2)"
    assert sl.router_description({"options": {"port": 30000}}) == "SGLang PD router on port 30000"


def test_launch_script_execs_exactly_the_argv():
    argv = ["/usr/bin/docker", "run", "--name", "a b", "img@sha256:" + "0" * 64, "python", "-c", "print('x')"]
    script = sl.launch_script(argv, "SGLang PD router on port 30000", "Ansible managed")
    lines = script.splitlines()
    assert lines[:3] == ["#!/bin/sh", "# Ansible managed", "# SGLang PD router on port 30000"]
    body = " ".join(line.rstrip("\\") for line in lines if not line.startswith("#"))
    assert shlex.split(body) == ["exec"] + argv
    assert script.endswith("\n") and not script.endswith("\n\n")


def test_render_files_refuses_what_is_not_a_plan():
    with pytest.raises(AnsibleFilterError):
        sl.pd_render_files({"hosts": {}})
