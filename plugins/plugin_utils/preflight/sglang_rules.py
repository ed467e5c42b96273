# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight checks of the relations SGLang's ``ServerArgs`` asserts when a server starts (a worker breaking one exits at start).

RULES quote the pinned release as ``ast.unparse`` prints it: the enclosing condition (``guard``) and the assertion
(``raise`` where it raises); tests/unit/scripts/test_sglang_rules_match_sources.py finds every quote there.
"""
from __future__ import annotations

import functools
import re
from types import SimpleNamespace
from typing import NamedTuple

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.checks import (
    flag_table, flag_tokens, option_variable)
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import merge_problems, show_value, variable_problem

SOURCE = "sglang/srt/server_args.py"
# The sha256 of the server_args.py the rules below were reviewed against: the test fails when
# the shipped flag table is regenerated from another release and the rules were not reviewed.
REVIEWED_SOURCE_SHA256 = "e1eebd7fa8e5b0c7cb31371e24b4700dd2cdfe6c4b6edd0e417c6a71fade48b8"
REVIEWED_METHODS = ("check_server_args", "_handle_data_parallelism", "_handle_context_parallelism")
# sglang/srt/utils/runai_utils.py SUPPORTED_SCHEMES: a served model name that is an object-store
# URI is not checked for colons.
OBJECT_STORE_SCHEMES = ("s3://", "gs://", "az://")


class Rule(NamedTuple):
    """One assertion of ServerArgs, quoted; ``refused(args)`` evaluates the quote as SGLang does."""

    method: str
    guard: str
    asserts: str
    says: str
    fix: object  # text, or a function of the options that returns it

    def refused(self, args):
        """Whether SGLang refuses ARGS: the guard holds and the assertion fails (or raises)."""
        scope = {"self": args, "is_runai_obj_uri": lambda name: str(name).lower().startswith(OBJECT_STORE_SCHEMES)}
        # The quotes are this module's constants, as ast.unparse prints the pinned release.
        return bool(eval(_compiled(self.guard or "True"), scope)  # pylint: disable=eval-used
                    and (self.asserts == "raise" or not eval(_compiled(self.asserts), scope)))  # pylint: disable=eval-used

    def options(self):
        """The options the assertion reads, in order of appearance."""
        return list(dict.fromkeys(re.findall(r"self\.(\w+)", f"{self.guard} {self.asserts}")))


@functools.lru_cache(maxsize=None)
def _compiled(expression):
    return compile(expression, SOURCE, "eval")


RULES = (
    Rule("check_server_args", "", "self.tp_size * self.pp_size % self.nnodes == 0",
         "tp_size × pp_size must be a multiple of nnodes (every node runs the same number of GPUs)",
         "make tp_size × pp_size a multiple of nnodes, or correct nnodes"),
    Rule("check_server_args", "", "not (self.dp_size > 1 and self.nnodes != 1 and (not self.enable_dp_attention))",
         "data parallelism across nodes needs DP attention", "set sglang_worker_enable_dp_attention: true, or dp_size: 1"),
    Rule("check_server_args", "", "self.base_gpu_id >= 0",
         "the first GPU must be GPU 0 or above", "give the worker gpus such as 0-7 in sglang_pd_*_workers"),
    Rule("check_server_args", "", "self.gpu_id_step >= 1",
         "the GPU id step must be at least 1", "remove gpu_id_step or write 1"),
    Rule("check_server_args", "", "self.moe_dense_tp_size in (None, 1, self.tp_size)",
         "moe_dense_tp_size can only be 1 or tp_size", "write moe_dense_tp_size: 1, or leave it out"),
    Rule("check_server_args", "(not is_runai_obj_uri(self.served_model_name))", "':' not in self.served_model_name",
         "the served model name cannot hold a colon (SGLang reserves 'model:adapter' for LoRA)", "write the name without ':'"),
    Rule("check_server_args", "(self.chunked_prefill_size > 0 and self.disaggregation_mode != 'decode')", "self.chunked_prefill_size % self.page_size == 0",
         "chunked_prefill_size (divided by dp_size under DP attention) must be a multiple of page_size",
         lambda a: f"write a chunked prefill size that is a multiple of {a.page_size}"
                   f"{' × dp_size' if a.enable_dp_attention else ''}, such as {max(a.chunked_prefill_size // a.page_size, 1) * a.page_size}"),
    Rule("check_server_args", "(self.enable_pdmux)", "self.disaggregation_mode == 'null'",
         "PD multiplexing cannot run in a prefill/decode disaggregated fleet", "remove enable_pdmux"),
    Rule("check_server_args", "", "self.tokenizer_worker_num > 0",
         "tokenizer_worker_num must be at least 1", "write 1 or more, or leave it out"),
    Rule("check_server_args", "", "self.detokenizer_worker_num > 0",
         "detokenizer_worker_num must be at least 1", "write 1 or more, or leave it out"),
    Rule("check_server_args", "(self.enable_priority_scheduling)", "self.schedule_policy in ['fcfs', 'lof']",
         "priority scheduling needs the fcfs or lof schedule policy", "write schedule_policy: fcfs (or lof)"),
    Rule("check_server_args", "", "self.schedule_conservativeness >= 0",
         "schedule_conservativeness cannot be negative", "write 0 or more (1.0 is the default)"),
    Rule("check_server_args", "(self.enable_two_batch_overlap and self.moe_a2a_backend == 'none')", "raise",
         "two-batch overlap needs an all-to-all MoE backend", "set moe_a2a_backend (such as mori), or remove enable_two_batch_overlap"),
    Rule("check_server_args", "(self.kv_canary_sweep_interval > 0 and self.kv_canary == 'none')", "raise",
         "a KV canary sweep interval needs kv_canary log or raise", "set kv_canary: log, or remove the interval"),
    Rule("_handle_data_parallelism", "(self.enable_dp_attention)", "self.tp_size % self.dp_size == 0",
         "under DP attention tp_size must be a multiple of dp_size", "make dp_size divide tp_size (8 GPUs: dp 1, 2, 4 or 8)"),
    Rule("_handle_data_parallelism", "(self.enable_dp_lm_head)", "self.enable_dp_attention",
         "enable_dp_lm_head needs DP attention (with dp_size above 1)",
         "set sglang_worker_enable_dp_attention: true with dp_size above 1, or remove enable_dp_lm_head"),
    Rule("_handle_context_parallelism", "(self.attn_cp_size > 1)", "self.tp_size % self.attn_cp_size == 0",
         "tp_size must be a multiple of attn_cp_size", "make attn_cp_size divide tp_size"),
    Rule("_handle_context_parallelism", "(self.attn_cp_size > 1)", "self.tp_size % (self.dp_size * self.attn_cp_size) == 0",
         "tp_size must be a multiple of dp_size × attn_cp_size", "make dp_size × attn_cp_size divide tp_size"),
    Rule("_handle_context_parallelism", "(self.attn_cp_size > 1)", "not self.enable_aiter_allreduce_fusion",
         "AITER all-reduce fusion does not work with context parallelism", "remove enable_aiter_allreduce_fusion"),
    Rule("_handle_context_parallelism", "(self.moe_dp_size > 1)", "self.tp_size % self.moe_dp_size == 0",
         "tp_size must be a multiple of moe_dp_size", "make moe_dp_size divide tp_size"),
    Rule("_handle_context_parallelism", "(self.moe_dp_size > 1)", "self.ep_size * self.moe_dp_size <= self.tp_size",
         "ep_size × moe_dp_size cannot exceed tp_size", "lower ep_size or moe_dp_size"),
    Rule("_handle_context_parallelism", "(self.moe_dp_size > 1)", "self.pp_size == 1",
         "MoE data parallelism does not work with pipeline parallelism", "write pp_size: 1, or moe_dp_size: 1"),
    Rule("_handle_context_parallelism", "(self.moe_dp_size > 1) and (self.ep_size > 1)", "self.ep_size * self.moe_dp_size == self.tp_size",
         "with expert parallelism, ep_size × moe_dp_size must equal tp_size", "make ep_size × moe_dp_size equal tp_size"),
    Rule("_handle_context_parallelism", "(self.moe_dp_size > 1)", "not self.enable_aiter_allreduce_fusion",
         "AITER all-reduce fusion does not work with MoE data parallelism", "remove enable_aiter_allreduce_fusion"),
    Rule("_handle_context_parallelism", "(self.attn_cp_size != self.moe_dp_size)", "self.moe_dp_size == 1",
         "moe_dp_size must be 1 or equal attn_cp_size", "write moe_dp_size: 1, or the attn_cp_size"),
)


def _typed(value, kind):
    if kind == "int" and float(value) != int(float(value)):
        raise ValueError(value)
    return int(float(value)) if kind == "int" else float(value) if kind == "float" else str(value)


def server_args(argv, start, table):
    """``(args, given)``: every dest of the flag table as SGLang checks it, and the dests given -> (flag position, value).

    A dest is None when SGLang decides it at start or its value has the wrong type (the flags check reports it).
    ``_handle_data_parallelism``'s adjustments are applied, as SGLang does before ``check_server_args``.
    """
    types = table.TYPES
    values = {entry[0]: table.DEFAULTS.get(entry[0]) for entry in table.FLAGS.values()}
    given = {}
    for position, flag, taken in flag_tokens(argv, table.FLAGS, start):
        if flag not in table.FLAGS:
            continue
        dest, kind = table.FLAGS[flag][:2]
        try:
            values[dest] = (not flag.startswith("--no-") if kind == "switch" else [_typed(v, types.get(dest, "str")) for v in taken]
                            if kind == "list" else _typed(taken[0], types.get(dest, "str")) if taken else None)
        except ValueError:
            values[dest] = None
        given[dest] = (position, values[dest])
    args = SimpleNamespace(**values)
    if (args.dp_size or 1) == 1:
        args.enable_dp_attention = args.enable_dp_lm_head = False
    if args.enable_dp_attention and args.chunked_prefill_size and args.dp_size:
        args.chunked_prefill_size = args.chunked_prefill_size // args.dp_size
    return args, given


def refused_rules(args):
    """The RULES ARGS break. A rule whose options SGLang decides at start (None) is skipped."""
    found = []
    for rule in RULES:
        if any(getattr(args, option, None) is None for option in rule.options()):
            continue
        try:
            refused = rule.refused(args)
        except ZeroDivisionError:  # SGLang fails on the same division
            refused = True
        if refused:
            found.append(rule)
    return found


def _collection_rules(options):
    """[(option, problem, fix)]: values SGLang takes at start and fails on later."""
    found = []
    if options.get("mem_fraction_static") not in (None, "") and not _reads_as(options["mem_fraction_static"], float, lambda n: 0 < n < 1):
        found.append(("mem_fraction_static", "it is the fraction of GPU memory for weights and KV cache "
                      "(SGLang fails allocating its KV cache beyond 1)", "write a number between 0 and 1, such as 0.85"))
    if options.get("page_size") not in (None, "") and not _reads_as(options["page_size"], int, lambda n: n >= 1):
        found.append(("page_size", "SGLang wants a page size of at least 1 token", "write a positive whole number of tokens, such as 64"))
    return found


def _reads_as(value, kind, valid):
    """Whether VALUE converts to KIND and the number is VALID."""
    try:
        return valid(kind(value))
    except (TypeError, ValueError):
        return False


def pd_check_sglang_values(model, hostvars):
    """Every worker's options pass the relations SGLang asserts at start."""
    problems = []
    for worker in model["workers"]:
        launch, host = worker["launch"], worker["host"]
        what = f"{worker['mode']} worker {worker['name']}"
        refused_values = _collection_rules(launch["options"])
        problems += [variable_problem(host, option_variable(launch, option), launch["options"][option], f"{problem} ({what})", fix)
                     for option, problem, fix in refused_values]
        version, table = flag_table(hostvars[host])
        if table is None or any(option == "page_size" for option, _problem, _fix in refused_values):
            continue
        args, given = server_args(launch["argv"], launch["options_start"], table)
        for rule in refused_rules(args):
            seen = ", ".join(f"{option} = {show_value(given[option][1])} ({launch['origins'][given[option][0]]})" if option in given
                             else f"{option} = {show_value(getattr(args, option))} (SGLang's default)" for option in rule.options())
            problems.append((host, f"{seen}: SGLang {version} refuses this {what}: {rule.says} ({SOURCE} ServerArgs.{rule.method}: "
                                   f"{rule.asserts}); {rule.fix(args) if callable(rule.fix) else rule.fix}"))
    return merge_problems(problems)
