# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model staging is planned before anything copies: peers first, a bounded load on every source."""

from __future__ import annotations

import collections
import math

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.model_stage import FilterModule, model_stage_plan

URL = "url"


def url(host):
    return {"host": host, "source": "url"}


def peer(host, holder):
    return {"host": host, "source": "peer", "peer": holder}


def loads(wave):
    """Hosts each source (the URL, or a peer) serves in one wave."""
    return collections.Counter(item.get("peer", URL) for item in wave)


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"model_stage_plan": model_stage_plan}


def test_without_holders_one_download_then_peers():
    assert model_stage_plan(["a", "b", "c"], [], source_concurrency=1, peer_concurrency=1) == [
        [url("a")], [peer("b", "a")], [peer("c", "a")]]


def test_a_peer_serves_several_hosts_per_wave():
    assert model_stage_plan(["a", "b", "c"], [], source_concurrency=1, peer_concurrency=2) == [
        [url("a")], [peer("b", "a"), peer("c", "a")]]


def test_the_defaults_take_two_from_the_url():
    assert model_stage_plan(["a", "b", "c", "d", "e"], []) == [
        [url("a"), url("b")], [peer("c", "a"), peer("d", "b"), peer("e", "a")]]


def test_holders_serve_and_the_url_is_never_read():
    plan = model_stage_plan(["h0", "a", "b", "c", "d"], ["h0", "h1"], peer_concurrency=1)
    assert plan == [[peer("a", "h0"), peer("b", "h1")], [peer("c", "h0"), peer("d", "h1")]]


def test_a_node_that_finished_serves_in_the_next_wave():
    plan = model_stage_plan(["a", "b", "c", "d"], ["h"], peer_concurrency=1)
    assert plan == [[peer("a", "h")], [peer("b", "h"), peer("c", "a")], [peer("d", "h")]]


def test_holders_need_no_source():
    assert model_stage_plan(["a"], ["h"], has_source=False) == [[peer("a", "h")]]


@pytest.mark.parametrize("hosts, holders", [([], []), (["h"], ["h"]), (None, ["h"]), ([], None)])
def test_nothing_to_copy_plans_nothing(hosts, holders):
    assert model_stage_plan(hosts, holders, has_source=False) == []


def test_duplicates_are_planned_once():
    assert model_stage_plan(["a", "b", "a", "b"], ["h", "h"]) == [[peer("a", "h"), peer("b", "h")]]


@pytest.mark.parametrize("source_concurrency, peer_concurrency, holders", [
    (2, 2, []), (1, 1, []), (3, 1, []), (1, 4, []), (2, 2, ["n63"]), (1, 1, ["n10", "n20", "n30"]),
])
def test_64_nodes_every_source_stays_bounded(source_concurrency, peer_concurrency, holders):
    hosts = [f"n{i}" for i in range(64)]
    plan = model_stage_plan(hosts, holders, source_concurrency, peer_concurrency)
    planned = [item["host"] for wave in plan for item in wave]
    assert sorted(planned) == sorted(h for h in hosts if h not in holders)
    assert len(planned) == len(set(planned))
    served = set(holders)
    for index, wave in enumerate(plan):
        count = loads(wave)
        assert count[URL] <= (source_concurrency if index == 0 and not holders else 0)
        assert all(n <= peer_concurrency for source, n in count.items() if source != URL), count
        # A peer serves only what it held before the wave.
        assert {item["peer"] for item in wave if "peer" in item} <= served
        served |= {item["host"] for item in wave}
    # Every wave multiplies the holders by (1 + peer_concurrency): log-like in the number of nodes.
    start = len(holders) or source_concurrency
    bound = (0 if holders else 1) + math.ceil(math.log(64 / start, 1 + peer_concurrency)) + 1
    assert len(plan) <= bound


def test_64_nodes_with_the_defaults():
    plan = model_stage_plan([f"n{i}" for i in range(64)], [])
    assert [len(wave) for wave in plan] == [2, 4, 12, 36, 10]


def test_no_holder_and_no_source_names_the_hosts():
    with pytest.raises(AnsibleFilterError, match=r"^a, b: .*no node holds a verified copy and no source URL is set"):
        model_stage_plan(["a", "b"], [], has_source=False)


@pytest.mark.parametrize("name, value", [
    ("source_concurrency", 0), ("peer_concurrency", -1), ("peer_concurrency", "two"), ("source_concurrency", True),
    ("peer_concurrency", 1.5),
])
def test_a_concurrency_below_one_is_refused(name, value):
    with pytest.raises(AnsibleFilterError, match=f"{name} = .*at least 1"):
        model_stage_plan(["a"], [], **{name: value})


def test_a_concurrency_given_with_extra_vars_is_read():
    assert model_stage_plan(["a", "b"], [], source_concurrency="1", peer_concurrency="1") == [[url("a")], [peer("b", "a")]]


@pytest.mark.parametrize("hosts, holders", [("a", []), (["a"], "h")])
def test_a_string_instead_of_a_list_is_refused(hosts, holders):
    with pytest.raises(AnsibleFilterError, match="must be a list of host names"):
        model_stage_plan(hosts, holders)


# Found by mutation testing (make mutation, docs/testing.md): every word of the refusals.
@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": "n0", "holders": []}, "model_stage_plan: hosts must be a list of host names, got 'n0' [SGLPD-MDL-010]"),
    ({"hosts": ["n0"], "holders": "n1"}, "model_stage_plan: holders must be a list of host names, got 'n1' [SGLPD-MDL-010]"),
    ({"hosts": ["n0"], "holders": [], "peer_concurrency": 0},
     "model_stage_plan: peer_concurrency = 0: write a whole number of at least 1 "
     "(sglang_model_peer_concurrency: the downloads one source serves at a time) [SGLPD-MDL-010]"),
])
def test_the_refusals_word_for_word(kwargs, message):
    with pytest.raises(AnsibleFilterError) as refused:
        model_stage_plan(**kwargs)
    assert str(refused.value) == message
