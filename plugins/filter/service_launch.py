# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How each service's container is run, built once for the roles and for the render.

The worker and router roles (vars/main.yml) call these filters for the host they run on;
``pd_render_files`` calls the same functions for every service of the fleet at once, from
the plan the preflight already built (``pd_model``), so ``playbooks/render.yml`` costs one
pass on the controller however many hosts the inventory holds.
"""
from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.layout import pd_service_files
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import (
    docker_run_argv,
    docker_run_options,
    router_launch,
    secret_volume,
    shell_join,
)
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd_live import pd_service_labels
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import http_url

ROUTER_FLAGS_UNKNOWN = ("not detected (the render touches no host): options the images router lacks "
                        "are left out at deploy time")
ROUTER_FLAGS_GIVEN = "given by sglang_router_render_flags"
HOST_DEPENDENT = "devices are passed only when they exist on the host; groups are passed as the host's GIDs"


def _list(role_vars, name):
    return list(role_vars.get(name) or [])


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


def launch_script(docker_argv, description, managed="Ansible managed"):
    """The launch script a service's unit runs: it starts the container detached and returns."""
    return ("#!/bin/sh\n"
            f"# {managed}\n"
            f"# {description}\n"
            "# Starts the container detached and returns; the unit's follower then waits on it.\n"
            f"exec {shell_join(docker_argv)}\n")


def _worker_files(worker, role_vars, managed):
    launch = worker["launch"]
    container = worker_container(worker, role_vars, launch)
    image = role_vars.get("sglang_worker_image")
    doc = {
        "host": worker["host"],
        "service": worker["name"],
        "role": "sglang_worker",
        "mode": worker["mode"],
        "url": worker["url"] if worker["serves_http"] else None,
        "node_rank": worker["node_rank"],
        "nnodes": worker["nnodes"],
        "image": image,
        "docker_args": docker_run_options(container),
        "argv": launch["argv"],
        "env": launch["env"],
        # What the root-only secret file holds (the launcher reads it in-process), values redacted.
        "secret": launch["secret_redacted"],
        "host_dependent": HOST_DEPENDENT,
    }
    script = launch_script(docker_run_argv(container, image, launch["argv"]), worker_description(worker), managed)
    return doc, script


def _router_files(router, launch, flags_given, managed):
    role_vars = router["role_vars"]
    container = router_container(role_vars, launch)
    image = role_vars.get("sglang_router_image")
    doc = {
        "host": router["host"],
        "service": container["name"],
        "role": "sglang_router",
        "url": http_url(router["address"] or router["host"], launch["options"]["port"]),
        "image": image,
        "docker_args": docker_run_options(container),
        "argv": launch["argv"],
        # The workers the router starts with (its workers env file, expanded by sh -c).
        "workers": launch["workers"],
        "env": {**launch["env"], **launch["workers_env"]},
        "secret": launch["secret_redacted"],
        "router_flags": ROUTER_FLAGS_GIVEN if flags_given else ROUTER_FLAGS_UNKNOWN,
        "dropped": launch["dropped"],
    }
    script = launch_script(docker_run_argv(container, image, launch["argv"]), router_description(launch), managed)
    return doc, script


def _file_pair(host, name, doc, script):
    return [
        {"path": f"{host}/{name}.json", "mode": "0644",
         "content": json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"},
        {"path": f"{host}/{name}.sh", "mode": "0755", "content": script},
    ]


def pd_render_files(model, managed="Ansible managed", router_flags=None):
    """Every launch file the render writes, from the preflight's plan (``pd_model``).

    Returns ``[{path, content, mode}]``: ``HOST/SERVICE.json`` (image, docker_args, argv, env,
    the secret with its values redacted) and ``HOST/SERVICE.sh`` (the launch script the service's
    unit runs) for every worker (every node rank) and every router. ``router_flags`` is the
    flag list of the image's router (a cached ``router-flags-GENERATION-PYTHON-DIGEST.json``): options it lacks
    are left out as a deploy leaves them out; without it every option that is set is shown.
    """
    if not isinstance(model, dict) or "workers" not in model:
        raise AnsibleFilterError("pd_render_files: expected the plan pd_model builds")
    files = []
    for worker in model["workers"]:
        role_vars = model["hosts"][worker["host"]]["role_vars"]["sglang_worker"]
        files += _file_pair(worker["host"], worker["name"], *_worker_files(worker, role_vars, managed))
    serving = [w for w in model["workers"] if w["serves_http"]]
    prefills = [w for w in serving if w["mode"] == "prefill"]
    decodes = [w for w in serving if w["mode"] == "decode"]
    for router in model["routers"]:
        launch = router["launch"]
        if router_flags is not None:
            launch = router_launch(prefills, decodes, router["role_vars"], router["address"] or router["host"],
                                   router_flags, router.get("listen_all", False))
        doc, script = _router_files(router, launch, router_flags is not None, managed)
        files += _file_pair(router["host"], doc["service"], doc, script)
    return files


class FilterModule:
    """Service container and launch-script filters."""

    def filters(self):
        return {
            "sglang_worker_container": worker_container,
            "sglang_router_container": router_container,
            "sglang_worker_description": worker_description,
            "sglang_router_description": router_description,
            "launch_script": launch_script,
            "pd_render_files": pd_render_files,
        }
