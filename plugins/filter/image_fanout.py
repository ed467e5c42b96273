# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The waves in which the unified image reaches the nodes that miss it, decided before anything pulls.

Nodes that hold the verified pinned image serve it to their peers through a read-only
pull-through registry (roles/sglang_image, entry point ``serve_peers``). The central registry
serves at most ``source_concurrency`` nodes, and only when no node holds the image yet; every
holder serves at most ``peer_concurrency`` nodes per wave. The planner is the one model staging
uses (plugins/plugin_utils/fanout.py); this filter adds, for each node pulling from a peer, the
peers to try in order should its own fail mid-pull (``mirrors``: its peer first, then up to
``fallbacks`` other holders of that wave). The central registry is always the last resort.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.fanout import FanoutError, concurrency, fanout_waves, host_list


def _number(value, name, least):
    """VALUE as a whole number of at least LEAST, or the filter's error naming the variable."""
    number = concurrency(value)
    if least == 0 and number is None and str(value).strip() == "0" and not isinstance(value, (bool, float)):
        number = 0
    if number is None or number < least:
        raise AnsibleFilterError(f"image_fanout_plan: {name} = {value!r}: write a whole number of at least {least} "
                                 f"(sglang_image_{name}) [SGLPD-IMG-040]")
    return number


def image_fanout_plan(hosts, holders, source_concurrency=2, peer_concurrency=2, fallbacks=2):
    """The waves that bring the image to HOSTS, each a list of ``{host, source, mirrors[, peer]}``.

    HOSTS miss the pinned image (in order); HOLDERS hold it verified and are never planned.
    ``source`` is ``registry`` (the central registry, first wave only, and only without a holder)
    or ``peer`` (``peer`` names the holder). ``mirrors`` lists the holders to pull from, in order:
    the peer, then up to FALLBACKS other holders of that wave, round-robin after it; empty for a
    node that pulls from the registry.
    """
    source_concurrency = _number(source_concurrency, "source_concurrency", 1)
    peer_concurrency = _number(peer_concurrency, "peer_concurrency", 1)
    fallbacks = _number(fallbacks, "peer_fallbacks", 0)
    try:
        holders = host_list(holders, "holders")
        waiting = [host for host in host_list(hosts, "hosts") if host not in holders]
    except FanoutError as exc:
        raise AnsibleFilterError(f"image_fanout_plan: {exc} [SGLPD-IMG-040]") from None
    waves = fanout_waves(waiting, holders, source_concurrency, peer_concurrency, "registry")
    serving = list(holders)
    for wave in waves:
        for item in wave:
            if item["source"] != "peer":
                item["mirrors"] = []
                continue
            start = serving.index(item["peer"])
            others = [serving[(start + step) % len(serving)] for step in range(1, len(serving))]
            item["mirrors"] = [item["peer"]] + others[:fallbacks]
        serving += [item["host"] for item in wave]
    return waves


class FilterModule:
    """Image fan-out planning filters."""

    def filters(self):
        return {"image_fanout_plan": image_fanout_plan}
