#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Projection: staging the unified image on N nodes from the registry alone vs in peer waves.

Computes, for each fleet size, the time to bring an image of --image-gb to every node:

* registry  - every node pulls from the registry (at most --pull-concurrency at once, the
              image role's sglang_image_pull_concurrency); the registry's egress
              (--registry-gbs) is shared by the pulls in flight, each node ingests at most
              --node-gbs;
* fan-out   - the waves of the collection's own planner, ``image_fanout_plan`` (the
              planner model staging uses too, plugins/plugin_utils/fanout.py): the first wave pulls from the registry
              (--source-concurrency nodes), every later wave copies from nodes that already
              hold the image (each holder serves --peer-concurrency nodes, its egress
              --node-gbs shared by them).

Rates are parameters, not measurements: bench/bench_scaling.py measures this machine's pull
rate; docs/scaling.md says which values it uses and why.

Usage:
    .venv/bin/python bench/plan_image_fanout.py --image-gb 92 --registry-gbs 2.5 --node-gbs 1.0 --nodes 64 256 1000
"""

from __future__ import annotations

import argparse
import math
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, '.cache', 'collections'))
from ansible_collections.mindverse.sglang_pd.plugins.filter.image_fanout import image_fanout_plan  # noqa: E402  pylint: disable=wrong-import-position


def registry_only(nodes, image_gb, registry_gbs, node_gbs, pull_concurrency):
    """Seconds until every node holds the image when all of them pull from the registry."""
    in_flight = min(nodes, pull_concurrency)
    per_pull = min(node_gbs, registry_gbs / in_flight)
    rounds = math.ceil(nodes / in_flight)
    return rounds * image_gb / per_pull, nodes * image_gb


def fan_out(nodes, image_gb, registry_gbs, node_gbs, source_concurrency, peer_concurrency):
    """(seconds, GB from the registry, waves) when nodes copy from the nodes that hold the image."""
    hosts = ['node-%d' % index for index in range(nodes)]
    waves = image_fanout_plan(hosts, [], source_concurrency=source_concurrency, peer_concurrency=peer_concurrency)
    seconds = 0.0
    for wave in waves:
        from_registry = [item for item in wave if item['source'] == 'registry']
        if from_registry:
            rate = min(node_gbs, registry_gbs / len(from_registry))
        else:
            busiest = max(sum(1 for item in wave if item.get('peer') == peer) for peer in {i['peer'] for i in wave})
            rate = node_gbs / busiest
        seconds += image_gb / rate
    return seconds, min(nodes, source_concurrency) * image_gb, len(waves)


def minutes(seconds):
    return '%.0f min' % (seconds / 60) if seconds >= 600 else '%.1f min' % (seconds / 60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--image-gb', type=float, default=92.0)
    parser.add_argument('--registry-gbs', type=float, required=True, help="registry egress, GB/s")
    parser.add_argument('--node-gbs', type=float, required=True, help='what one node pulls or serves, GB/s')
    parser.add_argument('--pull-concurrency', type=int, default=8, help='sglang_image_pull_concurrency')
    parser.add_argument('--source-concurrency', type=int, default=2)
    parser.add_argument('--peer-concurrency', type=int, default=1)
    parser.add_argument('--nodes', type=int, nargs='+', default=[64, 256, 1000])
    args = parser.parse_args()
    print('| nodes | registry only | GB from the registry | fan-out (waves) | GB from the registry |')
    print('|---:|---:|---:|---:|---:|')
    for nodes in args.nodes:
        direct, direct_gb = registry_only(nodes, args.image_gb, args.registry_gbs, args.node_gbs,
                                          args.pull_concurrency)
        fanned, fanned_gb, waves = fan_out(nodes, args.image_gb, args.registry_gbs, args.node_gbs,
                                           args.source_concurrency, args.peer_concurrency)
        print('| %d | %s | %s | %s (%d) | %s |' % (
            nodes, minutes(direct), '{:,.0f}'.format(direct_gb), minutes(fanned), waves, '{:,.0f}'.format(fanned_gb)))


if __name__ == '__main__':
    main()
