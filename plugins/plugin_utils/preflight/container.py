# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks of what the roles pass to Docker: sizes with units, one-line scalar env values, the containers' model path."""
from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import WORKER_ENV_VARS
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import endpoint_problem
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems, variable_problem

# Docker's size syntax (go-units RAMInBytes): a number and an optional unit.
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtTpP]?)[iI]?[bB]?\s*$")
# (variable, role) of every container environment the roles build: the workers' groups, then the router's.
ENV_VARIABLES = tuple((name, "sglang_worker") for name in WORKER_ENV_VARS) + (("sglang_router_env", "sglang_router"),)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
NOT_SCALAR = ("an environment value must be a string or a number, not a list or a map", 'write one string, such as "a,b" (quote it)')
CONTROL_CHARACTER = ("holds a control character (a newline, tab or escape): the service's env file holds one variable per line, so a "
                     "newline cuts the value, and the others are copy-paste slips a process reads as part of it",
                     "write the value on one line without control characters (a YAML block scalar such as | or > ends in a newline: "
                     "use a plain or quoted string)")


def _size_problem(value):
    """What is wrong with a Docker size, as (problem, fix), or None."""
    match = SIZE.match(str(value)) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if match is None:
        return "not a size", "write a number and a unit, such as 64g"
    if not match.group(2):
        return f"a size without a unit is bytes to Docker ({value} bytes)", f"write {value}g for {value} GiB, or {value}m for {value} MiB"
    return None


def _env_problems(host, variable, env):
    if env is None:
        return []
    if not isinstance(env, Mapping):
        return [variable_problem(host, variable, env, "not a map of variable names to values", "write NAME: value pairs")]
    problems = []
    for name, value in env.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            issue = NOT_SCALAR
        elif isinstance(value, str) and CONTROL.search(value):
            issue = CONTROL_CHARACTER
        else:
            continue
        problems.append(variable_problem(host, f"{variable}.{name}", value, *issue))
    return problems


def _within(path, folder):
    path, folder = posixpath.normpath(path), posixpath.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _model_path_problems(host, worker_vars):
    """The model path is absolute, and a path inside the containers, not the host folder a volume mounts."""
    path = worker_vars.get("sglang_worker_model_path")
    if not isinstance(path, str) or "{{" in path or path.startswith("<"):
        return []
    if not path.startswith("/"):
        return [variable_problem(host, "sglang_pd_model_path", path, "a relative path: SGLang would look for it in the container's working "
                                 "folder, or take it for a model hub name and try to download it",
                                 "write the absolute path of the model inside the worker containers, such as /models/glm-5.2-fp8")]
    binds = [tuple(str(volume).split(":")[:2]) for volume in worker_vars.get("sglang_worker_volumes") or []
             if len(str(volume).split(":")) >= 2 and all(part.startswith("/") for part in str(volume).split(":")[:2])]
    if any(_within(path, target) for _source, target in binds):
        return []
    for source, target in binds:
        if _within(path, source):
            inside = posixpath.normpath(posixpath.join(target, posixpath.relpath(posixpath.normpath(path), posixpath.normpath(source))))
            return [variable_problem(host, "sglang_pd_model_path", path, f"the host's folder: sglang_worker_volumes mounts {source} at "
                                     f"{target}, so the containers see it as {inside}",
                                     f"write {inside} (sglang_pd_model_path is the path inside the worker containers)")]
    return []


def pd_check_container(model):
    """Docker sizes have units, environment values are one-line scalars, the model path is the containers'."""
    problems = []
    worker_hosts = {worker["host"] for worker in model["workers"]}
    for host, info in model["hosts"].items():
        worker_vars = info["role_vars"]["sglang_worker"]
        size = worker_vars.get("sglang_worker_shm_size")
        if size not in (None, "") and _size_problem(size):
            problems.append(variable_problem(host, "sglang_worker_shm_size", size, *_size_problem(size)))
        for variable, role in ENV_VARIABLES:
            problems += _env_problems(host, variable, info["role_vars"][role].get(variable))
        if host in worker_hosts:
            problems += _model_path_problems(host, worker_vars)
            path = worker_vars.get("sglang_worker_health_path")
            if isinstance(path, str) and path and endpoint_problem(path):
                problems.append(variable_problem(host, "sglang_worker_health_path", path, endpoint_problem(path),
                                                 "write the path alone, such as /health_generate"))
    for worker in model["workers"]:
        problems += _env_problems(worker["host"], f"env of {worker['name']} in sglang_pd_{worker['mode']}_workers", worker.get("env"))
    return merge_problems(problems)
