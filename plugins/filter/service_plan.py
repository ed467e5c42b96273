# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the services' plans (plugins/plugin_utils/service_plan.py) and of the render.

``sglang_worker_plan`` and ``sglang_router_plan`` give the roles (vars/main.yml) a service's
whole plan; ``pd_render_files`` writes the plans the preflight built for the whole fleet
(``pd_model``), so ``playbooks/render.yml`` costs one pass on the controller however many
hosts the inventory holds.
"""
from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import (
    env_file,
    redact_values,
    router_help_flags,
    router_package_files,
    router_plan,
    router_probe_script,
    router_workers_env,
    worker_plan,
)

ROUTER_FLAGS_UNKNOWN = ("not detected (the render touches no host): options the images router lacks "
                        "are left out at deploy time")
ROUTER_FLAGS_GIVEN = "given by sglang_router_render_flags"
HOST_DEPENDENT = "devices are passed only when they exist on the host; groups are passed as the host's GIDs"


def _service_doc(host, role, plan):
    """What every service's render shows: its image, docker run options, argv and environment, and
    what the root-only secret file holds (the launcher reads it in-process), values redacted."""
    launch = plan["launch"]
    return {"host": host, "service": plan["name"], "role": role, "image": plan["image"], "docker_args": plan["docker_args"],
            "argv": launch["argv"], "env": launch["env"], "secret": launch["secret_redacted"]}


def _worker_doc(worker, plan):
    return {**_service_doc(worker["host"], "sglang_worker", plan),
            "mode": worker["mode"],
            "url": worker["url"] if worker["serves_http"] else None,
            "node_rank": worker["node_rank"],
            "nnodes": worker["nnodes"],
            "host_dependent": HOST_DEPENDENT}


def _router_doc(router, plan, flags_given):
    launch = plan["launch"]
    return {**_service_doc(router["host"], "sglang_router", plan),
            "url": plan["url"],
            # The workers the router starts with (its workers env file, expanded by sh -c).
            "workers": launch["workers"],
            "env": {**launch["env"], **launch["workers_env"]},
            "router_flags": ROUTER_FLAGS_GIVEN if flags_given else ROUTER_FLAGS_UNKNOWN,
            "dropped": launch["dropped"]}


def _file_pair(host, doc, plan):
    return [
        {"path": f"{host}/{plan['name']}.json", "mode": "0644",
         "content": json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"},
        {"path": f"{host}/{plan['name']}.sh", "mode": "0755", "content": plan["script"]},
    ]


def pd_render_files(model, router_flags=None):
    """Every launch file the render writes, from the plans the preflight built (``pd_model``).

    Returns ``[{path, content, mode}]``: ``HOST/SERVICE.json`` (image, docker_args, argv, env,
    the secret with its values redacted) and ``HOST/SERVICE.sh`` (the launch script the service's
    unit runs) for every worker (every node rank) and every router. ``router_flags`` is the
    flag list of the image's router (a cached ``router-flags-GENERATION-PYTHON-DIGEST.json``): options it lacks
    are left out as a deploy leaves them out; without it every option that is set is shown.
    """
    if not isinstance(model, dict) or "workers" not in model:
        raise AnsibleFilterError("pd_render_files: expected the plan pd_model builds [SGLPD-DEF-001]")
    files = []
    for worker in model["workers"]:
        files += _file_pair(worker["host"], _worker_doc(worker, worker["plan"]), worker["plan"])
    serving = [w for w in model["workers"] if w["serves_http"]]
    prefills = [w for w in serving if w["mode"] == "prefill"]
    decodes = [w for w in serving if w["mode"] == "decode"]
    for router in model["routers"]:
        plan = router["plan"]
        if router_flags is not None:
            plan = router_plan(prefills, decodes, router["role_vars"], router["address"] or router["host"],
                               router_flags, router.get("listen_all", False), model.get("managed", "Ansible managed"))
        files += _file_pair(router["host"], _router_doc(router, plan, router_flags is not None), plan)
    return files


class FilterModule:
    """Service plan and render filters."""

    def filters(self):
        return {
            "sglang_worker_plan": worker_plan,
            "sglang_router_plan": router_plan,
            "sglang_router_workers_env": router_workers_env,
            "sglang_router_help_flags": router_help_flags,
            "sglang_router_probe_script": router_probe_script,
            "router_package_files": router_package_files,
            "redact_values": redact_values,
            "env_file": env_file,
            "pd_render_files": pd_render_files,
        }
