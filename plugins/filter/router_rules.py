# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight check of the router's options against the pinned router's own argument parser.

The flag table (module_utils/_sglang_router_flags_v0_3_2.py) is generated from
``sglang_router/router_args.py`` of the pinned release: every flag, its choices (policies,
log levels, ...) and the type argparse converts its value to. A router started with a flag
or value its parser refuses exits at once, and with it every client request.
"""
from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import ROUTER_OPTION_VARS
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd_checks import (
    _problem, _type_problem, check_argv, merge_problems, suggest)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _sglang_router_flags_v0_3_2 as router_flags

DEDICATED = dict(ROUTER_OPTION_VARS)
# Given their own variables and checked by pd_check_router: never through the options map.
SECRET_OPTIONS = ("api_key", "control_plane_api_keys")


def _flag(option):
    return "--" + str(option).replace("_", "-")


def value_problem(option, value):
    """(problem, fix) of one router option's value, or None. The option's flag exists."""
    dest, kind, choices, _replacement = router_flags.FLAGS[_flag(option)]
    if value in (None, ""):
        return None
    if kind == "switch":
        if not isinstance(value, bool):
            return "a switch: true or false", f"write {option}: true (a YAML boolean, unquoted)"
        return None
    values = value if isinstance(value, list) and kind == "list" else [value]
    for one in values:
        if choices and str(one) not in choices:
            return "not a choice of the router", f"write one of {', '.join(choices)}{suggest(one, choices)}"
        kind_of_value = router_flags.TYPES.get(dest)
        if kind_of_value in ("int", "float") and (isinstance(one, bool) or _type_problem(str(one), kind_of_value)):
            return (_type_problem(str(one), kind_of_value) or "a boolean, not a number",
                    f"write a {'whole ' if kind_of_value == 'int' else ''}number, unquoted and without units")
    return None


def _router_problems(host, role_vars):
    problems = []
    version = router_flags.VERSION
    for option, name in ROUTER_OPTION_VARS:
        found = value_problem(option, role_vars.get(name))
        if found:
            problems.append(_problem(host, name, role_vars.get(name), f"{found[0]} (sglang-router {version})", found[1]))
    options = role_vars.get("sglang_router_options") or {}
    for option, value in options.items():
        variable = f"sglang_router_options.{option}"
        if option in SECRET_OPTIONS:
            continue
        if option in DEDICATED:
            problems.append(_problem(host, variable, value, f"the collection sets --{option.replace('_', '-')} from "
                                     f"{DEDICATED[option]}, and checks it there", f"write {DEDICATED[option]}: {value} instead"))
        elif _flag(option) not in router_flags.FLAGS:
            flags = [f[2:].replace("-", "_") for f in router_flags.FLAGS]
            problems.append(_problem(host, variable, value, f"sglang-router {version} has no flag {_flag(option)}",
                                     f"remove it{suggest(option, flags) or ' (sglang_router_extra_args takes flags of a newer router)'}"))
        else:
            found = value_problem(option, value)
            if found:
                problems.append(_problem(host, variable, value, f"{found[0]} (sglang-router {version})", found[1]))
    extra = [str(a) for a in role_vars.get("sglang_router_extra_args") or []]
    for _origin, flag, value, problem, fix in check_argv(extra, ["sglang_router_extra_args"] * len(extra),
                                                         router_flags.FLAGS, 0, router_flags.TYPES, None):
        if flag not in ("--api-key", "--control-plane-api-keys"):
            text = flag + (f" {value}" if value not in (None, "") else "")
            problems.append((host, f"sglang_router_extra_args: {text}: {problem} (sglang-router {version}); {fix}"))
    return problems


def pd_check_router_options(model):
    """Every router option, from its own variable, the options map or extra args, is one the router takes."""
    problems = []
    for router in model["routers"]:
        problems += _router_problems(router["host"], router["role_vars"])
    return merge_problems(problems)


class FilterModule:
    """Router option preflight filters."""

    def filters(self):
        return {"pd_check_router_options": pd_check_router_options}
