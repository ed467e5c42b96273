# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The relations SGLang asserts at start, read from command lines as SGLang reads them.

That each rule refuses exactly what SGLang's own assertion refuses is checked against the
pinned release in tests/unit/scripts/test_sglang_rules_match_sources.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import pairing as pairing_checks, router_rules, sglang_rules
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import checks

from test_pd_checks import inventory, model_of  # same folder (pytest puts it on sys.path)

TABLE = checks.flag_table({"sglang_pd_sglang_version": "0.5.14"})[1]


def refused(*argv):
    args, _given = sglang_rules.server_args(list(argv), 0, TABLE)
    return [rule.asserts for rule in sglang_rules.refused_rules(args)]


@pytest.mark.parametrize("argv, asserts", [
    (["--disaggregation-mode", "prefill", "--page-size", "64", "--chunked-prefill-size", "100"],
     ["self.chunked_prefill_size % self.page_size == 0"]),
    # SGLang does not check the chunked prefill size of decode servers.
    (["--disaggregation-mode", "decode", "--page-size", "64", "--chunked-prefill-size", "100"], []),
    # Under DP attention SGLang divides the chunk by dp_size first: 2048 / 8 = 256 is no multiple of 512.
    (["--disaggregation-mode", "prefill", "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention",
      "--page-size", "512", "--chunked-prefill-size", "2048"], ["self.chunked_prefill_size % self.page_size == 0"]),
    (["--tp-size", "8", "--dp-size", "3", "--enable-dp-attention"], ["self.tp_size % self.dp_size == 0"]),
    # dp_size 1 turns DP attention and the DP LM head off before SGLang asserts on them.
    (["--dp-size", "1", "--enable-dp-lm-head"], []),
    (["--tp-size", "8", "--dp-size", "2", "--enable-dp-lm-head"], ["self.enable_dp_attention"]),
    (["--tp-size", "8", "--nnodes", "3"], ["self.tp_size * self.pp_size % self.nnodes == 0"]),
    (["--tp-size", "16", "--nnodes", "2", "--dp-size", "2"],
     ["not (self.dp_size > 1 and self.nnodes != 1 and (not self.enable_dp_attention))"]),
    (["--served-model-name", "glm:5.2"], ["':' not in self.served_model_name"]),
    (["--served-model-name", "s3://models/glm:5.2"], []),
    (["--tp-size", "8", "--attn-cp-size", "3"],
     ["self.tp_size % self.attn_cp_size == 0", "self.tp_size % (self.dp_size * self.attn_cp_size) == 0"]),
    (["--tp-size", "8", "--attn-cp-size", "2", "--moe-dp-size", "2", "--ep-size", "2"],
     ["self.ep_size * self.moe_dp_size == self.tp_size"]),
    (["--enable-priority-scheduling", "--schedule-policy", "lpm"], ["self.schedule_policy in ['fcfs', 'lof']"]),
    (["--tp-size", "8", "--page-size", "sixty-four", "--chunked-prefill-size", "100"], []),  # the flags check reports the type
    (["--tp-size", "8", "--ep-size", "8", "--dp-size", "8", "--enable-dp-attention", "--page-size", "64",
      "--chunked-prefill-size", "16384", "--served-model-name", "glm-5.2-fp8"], []),
])
def test_sglang_refuses(argv, asserts):
    assert refused(*argv) == asserts


def test_the_message_names_host_variables_values_source_and_fix():
    groups, hostvars = inventory(p0={"sglang_worker_options": {"page_size": 64, "chunked_prefill_size": 1000}})
    problems = sglang_rules.pd_check_sglang_values(model_of(groups, hostvars), hostvars)
    assert problems == [
        'p0: chunked_prefill_size = 1000 (sglang_worker_options), disaggregation_mode = "prefill" (inventory group '
        'sglang_prefill), page_size = 64 (sglang_worker_options): SGLang 0.5.14 refuses this prefill worker sglang-prefill: '
        'chunked_prefill_size (divided by dp_size under DP attention) must be a multiple of page_size '
        '(sglang/srt/server_args.py ServerArgs.check_server_args: self.chunked_prefill_size % self.page_size == 0); '
        'write a chunked prefill size that is a multiple of 64, such as 960']


@pytest.mark.parametrize("options, variable", [
    ({"mem_fraction_static": 1.0}, "sglang_worker_options.mem_fraction_static = 1.0"),
    ({"mem_fraction_static": "x"}, 'sglang_worker_options.mem_fraction_static = "x"'),
    ({"page_size": 0}, "sglang_worker_options.page_size = 0"),
    ({"page_size": -16}, "sglang_worker_options.page_size = -16"),
])
def test_values_sglang_fails_on_later(options, variable):
    groups, hostvars = inventory(p0={"sglang_worker_options": options})
    problems = sglang_rules.pd_check_sglang_values(model_of(groups, hostvars), hostvars)
    assert len(problems) == 1 and problems[0].startswith("p0: " + variable), problems


