# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the preflight checks of inventory shape, reachability, container values,
SGLang's start-up rules and PD pairing (end to end: tests/integration/test_preflight.py)."""

from __future__ import annotations

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import container as container_checks, pairing as pairing_checks
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import checks

from test_pd_checks import inventory, model_of  # same folder (pytest puts it on sys.path)


def test_hosts_outside_sglang_pd_and_misspelt_groups_are_refused():
    groups = {"sglang_pd": ["p0", "d0"], "sglang_prefill": ["p0"], "sglang_decode": ["d0", "d1"],
              "sglang_router": ["d0"], "sglang_prefil": ["p1"], "sglang_upgrade_decode": ["d0"], "gpu": ["p0"]}
    problems = checks.pd_check_groups(groups)
    assert any(p.startswith("d1: in group sglang_decode but not in sglang_pd") for p in problems)
    assert any(p.startswith("p1: in group sglang_prefil, which no play") and "did you mean sglang_prefill?" in p
               for p in problems)
    assert len(problems) == 2


def test_a_worker_on_loopback_is_unreachable():
    groups, hostvars = inventory(p0={"sglang_worker_host": "localhost"})
    problems = checks.pd_check_reachability(model_of(groups, hostvars))
    assert len(problems) == 1 and "a server on a loopback address refuses every other node" in problems[0]
    groups, hostvars = inventory(p0={"sglang_worker_host": "0.0.0.0"})
    assert checks.pd_check_reachability(model_of(groups, hostvars)) == []


@pytest.mark.parametrize("size, bad", [("64g", False), ("1.5G", False), ("512mb", False), (64, True), ("64", True),
                                       ("lots", True), (True, True)])
def test_docker_sizes_want_a_unit(size, bad):
    assert (container_checks._size_problem(size) is not None) == bad  # pylint: disable=protected-access


def test_environment_values_are_scalars_and_secrets_stay_hidden():
    groups, hostvars = inventory(p0={"sglang_worker_extra_env": {"OK": 1, "HF_TOKEN": ["t-1"], "L": ["a"]}})
    problems = container_checks.pd_check_container(model_of(groups, hostvars))
    assert len(problems) == 2 and not any("t-1" in p for p in problems)
    assert any(p.startswith("p0: sglang_worker_extra_env.HF_TOKEN = <redacted>") for p in problems)


def test_prefill_and_decode_must_agree_on_the_kv_transfer():
    groups, hostvars = inventory()
    assert pairing_checks.pd_check_pairing(model_of(groups, hostvars)) == []
    groups, hostvars = inventory(d0={"sglang_worker_decode_options": {"kv_cache_dtype": "auto"}})
    problems = pairing_checks.pd_check_pairing(model_of(groups, hostvars))
    assert len(problems) == 1 and problems[0].startswith("kv_cache_dtype: prefill and decode workers must agree")
    assert 'd0 decode worker sglang-decode (sglang_worker_decode_options) use "auto"' in problems[0]
