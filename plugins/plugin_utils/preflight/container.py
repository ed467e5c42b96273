# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks of the container options and environments the roles would pass to Docker.

Docker reads a size without a unit as bytes (``--shm-size 64`` is 64 bytes, and the
server dies at its first large allocation), and an environment value that is a list or
a map would be written as Python text. Both are refused before anything changes.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import WORKER_ENV_VARS
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.checks import _problem, merge_problems

# Docker's size syntax (go-units RAMInBytes): a number and an optional unit.
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtTpP]?)[iI]?[bB]?\s*$")
# (variable, role) of every container environment the roles build: the workers' groups, then the router's.
ENV_VARIABLES = tuple((name, "sglang_worker") for name in WORKER_ENV_VARS) + (("sglang_router_env", "sglang_router"),)
SCALARS = (str, int, float, bool)


def _size_problem(value):
    """What is wrong with a Docker size, or None."""
    match = SIZE.match(str(value)) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if match is None:
        return "not a size", "write a number and a unit, such as 64g"
    if not match.group(2):
        return (f"a size without a unit is bytes to Docker ({value} bytes)",
                f"write {value}g for {value} GiB, or {value}m for {value} MiB")
    return None


def _env_problems(host, variable, env):
    problems = []
    if env is None:
        return problems
    if not isinstance(env, Mapping):
        return [_problem(host, variable, env, "not a map of variable names to values", "write NAME: value pairs")]
    for name, value in env.items():
        if value is not None and not isinstance(value, SCALARS):
            problems.append(_problem(host, f"{variable}.{name}", value,
                                     "an environment value must be a string or a number, not a list or a map",
                                     'write one string, such as "a,b" (quote it)'))
    return problems


def pd_check_container(model):
    """Docker sizes have units and environment values are scalars, on every PD host."""
    problems = []
    for host, info in model["hosts"].items():
        worker_vars = info["role_vars"]["sglang_worker"]
        size = worker_vars.get("sglang_worker_shm_size")
        if size not in (None, ""):
            issue = _size_problem(size)
            if issue:
                problems.append(_problem(host, "sglang_worker_shm_size", size, *issue))
        for variable, role in ENV_VARIABLES:
            problems += _env_problems(host, variable, info["role_vars"][role].get(variable))
    for worker in model["workers"]:
        problems += _env_problems(worker["host"], f"env of {worker['name']} in sglang_pd_{worker['mode']}_workers",
                                  worker.get("env"))
    return merge_problems(problems)
