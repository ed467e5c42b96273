# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight check that prefill and decode workers can hand requests to each other.

A decode worker receives the KV cache a prefill worker computed, page by page, through the
transfer engine both run: they must serve the same model under the same name, and agree on
the KV cache's data type, its page size and the transfer backend. A fleet that disagrees
starts, answers its health checks, and fails its first request.
"""
from __future__ import annotations

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd_checks import _origin_of, _show

# SGLang option: what differs when prefill and decode disagree on it.
PAIRED_OPTIONS = {
    "model_path": "the model",
    "served_model_name": "the model name clients send",
    "kv_cache_dtype": "the KV cache's data type",
    "page_size": "the KV cache's page size",
    "disaggregation_transfer_backend": "the KV transfer backend",
}


def pd_check_pairing(model):
    """Every serving prefill and decode worker agrees on the options of PAIRED_OPTIONS."""
    problems = []
    workers = [w for w in model["workers"] if w["serves_http"]]
    for option, meaning in PAIRED_OPTIONS.items():
        seen = {}
        for worker in workers:
            value = worker["launch"]["options"].get(option)
            seen.setdefault(_show(value), []).append(worker)
        if len(seen) < 2:
            continue
        described = "; ".join(
            ", ".join(f"{w['host']} {w['mode']} worker {w['name']} ({_origin_of(w['launch'], option)})" for w in group)
            + f" use {shown}" for shown, group in sorted(seen.items(), key=lambda item: -len(item[1])))
        problems.append(f"{option}: prefill and decode workers must agree on {meaning}, but {described}; "
                        f"set {option} once for both modes (sglang_worker_options or the role variable), "
                        f"not in sglang_worker_prefill_options / sglang_worker_decode_options or a worker's args")
    return problems


class FilterModule:
    """PD pairing preflight filters."""

    def filters(self):
        return {"pd_check_pairing": pd_check_pairing}
