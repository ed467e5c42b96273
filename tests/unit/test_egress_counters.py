"""The egress counters' reader (tests/fleet/egress_counters.py) on iptables' own listing."""

from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), '..', 'fleet', 'egress_counters.py')
_SPEC = importlib.util.spec_from_file_location('egress_counters', _PATH)
egress_counters = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(egress_counters)

LISTING = """Chain SGLANG_PD_EGRESS (1 references)
    pkts      bytes target     prot opt in     out     source               destination
      12     4800 RETURN     0    --  *      *       0.0.0.0/0            198.51.100.7         /* sglang-pd egress: package mirror */
       3      120 RETURN     0    --  *      *       0.0.0.0/0            198.51.100.8         /* sglang-pd egress: package mirror */
      24     1572 RETURN     17   --  *      *       0.0.0.0/0            198.51.100.53        udp dpt:53 /* sglang-pd egress: name server */
       0        0 RETURN     6    --  *      *       0.0.0.0/0            198.51.100.53        tcp dpt:53 /* sglang-pd egress: name server */
       2      120 LOG        0    --  *      *       0.0.0.0/0            0.0.0.0/0            limit: avg 20/min burst 20 LOG
       2      120 RETURN     0    --  *      *       0.0.0.0/0            0.0.0.0/0            /* sglang-pd egress: outside the fleet */
"""


def test_packets_outside_the_fleet_are_counted_apart_from_the_mirror_and_the_name_servers():
    assert egress_counters.counters(LISTING) == {
        'package mirror': {'packets': 15, 'bytes': 4920},
        'name server': {'packets': 24, 'bytes': 1572},
        'outside the fleet': {'packets': 2, 'bytes': 120},
    }


def test_a_chain_without_its_counting_rule_is_an_error_not_zero():
    with pytest.raises(SystemExit, match='no counting rule'):
        egress_counters.counters(LISTING.splitlines()[0] + '\n')


def test_a_scenario_counts_what_came_after_its_mark_and_a_kind_new_since_counts_whole():
    mark = {'package mirror': {'packets': 10, 'bytes': 4000}, 'outside the fleet': {'packets': 2, 'bytes': 120}}
    assert egress_counters.since(egress_counters.counters(LISTING), mark) == {
        'package mirror': {'packets': 5, 'bytes': 920},
        'name server': {'packets': 24, 'bytes': 1572},
        'outside the fleet': {'packets': 0, 'bytes': 0},
    }
