# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the preflight checks of inventory shape, reachability, container values,
SGLang's start-up rules and PD pairing (end to end: tests/integration/test_site_preflight.py)."""

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


def test_the_balancer_group_is_a_group_of_the_collection_not_a_misspelling():
    groups = {"sglang_pd": ["p0", "d0"], "sglang_prefill": ["p0"], "sglang_decode": ["d0"], "sglang_router": ["d0"],
              "sglang_router_lb": ["p0"]}
    assert checks.pd_check_groups(groups) == []
    assert "did you mean sglang_router?" in checks.pd_check_groups(dict(groups, sglang_routr=["p0"]))[0]


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


SET_ONCE = ("set {0} once for both modes (sglang_worker_options or the role variable), not in sglang_worker_prefill_options / "
            "sglang_worker_decode_options or a worker's args")
KV_CONNECTION = "sglang/srt/disaggregation/common/conn.py"


def test_prefill_and_decode_must_agree_on_the_kv_transfer():
    groups, hostvars = inventory()
    assert pairing_checks.pd_check_pairing(model_of(groups, hostvars)) == []
    # Two prefill workers and one decode worker: the larger group is named first.
    groups, hostvars = inventory(d0={"sglang_worker_decode_options": {"kv_cache_dtype": "auto"}},
                                 p1={"sglang_pd_service_address": "10.0.0.3"})
    groups["sglang_prefill"].append("p1")
    assert pairing_checks.pd_check_pairing(model_of(groups, hostvars)) == [
        "kv_cache_dtype: prefill and decode workers must agree on the KV cache's data type (%s: \"Both servers must use the "
        "same --kv-cache-dtype value.\"), but p0 prefill worker sglang-prefill (sglang_worker_kv_cache_dtype), p1 prefill "
        "worker sglang-prefill (sglang_worker_kv_cache_dtype) use \"fp8_e4m3\"; d0 decode worker sglang-decode "
        "(sglang_worker_decode_options) use \"auto\"; " % KV_CONNECTION + SET_ONCE.format("kv_cache_dtype")]


@pytest.mark.parametrize("decode_vars, agree_on", [
    ({"sglang_pd_model_path": "/models/other"}, "model_path: prefill and decode workers must agree on the model, but "),
    ({"sglang_worker_decode_options": {"served_model_name": "other"}},
     "served_model_name: prefill and decode workers must agree on the model name clients send, but "),
    ({"sglang_worker_decode_options": {"page_size": 32}},
     "page_size: prefill and decode workers must agree on the KV cache's page size (%s: \"Both servers must use the same "
     "--page-size value.\"), but " % KV_CONNECTION),
    ({"sglang_worker_decode_options": {"disaggregation_transfer_backend": "nixl"}},
     "disaggregation_transfer_backend: prefill and decode workers must agree on the KV transfer backend "
     "(sglang/srt/disaggregation/utils.py: \"if transfer_backend == TransferBackend.MOONCAKE:\"), but "),
])
def test_each_paired_option_names_what_differs_and_where_sglang_requires_it(decode_vars, agree_on):
    """The model and its name have no SGLang words to quote: their sentence cites nothing."""
    groups, hostvars = inventory(d0=decode_vars)
    [problem] = pairing_checks.pd_check_pairing(model_of(groups, hostvars))
    assert problem.startswith(agree_on), problem
    assert problem.endswith(SET_ONCE.format(agree_on.split(":")[0]))


@pytest.mark.parametrize("device, refused", [
    ("mlx5_0 mlx5_1", '"mlx5_0 mlx5_1" is not a device name'),
    ({0: ["mlx5_ib0"], 9: ["mlx5_ib9"]}, "GPU 9 is not one of the worker's GPUs [0, 1, 2, 3, 4, 5, 6, 7]"),
    ('{"0": "mlx5_ib0", ', "not valid JSON"),
    ("/etc/ib.yaml", "a path must name a JSON file"),
    (["mlx5_0", 7], "7 is not a device name"),
    ("mlx5_0, mlx5_1", None),
    ('{"0": "mlx5_ib0,mlx5_ib1"}', None),
    ("/etc/sglang/ib.json", None),
    ("auto", None),
])
def test_infiniband_devices_are_names_or_a_map_of_the_workers_gpus(device, refused):
    groups, hostvars = inventory(p0={"sglang_worker_ib_device": device})
    problems = checks.pd_check_ib_devices(model_of(groups, hostvars))
    if refused is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith("p0: sglang_worker_ib_device = ") and refused in problems[0], problems
        assert problems[0].endswith("{0: [mlx5_ib0], 1: [mlx5_ib1]}")


@pytest.mark.parametrize("addresses", [["10.0.0.1/24", "ten.0.0.9"], {"eth0": ["10.0.0.1"], "ib0": "ten.0.0.9"}])
def test_every_listed_address_is_an_ip_address(addresses):
    groups, hostvars = inventory(p0={"sglang_pd_addresses": addresses})
    assert checks.pd_check_addresses(model_of(groups, hostvars), hostvars) == [
        'p0: sglang_pd_addresses = "ten.0.0.9": not an IP address; list IP addresses (10.0.0.4 or 10.0.0.4/24)']
