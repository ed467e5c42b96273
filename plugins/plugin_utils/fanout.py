# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The waves in which something large (model weights, the unified image) reaches the nodes that miss it.

One planner for both fan-outs (``model_stage_plan`` and ``image_fanout_plan``): nodes that hold
a verified copy serve it to their peers, so the source (the model's URL, the central image
registry) is read only when no node holds a copy yet, and then by at most ``source_concurrency``
nodes. Each node that finishes a wave serves in the next one, at most ``peer_concurrency`` nodes
at a time, so the waves grow geometrically and the load on every source stays bounded however
many nodes there are.
"""
from __future__ import annotations


class FanoutError(ValueError):
    """A planner input that cannot be planned; the message names it (the caller adds its id)."""


def host_list(value, name):
    """VALUE as a list of host names without duplicates, in order (None is no host)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise FanoutError(f"{name} must be a list of host names, got {value!r}")
    return list(dict.fromkeys(str(host) for host in value))


def concurrency(value):
    """VALUE as a whole number of at least 1 (a number given with -e arrives as a string), else None."""
    if isinstance(value, (bool, float)):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number >= 1 else None


def peer_wave(waiting, holders, peer_concurrency):
    """The next wave: at most PEER_CONCURRENCY waiting hosts per holder, round-robin over HOLDERS."""
    taken = waiting[:len(holders) * peer_concurrency]
    return [{"host": host, "source": "peer", "peer": holders[index % len(holders)]} for index, host in enumerate(taken)]


def fanout_waves(waiting, holders, source_concurrency, peer_concurrency, source):
    """The waves that bring a copy to WAITING (hosts not in HOLDERS), each a list of ``{host, source[, peer]}``.

    With a holder only peers serve: in each wave every holder (those given and those that
    finished an earlier wave) serves at most PEER_CONCURRENCY hosts, round-robin over the holders
    in order (``{'host': H, 'source': 'peer', 'peer': P}``). Without any holder the first wave
    takes at most SOURCE_CONCURRENCY hosts from the source (``{'host': H, 'source': SOURCE}``).
    """
    waves = []
    holders = list(holders)
    if waiting and not holders:
        waves.append([{"host": host, "source": source} for host in waiting[:source_concurrency]])
        holders = list(waiting[:source_concurrency])
        waiting = waiting[source_concurrency:]
    while waiting:
        wave = peer_wave(waiting, holders, peer_concurrency)
        waves.append(wave)
        holders += [item["host"] for item in wave]
        waiting = waiting[len(wave):]
    return waves
