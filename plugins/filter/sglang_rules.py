# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks of values SGLang 0.5.14 refuses when a server starts.

The flag list (module_utils/_sglang_flags_v0_5_14.py) knows each flag's type and choices;
these are the relations SGLang's ServerArgs asserts on top of them. A worker that breaks one
exits at start and is restarted until its health budget runs out.
"""
from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd_checks import _origin_of, _problem, merge_problems


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def worker_value_problems(options):
    """``[(option, value, problem, fix)]`` of one worker's merged SGLang options."""
    found = []
    fraction = _number(options.get("mem_fraction_static"))
    if options.get("mem_fraction_static") not in (None, "") and (fraction is None or not 0 < fraction < 1):
        found.append(("mem_fraction_static", options["mem_fraction_static"], "SGLang wants a fraction of GPU memory",
                      "write a number between 0 and 1, such as 0.85"))
    page = _number(options.get("page_size"))
    if options.get("page_size") not in (None, "") and (page is None or page < 1 or page != int(page)):
        found.append(("page_size", options["page_size"], "SGLang wants a page size of at least 1 token",
                      "write a positive whole number of tokens, such as 64"))
        page = None
    chunk = _number(options.get("chunked_prefill_size"))
    if page and chunk and chunk > 0 and chunk % page:
        found.append(("chunked_prefill_size", options["chunked_prefill_size"],
                      f"SGLang wants it to be a multiple of the page size {int(page)}",
                      f"write a multiple of {int(page)}, such as {int(chunk // page * page) or int(page)}"))
    name = options.get("served_model_name")
    if isinstance(name, str) and ":" in name:
        found.append(("served_model_name", name, "SGLang refuses a served model name with a colon",
                      "write the name without ':'"))
    return found


def pd_check_sglang_values(model):
    """Every worker's options pass the value rules SGLang asserts at start."""
    problems = []
    for worker in model["workers"]:
        for option, value, problem, fix in worker_value_problems(worker["launch"]["options"]):
            problems.append(_problem(worker["host"], _origin_of(worker["launch"], option), value,
                                     f"{problem} ({worker['mode']} worker {worker['name']})", fix))
    return merge_problems(problems)


class FilterModule:
    """SGLang value preflight filters."""

    def filters(self):
        return {"pd_check_sglang_values": pd_check_sglang_values}
