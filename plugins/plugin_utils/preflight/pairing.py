# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight check that prefill and decode workers can hand the KV cache to each other.

SGLang checks the pair only at the first request: a fleet that disagrees starts, passes its health checks and fails
that request. SOURCES quotes SGLang's own words where they say what must match (tests/unit/scripts/ find each quote).
"""
from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.checks import int_option, option_variable, origin_of
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems, show_value, variable_problem

KV_CONNECTION = "sglang/srt/disaggregation/common/conn.py"
KV_CLASSES = "sglang/srt/disaggregation/utils.py"

# SGLang option: what differs when prefill and decode disagree on it.
PAIRED_OPTIONS = {
    "model_path": "the model",
    "served_model_name": "the model name clients send",
    "kv_cache_dtype": "the KV cache's data type",
    "page_size": "the KV cache's page size",
    "disaggregation_transfer_backend": "the KV transfer backend",
}

# Option: (file of the pinned release, the words there that require it). The model and its name
# have no quote: SGLang does not compare them, though one model's KV cache is noise to another.
SOURCES = {
    "kv_cache_dtype": (KV_CONNECTION, "Both servers must use the same --kv-cache-dtype value."),
    "page_size": (KV_CONNECTION, "Both servers must use the same --page-size value."),
    # Each side builds its KV manager, sender or receiver and bootstrap server from its own backend.
    "disaggregation_transfer_backend": (KV_CLASSES, "if transfer_backend == TransferBackend.MOONCAKE:"),
    "decode_attn_cp_size": (KV_CONNECTION, "should be equal to 1"),
    "decode_pp_size": (KV_CONNECTION, "should be equal to prefill pp size ({info.pp_size}) or 1"),
}


def _cited(key):
    source, words = SOURCES[key]
    return f" ({source}: \"{words}\")"


def _layout_problems(prefills, decodes):
    """Decode workers whose parallel layout no prefill can send to."""
    problems = []
    prefill_pp = sorted({int_option(w["launch"]["options"], "pp_size") for w in prefills} - {None})
    for worker in decodes:
        options, launch = worker["launch"]["options"], worker["launch"]
        what = f"decode worker {worker['name']}"
        cp_size = int_option(options, "attn_cp_size")
        if cp_size not in (None, 1):
            problems.append(variable_problem(worker["host"], option_variable(launch, "attn_cp_size"), options["attn_cp_size"],
                                             f"a decode worker receives the KV cache with context parallelism off ({what})"
                                             + _cited("decode_attn_cp_size"),
                                             "remove attn_cp_size from the decode options (context parallelism is for prefill)"))
        pp_size = int_option(options, "pp_size")
        wrong = [size for size in prefill_pp if pp_size not in (1, size)]
        if pp_size is not None and wrong:
            problems.append(variable_problem(worker["host"], option_variable(launch, "pp_size"), options.get("pp_size"),
                                             f"a decode worker's pp_size must be 1 or the prefill's, and prefill runs "
                                             f"pp_size {', '.join(str(s) for s in wrong)} ({what})" + _cited("decode_pp_size"),
                                             "write pp_size: 1" + (f" or {wrong[0]}" if wrong[0] != 1 else "") + " for the decode workers"))
    return problems


def pd_check_pairing(model):
    """Every serving prefill and decode worker agrees on PAIRED_OPTIONS; decode layouts fit the prefill's."""
    problems = []
    workers = [w for w in model["workers"] if w["serves_http"]]
    for option, meaning in PAIRED_OPTIONS.items():
        seen = {}
        for worker in workers:
            value = worker["launch"]["options"].get(option)
            seen.setdefault(show_value(value), []).append(worker)
        if len(seen) < 2:
            continue
        described = "; ".join(
            ", ".join(f"{w['host']} {w['mode']} worker {w['name']} ({origin_of(w['launch'], option)})" for w in group)
            + f" use {shown}" for shown, group in sorted(seen.items(), key=lambda item: -len(item[1])))
        cited = _cited(option) if option in SOURCES else ""
        problems.append(f"{option}: prefill and decode workers must agree on {meaning}{cited}, but {described}; "
                        f"set {option} once for both modes (sglang_worker_options or the role variable), "
                        f"not in sglang_worker_prefill_options / sglang_worker_decode_options or a worker's args")
    prefills = [w for w in model["workers"] if w["mode"] == "prefill"]
    decodes = [w for w in model["workers"] if w["mode"] == "decode"]
    return problems + merge_problems(_layout_problems(prefills, decodes))
