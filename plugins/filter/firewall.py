# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the firewall of one PD host admits, from the plan (the inventory).

The sglang_firewall role writes it as one nftables table of its own (``inet sglang_pd``):
the ports of this host's workers (HTTP, bootstrap, dist-init) and its router's metrics
port only from ``sglang_pd_cluster_cidr``, and the model seed's port where weights are staged
(``sglang_pd_model_stage``) and the router balancer's metrics port; its router port and the
balancer's frontend port (role sglang_router_lb) only from ``sglang_pd_client_cidrs``.
Every other port, SSH included, is left to the operator's own rules.
"""
from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import (
    MODES,
    pd_workers,
    router_port,
)

DEFAULT_SSH_PORT = 22


def _networks(value, variable):
    items = [value] if isinstance(value, str) else list(value or [])
    networks = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(str(item).strip(), strict=False))
        except ValueError as exc:
            raise AnsibleFilterError(f"{variable}: {item!r} is not a network ({exc}) [SGLPD-FWL-001]") from exc
    if not networks:
        raise AnsibleFilterError(f"{variable} is empty: the firewall would admit nobody [SGLPD-FWL-001]")
    return networks


def _by_family(networks):
    return {
        "v4": sorted({str(n) for n in networks if n.version == 4}),
        "v6": sorted({str(n) for n in networks if n.version == 6}),
    }


def fabric_check_ports(host, groups, one):
    """The ib_write_bw servers' ports of playbooks/fabric_check.yml on a decode HOST, as an nft range.

    Test N of a run listens on sglang_pd_fabric_port + N; a run has at most one test per NIC
    pair, so at most prefill hosts x decode hosts x GPUs per host. Empty unless
    sglang_pd_fabric_check is report or required.
    """
    if (one.get("sglang_pd_fabric_check") or "skip") == "skip" or host not in (groups.get("sglang_decode") or []):
        return []
    first = int(one.get("sglang_pd_fabric_port") or 18515)
    tests = len(groups.get("sglang_prefill") or []) * len(groups.get("sglang_decode") or []) * int(one.get("sglang_pd_gpus_per_host") or 8)
    return ["%d-%d" % (first, min(first + max(tests, 1) - 1, 65535))]


def model_seed_ports(host, groups, one, model_defaults=None):
    """The model seed's port on a worker HOST that stages weights (role sglang_model), else none.

    Peers copy the weights from its read-only rsync daemon; MODEL_DEFAULTS are the role's
    defaults (its port, when the host does not set sglang_model_seed_port).
    """
    workers = set(groups.get("sglang_prefill") or []) | set(groups.get("sglang_decode") or [])
    if host not in workers or not boolean(one.get("sglang_pd_model_stage") or False, strict=False):
        return []
    return [int(one.get("sglang_model_seed_port", (model_defaults or {}).get("sglang_model_seed_port", 8730)))]


def image_peer_ports(host, groups, one, image_defaults=None):
    """The peer registry's port on a PD HOST that serves the image to its peers (role sglang_image), else none.

    With sglang_image_peer_fanout its peers pull the image from it (tasks/serve_peers.yml);
    IMAGE_DEFAULTS are the role's defaults (its switch and port, when the host does not set them).
    """
    defaults = image_defaults or {}
    if host not in (groups.get("sglang_pd") or []):
        return []
    if not boolean(one.get("sglang_image_peer_fanout", defaults.get("sglang_image_peer_fanout", False)) or False, strict=False):
        return []
    return [int(one.get("sglang_image_peer_port", defaults.get("sglang_image_peer_port", 5001)))]


def _worker_peers(host, members, hostvars):
    """The hosts of MEMBERS (one mode's group, in order) whose workers decide HOST's: HOST alone,
    or with sglang_pd_worker_group every host sharing it (node ranks count within it). Only these
    are read, so a host's firewall costs the same at 3 nodes and at 1,000."""
    if host not in members:
        return []
    group = hostvars[host].get("sglang_pd_worker_group") or None
    if group is None:
        return [host]
    return [other for other in members if (hostvars[other].get("sglang_pd_worker_group") or None) == group]


def router_lb_ports(host, groups, one, lb_defaults=None):
    """``(client ports, cluster ports)`` of the router balancer on HOST (role sglang_router_lb), else none.

    Clients reach its frontend (sglang_router_lb_port, null: the routers' port); the cluster scrapes
    its metrics (sglang_router_lb_prometheus_port, else LB_DEFAULTS': the role's defaults).
    """
    if host not in (groups.get("sglang_router_lb") or []):
        return set(), set()
    metrics = one.get("sglang_router_lb_prometheus_port", (lb_defaults or {}).get("sglang_router_lb_prometheus_port"))
    return {int(one.get("sglang_router_lb_port") or router_port(one, one))}, ({int(metrics)} if metrics not in (None, "") else set())


def pd_firewall(host, groups, hostvars, router_defaults=None, model_defaults=None, lb_defaults=None, image_defaults=None):
    """The firewall of HOST: ``{cluster: {v4, v6, ports}, clients: {v4, v6, ports}}``.

    ROUTER_DEFAULTS are the sglang_router role's defaults (its metrics port, when the host does
    not set sglang_router_prometheus_port); MODEL_DEFAULTS the sglang_model role's (its seed port);
    LB_DEFAULTS the sglang_router_lb role's (its metrics port); IMAGE_DEFAULTS the sglang_image role's
    (its peer registry's switch and port).

    ``cluster.ports``: the HTTP, bootstrap and dist-init ports of the workers on HOST, the
    metrics ports of its router and balancer, the model seed's port and the image peer registry's;
    ``clients.ports``: its
    router and balancer ports. Raises when a network is invalid or missing, or when a port to
    guard is the host's SSH port.
    """
    one = hostvars[host]
    cluster_ports, client_ports = set(), set()
    for mode in MODES:
        for worker in pd_workers(_worker_peers(host, list(groups.get("sglang_" + mode) or []), hostvars),
                                 hostvars, mode, ranks="all"):
            if worker["host"] != host:
                continue
            if worker["serves_http"]:
                cluster_ports.add(int(worker["port"]))
            if mode == "prefill" and worker["serves_http"]:
                cluster_ports.add(int(worker["bootstrap_port"]))
            if worker.get("nnodes", 1) > 1 and worker["node_rank"] == 0:
                cluster_ports.add(int(str(worker["dist_init_addr"]).rsplit(":", 1)[1]))
    if host in (groups.get("sglang_router") or []):
        client_ports.add(router_port(one, one))
        metrics = one.get("sglang_router_prometheus_port", (router_defaults or {}).get("sglang_router_prometheus_port"))
        if metrics not in (None, ""):
            cluster_ports.add(int(metrics))
    cluster_ports.update(model_seed_ports(host, groups, one, model_defaults))
    cluster_ports.update(image_peer_ports(host, groups, one, image_defaults))
    lb_clients, lb_cluster = router_lb_ports(host, groups, one, lb_defaults)
    client_ports |= lb_clients
    cluster_ports |= lb_cluster
    ssh = int(one.get("ansible_port") or DEFAULT_SSH_PORT)
    if ssh in cluster_ports | client_ports:
        raise AnsibleFilterError(f"{host}: port {ssh} is both a service port and SSH's: the firewall never guards SSH [SGLPD-FWL-002]")
    cluster = _by_family(_networks(one.get("sglang_pd_cluster_cidr"), "sglang_pd_cluster_cidr"))
    clients = _by_family(_networks(one.get("sglang_pd_client_cidrs"), "sglang_pd_client_cidrs"))
    return {
        "cluster": dict(cluster, ports=sorted(cluster_ports), port_ranges=fabric_check_ports(host, groups, one)),
        "clients": dict(clients, ports=sorted(client_ports - cluster_ports)),
    }


class FilterModule:
    """Firewall filters."""

    def filters(self):
        return {"pd_firewall": pd_firewall}
