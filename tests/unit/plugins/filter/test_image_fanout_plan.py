# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The image fan-out is planned before anything pulls: the central registry serves a bounded number of nodes."""

from __future__ import annotations

import collections

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.image_fanout import FilterModule, image_fanout_plan
from ansible_collections.mindverse.sglang_pd.plugins.filter.model_stage import model_stage_plan


def hosts(count):
    return ["n%02d" % index for index in range(count)]


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"image_fanout_plan": image_fanout_plan}


def test_without_holders_the_registry_serves_the_first_wave_only():
    plan = image_fanout_plan(["a", "b", "c", "d", "e"], [], source_concurrency=2, peer_concurrency=1)
    assert plan == [
        [{"host": "a", "source": "registry", "mirrors": []}, {"host": "b", "source": "registry", "mirrors": []}],
        [{"host": "c", "source": "peer", "peer": "a", "mirrors": ["a", "b"]},
         {"host": "d", "source": "peer", "peer": "b", "mirrors": ["b", "a"]}],
        [{"host": "e", "source": "peer", "peer": "a", "mirrors": ["a", "b", "c"]}],
    ]


@pytest.mark.parametrize("count", [1, 3, 12, 64, 1000])
@pytest.mark.parametrize("source,peer", [(1, 1), (2, 1), (2, 3), (8, 2)])
def test_bounded_load_every_node_once(count, source, peer):
    plan = image_fanout_plan(hosts(count), [], source_concurrency=source, peer_concurrency=peer)
    planned = [item["host"] for wave in plan for item in wave]
    assert sorted(planned) == sorted(hosts(count))
    from_registry = [item for wave in plan for item in wave if item["source"] == "registry"]
    assert len(from_registry) == min(count, source)
    assert all(item["source"] == "peer" for wave in plan[1:] for item in wave)
    held = set()
    for wave in plan:
        load = collections.Counter(item.get("peer", "registry") for item in wave)
        assert load.pop("registry", 0) <= source
        assert max(load.values(), default=0) <= peer
        for item in wave:
            # Every mirror holds the image when the wave starts, and the first one is the planned peer.
            assert set(item["mirrors"]) <= held
            assert item["mirrors"][:1] == ([item["peer"]] if item["source"] == "peer" else [])
            assert len(item["mirrors"]) == len(set(item["mirrors"]))
        held |= {item["host"] for item in wave}


def test_with_holders_the_registry_serves_nobody():
    plan = image_fanout_plan(["h", "a", "b", "c"], ["h"], source_concurrency=4, peer_concurrency=2)
    assert [[item["host"] for item in wave] for wave in plan] == [["a", "b"], ["c"]]
    assert all(item["source"] == "peer" for wave in plan for item in wave)
    assert plan[0][0]["mirrors"] == ["h"]
    assert plan[1][0]["mirrors"] == ["h", "a", "b"]


def test_fallbacks_bound_the_mirrors():
    plan = image_fanout_plan(["a"], ["h1", "h2", "h3", "h4"], fallbacks=0)
    assert plan[0][0]["mirrors"] == ["h1"]
    plan = image_fanout_plan(["a", "b"], ["h1", "h2", "h3", "h4"], peer_concurrency=1, fallbacks="1")
    assert [item["mirrors"] for item in plan[0]] == [["h1", "h2"], ["h2", "h3"]]


def test_same_waves_as_the_model_fan_out():
    """One planner: the image's waves are the model's, with the registry as the source."""
    for holders in ([], ["x"]):
        image = image_fanout_plan(hosts(40), holders, source_concurrency=3, peer_concurrency=2)
        model = model_stage_plan(hosts(40), holders, source_concurrency=3, peer_concurrency=2)
        strip = [[{key: value for key, value in item.items() if key != "mirrors"} for item in wave] for wave in image]
        assert strip == [[dict(item, source="registry") if item["source"] == "url" else item for item in wave]
                         for wave in model]


def test_nothing_missing_is_no_wave():
    assert image_fanout_plan([], []) == []
    assert image_fanout_plan(["a"], ["a"]) == []


@pytest.mark.parametrize("kwargs", [{"source_concurrency": 0}, {"peer_concurrency": "x"}, {"fallbacks": -1},
                                    {"source_concurrency": True}, {"fallbacks": 1.5}])
def test_bad_numbers_are_refused(kwargs):
    with pytest.raises(AnsibleFilterError, match=r"SGLPD-IMG-040"):
        image_fanout_plan(["a"], [], **kwargs)


def test_hosts_must_be_a_list():
    with pytest.raises(AnsibleFilterError, match=r"hosts must be a list.*SGLPD-IMG-040"):
        image_fanout_plan("a", [])
