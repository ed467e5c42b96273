# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade's batches are decided from the inventory before anything moves."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.upgrade_plan import FilterModule, batch_size, pd_upgrade_plan


def fleet(prefill, decode):
    return {"sglang_pd": list(dict.fromkeys(prefill + decode)), "sglang_prefill": prefill, "sglang_decode": decode}


def test_one_prefill_host_is_refused_before_the_canary_moves():
    plan = pd_upgrade_plan(fleet(["p0"], ["d0", "d1", "d2"]))
    assert plan["canary"] == "d0" and plan["batches"] == [["d0"], ["p0"], ["d1"], ["d2"]]
    assert len(plan["problems"]) == 1
    assert plan["problems"][0].startswith("batch 1 (p0) would take the fleet's only prefill host, p0, out of the routers")
    assert "Add a second prefill host (mindverse.sglang_pd.scale_out)" in plan["problems"][0]
    assert "ansible-playbook" not in plan["problems"][0]
    assert "mindverse.sglang_pd.rolling_upgrade -e sglang_pd_allow_serving_gap=true" in plan["problems"][0]


def test_the_messages_name_the_playbook_that_restarts():
    plan = pd_upgrade_plan(fleet(["p0"], ["d0"]), hosts=["p0"], playbook="site.yml")
    assert plan["batches"] == [["p0"]]
    assert "so site.yml refuses before anything moves" in plan["problems"][0]
    assert plan["problems"][0].endswith("site.yml -e sglang_pd_allow_serving_gap=true")


def test_the_shape_of_the_scale_scenario_rolls():
    # Two prefill hosts, one of them also a decode host, and a decode-only host.
    groups = fleet(["n0", "n1"], ["n1", "n2"])
    plan = pd_upgrade_plan(groups)
    assert plan == {"canary": "n1", "batches": [["n1"], ["n0"], ["n2"]], "problems": []}


def test_a_batch_holding_every_decode_host_is_refused():
    plan = pd_upgrade_plan(fleet(["p0", "p1"], ["d0", "d1", "d2"]), serial="100%")
    assert plan["batches"] == [["d0"], ["p0", "p1"], ["d1", "d2"]]
    assert [p.split(" would")[0] for p in plan["problems"]] == ["batch 1 (p0, p1)"]
    assert "Lower sglang_pd_serial" in plan["problems"][0]


def test_a_limited_run_picks_its_canary_among_its_hosts():
    plan = pd_upgrade_plan(fleet(["p0", "p1"], ["d0", "d1"]), hosts=["p1", "d1"])
    assert plan["canary"] == "d1" and plan["batches"] == [["d1"], ["p1"]] and plan["problems"] == []


def test_no_host_to_move_plans_nothing():
    assert pd_upgrade_plan(fleet(["p0"], ["d0"]), hosts=[], playbook="site.yml") == {"canary": "", "batches": [], "problems": []}


def test_a_canary_that_does_not_move_leaves_the_choice_to_the_plan():
    plan = pd_upgrade_plan(fleet(["p0", "p1"], ["d0", "d1"]), canary="d0", hosts=["p1", "d1"])
    assert plan["canary"] == "d1"


def test_a_canary_outside_the_pd_groups_is_named():
    with pytest.raises(AnsibleFilterError, match="sglang_pd_canary = 'x0'"):
        pd_upgrade_plan(fleet(["p0"], ["d0"]), canary="x0")


@pytest.mark.parametrize("serial, hosts, size", [(1, 5, 1), ("2", 5, 2), ("50%", 5, 2), ("10%", 5, 1), ("100%", 3, 3)])
def test_batch_size_follows_ansible_serial(serial, hosts, size):
    assert batch_size(serial, hosts) == size


def test_batch_size_refuses_nonsense():
    with pytest.raises(AnsibleFilterError, match="write a number of hosts or a percentage"):
        batch_size("half", 4)


# Found by mutation testing (make mutation, docs/testing.md): the order without HOSTS, and every
# word of the messages an operator reads.

def test_without_hosts_the_order_follows_sglang_pd():
    groups = {"sglang_pd": ["d1", "p0", "d0"], "sglang_prefill": ["p0"], "sglang_decode": ["d0", "d1"]}
    plan = pd_upgrade_plan(groups)
    assert plan["canary"] == "d1" and plan["batches"] == [["d1"], ["p0"], ["d0"]]


def test_without_sglang_pd_the_order_is_prefill_then_decode():
    groups = {"sglang_prefill": ["p0", "p1"], "sglang_decode": ["d0", "d1"]}
    assert pd_upgrade_plan(groups)["batches"] == [["d0"], ["p0"], ["p1"], ["d1"]]


def test_the_messages_word_for_word():
    with pytest.raises(AnsibleFilterError) as serial:
        batch_size("half", 4)
    assert str(serial.value) == "sglang_pd_serial = 'half': write a number of hosts or a percentage such as 50% [SGLPD-ROL-001]"
    with pytest.raises(AnsibleFilterError) as canary:
        pd_upgrade_plan(fleet(["p0"], ["d0"]), canary="x0")
    assert str(canary.value) == "sglang_pd_canary = 'x0': not a host of sglang_prefill or sglang_decode (write one of p0, d0) [SGLPD-ROL-001]"
    only = pd_upgrade_plan(fleet(["p0"], ["d0"]), hosts=["d0"])["problems"]
    assert only == [
        "the canary would take the fleet's only decode host, d0, out of the routers at once: every request would fail "
        "until it is back, so mindverse.sglang_pd.rolling_upgrade refuses before anything moves. Add a second decode "
        "host (mindverse.sglang_pd.scale_out) first, or accept the gap: mindverse.sglang_pd.rolling_upgrade "
        "-e sglang_pd_allow_serving_gap=true"]
    every = pd_upgrade_plan(fleet(["p0", "p1"], ["d0", "d1", "d2"]), serial="100%")["problems"]
    assert every == [
        "batch 1 (p0, p1) would take all 2 prefill hosts out of the routers at once: every request would fail until it "
        "is back, so mindverse.sglang_pd.rolling_upgrade refuses before anything moves. Lower sglang_pd_serial, or "
        "choose another sglang_pd_canary"]


def test_the_filter_is_registered_by_its_name():
    assert FilterModule().filters() == {"pd_upgrade_plan": pd_upgrade_plan}
