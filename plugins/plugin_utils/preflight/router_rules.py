# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight check of the router's options against the router's own argument parser.

The router comes in two generations (``sglang_router_generation``): sglang-router, whose
last release is 0.3.2, and its successor smg. Each pinned release has a flag table
generated from its ``router_args.py`` (module_utils/_sglang_router_flags_v0_3_2.py,
module_utils/_smg_router_flags_v1_13_0.py): every flag, its choices (policies, log
levels, ...) and the type argparse converts its value to. A router started with a flag or
value its parser refuses exits at once, and with it every client request.

With ``auto`` (the default) the image decides which generation runs, and the role probes
it later: an option or value is refused here only when no generation takes it. Extra
arguments may not set what the collection sets (an option with its own variable, the
workers), and the paths the router and the collection request are paths.
"""
from __future__ import annotations

from functools import partial

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import ROUTER_OPTION_VARS
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.checks import check_argv, flag_value_problem
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems, suggest, variable_problem
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import (
    _sglang_router_flags_v0_3_2, _smg_router_flags_v1_13_0)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import endpoint_problem

DEDICATED = dict(ROUTER_OPTION_VARS)
# Given their own variables and checked by pd_check_router: never through the options map.
SECRET_OPTIONS = ("api_key", "control_plane_api_keys")
# Flags the router is always started with, from the inventory's groups.
FROM_INVENTORY = {"pd_disaggregation": "--pd-disaggregation", "prefill": "its prefill workers (--prefill)",
                  "decode": "its decode workers (--decode)", "worker_urls": "its workers"}
# The paths the collection and the router request on the servers, each a path on them.
ENDPOINT_VARIABLES = {"sglang_router_health_check_endpoint": "/health_generate", "sglang_router_ready_path": "/readiness"}
# sglang_router_generation: the flag table of each generation's pinned release.
GENERATIONS = {"sglang-router": _sglang_router_flags_v0_3_2, "smg": _smg_router_flags_v1_13_0}
AUTO = "auto"


def router_name(generation):
    """A generation as messages name it: the package and its pinned release (``smg 1.13.0``)."""
    return f"{generation} {GENERATIONS[generation].VERSION}"


def _shared_entry(entries):
    """One flag's (dest, kind, choices, replacement) across generations: any generation's
    choice is taken, and none is enforced when one generation takes any value.

    The generations agree on the rest of a flag they share (tests/unit/plugins/plugin_utils/test_router_rules.py).
    """
    dest, kind, _choices, replacement = entries[0]
    if any(entry[2] is None for entry in entries):
        return dest, kind, None, replacement
    return dest, kind, tuple(dict.fromkeys(choice for entry in entries for choice in entry[2])), replacement


class RouterFlags:
    """The flags, choices and value types of the generations a router host may run.

    With one generation, its table; with several (``auto``), a flag or value is taken when
    any of them takes it.
    """

    def __init__(self, generations):
        tables = [GENERATIONS[generation] for generation in generations]
        self.names = [router_name(generation) for generation in generations]
        self.flags = {flag: _shared_entry([table.FLAGS[flag] for table in tables if flag in table.FLAGS])
                      for flag in dict.fromkeys(flag for table in tables for flag in table.FLAGS)}
        self.types = {dest: kind for table in tables for dest, kind in table.TYPES.items()}

    @property
    def label(self):
        """The routers, as a message names them (``sglang-router 0.3.2 or smg 1.13.0``)."""
        return " or ".join(self.names)

    def lacks(self, flag):
        """That none of the routers has FLAG."""
        return f"{self.names[0]} has no flag {flag}" + "".join(f", nor does {name}" for name in self.names[1:])


ROUTER_FLAGS = {generation: RouterFlags([generation]) for generation in GENERATIONS}
ROUTER_FLAGS[AUTO] = RouterFlags(list(GENERATIONS))


def router_flags(role_vars):
    """The flags a router host's options are checked against, by its sglang_router_generation.

    A value that is no generation is checked as ``auto`` (the variable's own check reports it).
    """
    return ROUTER_FLAGS.get(role_vars.get("sglang_router_generation") or AUTO, ROUTER_FLAGS[AUTO])


def _flag(option):
    return "--" + str(option).replace("_", "-")


def value_problem(option, value, flags):
    """(problem, fix) of one router option's value, or None. FLAGS (a RouterFlags) has the option's flag."""
    dest, kind, choices, _replacement = flags.flags[_flag(option)]
    if value in (None, ""):
        return None
    if kind == "switch":
        if not isinstance(value, bool):
            return f"a switch: true or false ({flags.label})", f"write {option}: true (a YAML boolean, unquoted)"
        return None
    values = value if isinstance(value, list) and kind == "list" else [value]
    for one in values:
        if choices and str(one) not in choices:
            return (f"not a choice of the router ({flags.label})",
                    f"write one of {', '.join(choices)}{suggest(one, choices)}")
        kind_of_value = flags.types.get(dest)
        if kind_of_value in ("int", "float") and (isinstance(one, bool) or flag_value_problem(str(one), kind_of_value)):
            return (f"{flag_value_problem(str(one), kind_of_value) or 'a boolean, not a number'} ({flags.label})",
                    f"write a {'whole ' if kind_of_value == 'int' else ''}number, unquoted and without units")
    return None


def option_problem(option, value, flags):
    """(problem, fix) of one entry of sglang_router_options, or None."""
    flag = _flag(option)
    if flag in flags.flags:
        return value_problem(option, value, flags)
    options = [known[2:].replace("-", "_") for known in flags.flags]
    return flags.lacks(flag), f"remove it{suggest(option, options)}"


def taken_elsewhere(check, flags):
    """' (smg 1.13.0 takes it: ...)' when another generation takes what FLAGS refuses; CHECK
    (a RouterFlags -> problem or None) is the refused check."""
    for generation in GENERATIONS:
        other = ROUTER_FLAGS[generation]
        if other is not flags and check(other) is None:
            return (f" ({router_name(generation)} takes it: set sglang_router_generation: {generation}"
                    " if the image runs it)")
    return ""


def _refusal(host, variable, value, check, flags):
    """The problem of one router option (CHECK against FLAGS), or None."""
    found = check(flags)
    if not found:
        return None
    return variable_problem(host, variable, value, found[0], found[1] + taken_elsewhere(check, flags))


def _refusals(host, checks, flags):
    """The problems of CHECKS, each (variable, value, check against a RouterFlags)."""
    return [found for found in (_refusal(host, variable, value, check, flags) for variable, value, check in checks)
            if found]


def _dedicated_problems(host, role_vars, flags):
    """Router options set from their own variables (sglang_router_policy, ...)."""
    return _refusals(host, ((name, role_vars.get(name), partial(value_problem, option, role_vars.get(name)))
                            for option, name in ROUTER_OPTION_VARS), flags)


def _options_map_problems(host, role_vars, flags):
    """Entries of sglang_router_options, in their order."""
    problems = []
    for option, value in (role_vars.get("sglang_router_options") or {}).items():
        variable = f"sglang_router_options.{option}"
        if option in DEDICATED:
            problems.append(variable_problem(host, variable, value, f"the collection sets --{option.replace('_', '-')} from "
                                             f"{DEDICATED[option]}, and checks it there", f"write {DEDICATED[option]}: {value} instead"))
        elif option not in SECRET_OPTIONS:
            problems += _refusals(host, [(variable, value, partial(option_problem, option, value))], flags)
    return problems


def _extra_args_problems(host, role_vars, flags):
    """Flags of sglang_router_extra_args, read as the router's parser reads them."""
    problems = []
    extra = [str(a) for a in role_vars.get("sglang_router_extra_args") or []]
    for token in extra:
        option = token.split("=", maxsplit=1)[0][2:].replace("-", "_") if token.startswith("--") else ""
        if option in DEDICATED:
            problems.append(variable_problem(host, "sglang_router_extra_args", token, f"the collection sets {token.split('=')[0]} "
                                             f"from {DEDICATED[option]}, and checks it there",
                                             f"remove it and write {DEDICATED[option]}"))
        elif option in FROM_INVENTORY:
            problems.append(variable_problem(host, "sglang_router_extra_args", token,
                                             f"the collection gives the router {FROM_INVENTORY[option]}",
                                             "remove it: the workers come from the sglang_prefill and sglang_decode groups"))
    for _origin, flag, value, problem, fix in check_argv(extra, ["sglang_router_extra_args"] * len(extra),
                                                         flags.flags, 0, flags.types, None):
        if flag not in ("--api-key", "--control-plane-api-keys"):
            text = flag + (f" {value}" if value not in (None, "") else "")
            problems.append((host, f"sglang_router_extra_args: {text}: {problem} ({flags.label}); {fix}"))
    return problems


def _endpoint_problems(host, role_vars):
    problems = []
    for variable, example in ENDPOINT_VARIABLES.items():
        value = role_vars.get(variable)
        problem = endpoint_problem(value) if isinstance(value, str) and value else ""
        if problem:
            problems.append(variable_problem(host, variable, value, problem, f"write the path alone, such as {example}"))
    return problems


def _router_problems(host, role_vars):
    flags = router_flags(role_vars)
    return (_endpoint_problems(host, role_vars) + _dedicated_problems(host, role_vars, flags)
            + _options_map_problems(host, role_vars, flags) + _extra_args_problems(host, role_vars, flags))


def pd_check_router_options(model):
    """Every router option, from its own variable, the options map or extra args, is one the router takes."""
    problems = []
    for router in model["routers"]:
        problems += _router_problems(router["host"], router["role_vars"])
    return merge_problems(problems)
