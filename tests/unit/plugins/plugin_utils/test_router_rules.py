# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Router options are checked against the flag table of the router generation in use.

sglang_router_generation picks the table: sglang-router (0.3.2) or smg (1.13.0); with auto
(the default) an option is refused only when no generation takes it.
"""

from __future__ import annotations

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import router_rules

from test_pd_checks import inventory, model_of  # same folder (pytest puts it on sys.path)

SINGLE = sorted(router_rules.GENERATIONS)


def problems_of(generation, **router_vars):
    if generation:
        router_vars["sglang_router_generation"] = generation
    groups, hostvars = inventory(d0=router_vars)
    return router_rules.pd_check_router_options(model_of(groups, hostvars))


@pytest.mark.parametrize("generation, router_vars", [
    ("smg", {"sglang_router_policy": "least_load"}),
    ("auto", {"sglang_router_policy": "least_load"}),
    (None, {"sglang_router_decode_policy": "prefix_hash"}),
    ("auto", {"sglang_router_prefill_policy": "bucket"}),
    ("auto", {"sglang_router_options": {"mini_lb": True}}),
    ("auto", {"sglang_router_extra_args": ["--mini-lb", "--encode-policy", "consistent_hashing"]}),
    ("sglang-router", {"sglang_router_options": {"mini_lb": True}}),
    ("smg", {"sglang_router_policy": "passthrough"}),
])
def test_options_a_generation_in_use_takes_pass(generation, router_vars):
    assert problems_of(generation, **router_vars) == []


@pytest.mark.parametrize("generation, router_vars, fragments", [
    ("sglang-router", {"sglang_router_policy": "least_load"},
     ['d0: sglang_router_policy = "least_load": not a valid choice (sglang-router 0.3.2); write one of random,',
      "(smg 1.13.0 takes it: set sglang_router_generation: smg if the image runs it)"]),
    ("smg", {"sglang_router_options": {"mini_lb": True}},
     ["d0: sglang_router_options.mini_lb = true: smg 1.13.0 has no flag --mini-lb; remove it",
      "(sglang-router 0.3.2 takes it: set sglang_router_generation: sglang-router if the image runs it)"]),
    ("smg", {"sglang_router_extra_args": ["--mini-lb"]},
     ["d0: sglang_router_extra_args: --mini-lb: no such flag (smg 1.13.0)"]),
    ("smg", {"sglang_router_policy": "least_loaded"},
     ["not a valid choice (smg 1.13.0)", "(did you mean least_load?)"]),
    ("auto", {"sglang_router_policy": "least_loaded"},
     ['sglang_router_policy = "least_loaded": not a valid choice (sglang-router 0.3.2 or smg 1.13.0)',
      "least_load", "manual", "(did you mean least_load?)"]),
    (None, {"sglang_router_log_level": "verbose"},
     ['sglang_router_log_level = "verbose": not a valid choice (sglang-router 0.3.2 or smg 1.13.0)']),
    ("auto", {"sglang_router_options": {"max_concurent_requests": 64}},
     ["sglang-router 0.3.2 has no flag --max-concurent-requests, nor does smg 1.13.0; remove it "
      "(did you mean max_concurrent_requests?)"]),
    ("auto", {"sglang_router_options": {"encode_policy": "fastest"}},
     ['sglang_router_options.encode_policy = "fastest": not a valid choice']),
    ("auto", {"sglang_router_extra_args": ["--history-backend", "sqlite"]},
     ["--history-backend sqlite: not a valid choice (sglang-router 0.3.2 or smg 1.13.0)"]),
])
def test_options_the_generation_in_use_refuses_are_named(generation, router_vars, fragments):
    problems = problems_of(generation, **router_vars)
    assert len(problems) == 1, problems
    for fragment in fragments:
        assert fragment in problems[0]


def test_auto_is_the_default_and_stands_in_for_unknown_generations():
    auto = router_rules.ROUTER_FLAGS["auto"]
    assert router_rules.router_flags({}) is auto
    assert router_rules.router_flags({"sglang_router_generation": None}) is auto
    assert router_rules.router_flags({"sglang_router_generation": "smg2"}) is auto


def test_generations_agree_on_what_they_share_but_choices():
    first, second = (router_rules.GENERATIONS[g] for g in SINGLE)
    for flag in set(first.FLAGS) & set(second.FLAGS):
        assert first.FLAGS[flag][:2] + first.FLAGS[flag][3:] == second.FLAGS[flag][:2] + second.FLAGS[flag][3:], flag
    for dest in set(first.TYPES) & set(second.TYPES):
        assert first.TYPES[dest] == second.TYPES[dest], dest


@pytest.mark.parametrize("generation", SINGLE)
def test_every_dedicated_variable_is_a_flag_of_each_generation(generation):
    flags = router_rules.GENERATIONS[generation].FLAGS
    assert [name for option, name in router_rules.ROUTER_OPTION_VARS if "--" + option.replace("_", "-") not in flags] == []


def _candidates(flag):
    """Values to try on FLAG: every generation's choices, and values of the wrong shape."""
    entries = [router_rules.GENERATIONS[g].FLAGS[flag] for g in SINGLE if flag in router_rules.GENERATIONS[g].FLAGS]
    choices = [choice for entry in entries for choice in entry[2] or ()]
    return choices + ["no-such-choice", "64k", 8, 0.5, True]


def test_auto_refuses_exactly_what_every_generation_refuses():
    auto = router_rules.ROUTER_FLAGS["auto"]
    checked = 0
    for flag in list(auto.flags) + ["--no-such-flag"]:
        option = flag[2:].replace("-", "_")
        for value in _candidates(flag):
            refused_by_each = [router_rules.option_problem(option, value, router_rules.ROUTER_FLAGS[g]) is not None
                               for g in SINGLE]
            assert (router_rules.option_problem(option, value, auto) is not None) == all(refused_by_each), (flag, value)
            checked += 1
    assert checked > len(auto.flags)
