# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The waves in which model weights reach the nodes that miss them, decided before anything copies.

``playbooks/model_stage.yml`` copies a model to the nodes whose copy is missing or wrong.
Peers serve first: a node that holds a verified copy serves it to others through its
rsync daemon, so the source (an HTTP(S) base URL, often a storage account that throttles)
is read only when no node holds the model yet, and then by at most ``source_concurrency``
nodes. Each node that finishes a wave serves in the next one, at most ``peer_concurrency``
nodes at a time, so the waves grow geometrically and the load on every source stays bounded
however many nodes there are (docs/model_weights.md shows the waves of 64 nodes). The
planner is the one the image fan-out uses too (plugins/plugin_utils/fanout.py).
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.fanout import FanoutError, concurrency, fanout_waves, host_list


def _host_list(value, name):
    """VALUE as a list of host names without duplicates, in order (None is no host)."""
    try:
        return host_list(value, name)
    except FanoutError as exc:
        raise AnsibleFilterError(f"model_stage_plan: {exc} [SGLPD-MDL-010]") from None


def _concurrency(value, name):
    """VALUE as a whole number of at least 1 (a number given with -e arrives as a string)."""
    number = concurrency(value)
    if number is None:
        raise AnsibleFilterError(f"model_stage_plan: {name} = {value!r}: write a whole number of at least 1 "
                                 f"(sglang_model_{name}: the downloads one source serves at a time) [SGLPD-MDL-010]")
    return number


def model_stage_plan(hosts, holders, source_concurrency=2, peer_concurrency=2, has_source=True):
    """The waves that bring the model to HOSTS, each a list of ``{host, source[, peer]}``.

    HOSTS need a copy (in order); HOLDERS already hold a verified copy and are never planned.
    With a holder, only peers serve: in each wave every holder (those given and those that
    finished an earlier wave) serves at most PEER_CONCURRENCY hosts, assigned round-robin
    over the holders in order (``{'host': H, 'source': 'peer', 'peer': P}``). Without any
    holder the first wave takes at most SOURCE_CONCURRENCY hosts from the source URL
    (``{'host': H, 'source': 'url'}``) and the later waves are served by peers only. No
    holder and no source (HAS_SOURCE false) is an error that names the hosts.
    """
    source_concurrency = _concurrency(source_concurrency, "source_concurrency")
    peer_concurrency = _concurrency(peer_concurrency, "peer_concurrency")
    holders = _host_list(holders, "holders")
    waiting = [host for host in _host_list(hosts, "hosts") if host not in holders]
    if waiting and not holders and not has_source:
        raise AnsibleFilterError(
            f"{', '.join(waiting)}: the model is missing or wrong, but no node holds a verified copy and no "
            "source URL is set; set sglang_model_source_url, or copy the model to one node (or mount it) first [SGLPD-MDL-011]")
    return fanout_waves(waiting, holders, source_concurrency, peer_concurrency, "url")


class FilterModule:
    """Model staging planning filters."""

    def filters(self):
        return {"model_stage_plan": model_stage_plan}