@pytest.mark.parametrize("options, fragment", [
    ({"page_size": 2.5}, "--page-size 2.5: not a whole number"),
    ({"mem_fraction_static": "most"}, "--mem-fraction-static most: not a number (read as float)"),
    ({"tp_size": "8x"}, "--tp-size 8x: not a number (read as int)"),
])
def test_values_of_the_wrong_type(options, fragment):
    groups, hostvars = inventory(p0={"sglang_worker_options": options})
    problems = checks.pd_check_flags(model_of(groups, hostvars), hostvars)
    assert len(problems) == 1 and fragment in problems[0], problems


def test_decode_layout_must_fit_the_prefill():
    groups, hostvars = inventory(d0={"sglang_worker_decode_options": {"attn_cp_size": 2, "pp_size": 3}},
                                 p0={"sglang_worker_prefill_options": {"pp_size": 2}})
    problems = pairing_checks.pd_check_pairing(model_of(groups, hostvars))
    assert problems == [
        'd0: sglang_worker_decode_options.attn_cp_size = 2: a decode worker receives the KV cache with context parallelism '
        'off (decode worker sglang-decode) (sglang/srt/disaggregation/common/conn.py: "should be equal to 1"); remove '
        'attn_cp_size from the decode options (context parallelism is for prefill)',
        "d0: sglang_worker_decode_options.pp_size = 3: a decode worker's pp_size must be 1 or the prefill's, and prefill "
        "runs pp_size 2 (decode worker sglang-decode) (sglang/srt/disaggregation/common/conn.py: \"should be equal to "
        "prefill pp size ({info.pp_size}) or 1\"); write pp_size: 1 or 2 for the decode workers"]
    # Two prefill layouts the decode fits neither of; a prefill without pp_size runs 1, and 1 is the only fix.
    groups, hostvars = inventory(d0={"sglang_worker_decode_options": {"pp_size": 3}},
                                 p0={"sglang_worker_prefill_options": {"pp_size": 2}},
                                 p1={"sglang_pd_service_address": "10.0.0.3", "sglang_worker_prefill_options": {"pp_size": 4}})
    groups["sglang_prefill"].append("p1")
    [problem] = pairing_checks.pd_check_pairing(model_of(groups, hostvars))
    assert "and prefill runs pp_size 2, 4 (decode worker" in problem and problem.endswith("write pp_size: 1 or 2 for the decode workers")
    groups, hostvars = inventory(d0={"sglang_worker_decode_options": {"pp_size": 3}})
    [problem] = pairing_checks.pd_check_pairing(model_of(groups, hostvars))
    assert "and prefill runs pp_size 1 (decode worker" in problem and problem.endswith("; write pp_size: 1 for the decode workers")
    groups, hostvars = inventory(d0={"sglang_worker_decode_options": {"pp_size": 1}},
                                 p0={"sglang_worker_prefill_options": {"pp_size": 2}})
    assert pairing_checks.pd_check_pairing(model_of(groups, hostvars)) == []


@pytest.mark.parametrize("router_vars, fragment", [
    ({"sglang_router_log_level": "verbose"}, 'sglang_router_log_level = "verbose": not a valid choice'),
    ({"sglang_router_policy": "least_load"}, 'sglang_router_policy = "least_load": not a valid choice'),
    ({"sglang_router_options": {"policy": "random"}}, 'sglang_router_options.policy = "random": the collection sets --policy '
                                                      'from sglang_router_policy'),
    ({"sglang_router_options": {"max_concurent_requests": 64}}, "has no flag --max-concurent-requests; remove it "
                                                                "(did you mean max_concurrent_requests?)"),
    ({"sglang_router_options": {"max_concurrent_requests": "64k"}}, 'max_concurrent_requests = "64k": not a number'),
    ({"sglang_router_options": {"dp_aware": "yes"}}, 'sglang_router_options.dp_aware = "yes": a switch'),
    ({"sglang_router_request_timeout_secs": "10m"}, 'sglang_router_request_timeout_secs = "10m": not a number'),
    ({"sglang_router_extra_args": ["--history-backend", "sqlite"]}, "--history-backend sqlite: not a valid choice"),
])
def test_router_options_are_what_the_router_parses(router_vars, fragment):
    # sglang-router 0.3.2's parser; the other generations and auto: test_router_rules.py.
    groups, hostvars = inventory(d0=dict(router_vars, sglang_router_generation="sglang-router"))
    problems = router_rules.pd_check_router_options(model_of(groups, hostvars))
    assert len(problems) == 1 and fragment in problems[0], problems


def test_router_defaults_pass():
    groups, hostvars = inventory()
    assert router_rules.pd_check_router_options(model_of(groups, hostvars)) == []
