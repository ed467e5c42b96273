# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pair each GPU of a node with the RDMA device nearest to it, from the fact modules' output.

``amdgpu | mindverse.sglang_pd.gpu_nic_affinity(rdma)`` takes the ``amdgpu`` and ``rdma``
facts of one node (amdgpu_facts, rdma_facts) and returns one item per GPU, in the order the
driver numbers them (the GPU ordinal SGLang's ``--base-gpu-id`` counts from):

    {gpu: 0, gpu_pci_address, gpu_numa_node, nic: mlx5_ib0, nic_pci_address, nic_numa_node,
     via: pcie_switch | numa | none}

Nearest means, in this order: under the same PCIe switch or root port (the two functions
share a bridge in their sysfs path), then on the same NUMA node, then any. Among equally
near devices the one paired with fewer GPUs so far is taken, then the first by name, so
eight GPUs and eight NICs pair one to one and a shared NIC is visible as such.

``fabric_problems(pairs, rdma, host, cluster_cidr)`` (through the ``fabric_worker_problems``
filter) lists what would break KV transfers on that pairing, one sentence each naming host, GPU, NIC and the fix; the
``fabric_mtu_problems`` filter does the same for MTUs across nodes, and ``roce_gid_indexes``
gives, per NIC, the index of its port's routable RoCE v2 GID (the value for Mooncake's MC_GID_INDEX).
"""
from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import worker_gpu_keys, worker_ib_device, worker_nics
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import WORKER_ENV_VARS

NEARNESS = ("pcie_switch", "numa", "none")


def _bridges(function):
    """The PCI bridges above a function: its sysfs path without the function itself."""
    return list(function.get("pci_path") or [])[:-1]


def _shared_bridges(one, other):
    count = 0
    for mine, theirs in zip(_bridges(one), _bridges(other)):
        if mine != theirs:
            break
        count += 1
    return count


def nearness(gpu, nic):
    """How near an RDMA device is to a GPU: ``pcie_switch``, ``numa`` or ``none``."""
    if _shared_bridges(gpu, nic) > 0:
        return "pcie_switch"
    if gpu.get("numa_node") is not None and gpu.get("numa_node") == nic.get("numa_node"):
        return "numa"
    return "none"


def gpu_nic_affinity(amdgpu, rdma):
    """One item per GPU: the nearest RDMA device and how near it is (see the module docstring)."""
    if not isinstance(amdgpu, Mapping) or not isinstance(rdma, Mapping):
        raise AnsibleFilterError("gpu_nic_affinity takes the amdgpu facts and the rdma facts of one node [SGLPD-DEF-001]")
    nics = sorted(rdma.get("devices") or [], key=lambda nic: nic["name"])
    paired = dict((nic["name"], 0) for nic in nics)
    pairs = []
    for ordinal, gpu in enumerate(amdgpu.get("gpus") or []):
        if not nics:
            break
        best = min(nics, key=lambda nic: (NEARNESS.index(nearness(gpu, nic)), -_shared_bridges(gpu, nic),
                                          paired[nic["name"]], nic["name"]))
        paired[best["name"]] += 1
        pairs.append({
            "gpu": ordinal,
            "gpu_pci_address": gpu.get("pci_address"),
            "gpu_numa_node": gpu.get("numa_node"),
            "nic": best["name"],
            "nic_pci_address": best.get("pci_address"),
            "nic_numa_node": best.get("numa_node"),
            "via": nearness(gpu, best),
        })
    return pairs


def _device(rdma, name):
    for device in rdma.get("devices") or []:
        if device["name"] == name:
            return device
    return None


def _network(cluster_cidr):
    try:
        return ipaddress.ip_network(str(cluster_cidr), strict=False)
    except ValueError as exc:
        raise AnsibleFilterError("cluster_cidr %r is not a network: %s [SGLPD-FAB-002]" % (cluster_cidr, exc))


def _routable_v2_gid(port, network):
    """Index of the port's first RoCE v2 GID whose IPv4 address lies in network, or None."""
    for gid in port.get("gids") or []:
        if gid.get("type") == "RoCE v2" and gid.get("ipv4") and ipaddress.ip_address(gid["ipv4"]) in network:
            return gid["index"]
    return None


def roce_gid_index(rdma, nic, cluster_cidr, port=1):
    """Index of the first RoCE v2 GID of NIC's port whose IPv4 address lies in cluster_cidr, or None."""
    network = _network(cluster_cidr)
    for each in (_device(rdma, nic) or {}).get("ports") or []:
        if each["port"] == port:
            return _routable_v2_gid(each, network)
    return None


def _port_problems(host, gpus, device, cluster_cidr):
    found = []
    network = _network(cluster_cidr) if cluster_cidr else None
    for port in device.get("ports") or []:
        where = "%s: NIC %s port %d (GPU %s)" % (host, device["name"], port["port"], gpus)
        if port.get("state") != "ACTIVE":
            found.append("%s is %s (physical state %s), not ACTIVE: KV transfers through it fail. Bring the "
                         "link up (ibstat %s) or pair the GPU with another NIC."
                         % (where, port.get("state") or "unknown", port.get("phys_state") or "unknown", device["name"]))
        if port.get("link_layer") == "Ethernet" and network is not None and _routable_v2_gid(port, network) is None:
            found.append("%s is RoCE without a RoCE v2 GID in %s (GIDs: %s): Mooncake would pick a link-local GID "
                         "and cross-node transfers fail. Give its network device %s an address in %s."
                         % (where, cluster_cidr,
                            ", ".join("%d %s %s" % (g["index"], g.get("type") or "?", g.get("ipv4") or g["gid"])
                                      for g in port.get("gids") or []) or "none",
                            port.get("netdev") or "(none)", cluster_cidr))
    return found


def fabric_problems(pairs, rdma, host, cluster_cidr=None, allow_cross_numa=False):
    """What breaks KV transfers on one node's GPU-NIC pairing (gpu_nic_affinity), one sentence each."""
    found = []
    for pair in pairs:
        if pair["via"] == "none" and not allow_cross_numa:
            found.append("%s: GPU %d (%s, NUMA node %s) is paired with NIC %s (%s, NUMA node %s) on another NUMA node: "
                         "its KV transfers cross the CPU interconnect. Map the GPU to a NIC of its NUMA node, or "
                         "accept it (allow_cross_numa)."
                         % (host, pair["gpu"], pair["gpu_pci_address"], pair["gpu_numa_node"], pair["nic"],
                            pair["nic_pci_address"], pair["nic_numa_node"]))
    by_nic = {}
    for pair in pairs:
        by_nic.setdefault(pair["nic"], []).append(str(pair["gpu"]))
    for nic, gpus in sorted(by_nic.items()):
        device = _device(rdma, nic)
        if device is None:
            found.append("%s: NIC %s (GPU %s) is not in the node's RDMA devices." % (host, nic, ", ".join(gpus)))
            continue
        found.extend(_port_problems(host, ", ".join(gpus), device, cluster_cidr))
    return found


def fabric_mtu_problems(rdma_by_host):
    """One sentence when the RoCE ports of the nodes (host -> rdma facts) do not share one MTU."""
    seen = {}
    for host, rdma in sorted((rdma_by_host or {}).items()):
        for device in rdma.get("devices") or []:
            for port in device.get("ports") or []:
                if port.get("mtu") is not None:
                    seen.setdefault(port["mtu"], []).append("%s %s" % (host, device["name"]))
    if len(seen) <= 1:
        return []
    listed = "; ".join("%d on %s" % (mtu, ", ".join(where)) for mtu, where in sorted(seen.items()))
    return ["RoCE ports differ in MTU: %s. KV transfers between them are cut to the smaller size or fail: set one "
            "MTU on every RoCE network device." % listed]


def roce_gid_indexes(rdma, cluster_cidr):
    """NIC -> index of its port 1's routable RoCE v2 GID, for each RoCE device that has one."""
    if not cluster_cidr:
        return {}
    network = _network(cluster_cidr)
    indexes = {}
    for device in rdma.get("devices") or []:
        for port in device.get("ports") or []:
            if port["port"] == 1 and port.get("link_layer") == "Ethernet":
                index = _routable_v2_gid(port, network)
                if index is not None:
                    indexes[device["name"]] = index
    return indexes


def _map_pairs(fabric, worker, role_vars, mapping):
    """The GPU-NIC pairs an explicit per-GPU map sets, in gpu_nic_affinity's form."""
    gpus = (fabric.get("amdgpu") or {}).get("gpus") or []
    physical = dict(worker_gpu_keys(worker, role_vars))
    pairs = []
    for key, devices in mapping.items():
        gpu = physical.get(int(key)) if str(key).isdigit() else None
        for nic in devices if isinstance(devices, (list, tuple)) else str(devices).split(","):
            nic = str(nic).strip()
            facts = gpus[gpu] if gpu is not None and gpu < len(gpus) else None
            device = _device(fabric.get("rdma") or {}, nic) or {}
            pairs.append({
                "gpu": gpu if gpu is not None else key,
                "gpu_pci_address": (facts or {}).get("pci_address"),
                "gpu_numa_node": (facts or {}).get("numa_node"),
                "nic": nic,
                "nic_pci_address": device.get("pci_address"),
                "nic_numa_node": device.get("numa_node"),
                # A GPU the node's sysfs does not show cannot be placed: no NUMA verdict.
                "via": nearness(facts, device) if facts and device else "unknown",
            })
    return pairs


def fabric_worker_problems(fabric, host, workers, role_vars, cluster_cidr=None, allow_cross_numa=False, require_rdma=False):
    """What would break the KV transfers of one host's workers, on the node's fabric facts.

    ``fabric`` is the host's ``sglang_pd_fabric`` (tasks/fabric.yml: amdgpu, rdma, pairs,
    gid_index), ``workers`` its workers (pd_workers), ``role_vars`` its sglang_worker_*
    variables. Checks each GPU-NIC pair a worker's ``--disaggregation-ib-device`` sets
    (``auto`` or a per-GPU map: fabric_problems), the NICs of a plain list (present, ACTIVE,
    routable RoCE v2 GID), and that a worker's RoCE NICs share one GID index for
    ``MC_GID_INDEX``. One sentence each, naming host, GPU, NIC and the fix.
    """
    rdma = fabric.get("rdma") or {}
    gid_index = fabric.get("gid_index") or {}
    pairs, listed, found = [], {}, []
    for worker in workers:
        value, variable = worker_ib_device(worker, role_vars)
        if value is None and variable.endswith("auto (the node's GPU-NIC pairing)") and require_rdma:
            found.append("%s: %s is auto but the node shows no RDMA device for the GPUs of worker %s (%d RDMA devices, "
                         "%d GPUs in sysfs): its KV transfers would go over TCP. Check the RDMA stack (ibstat, the rdma role) "
                         "or set sglang_pd_require_rdma: false."
                         % (host, variable.split(":")[0], worker["name"], len(rdma.get("devices") or []),
                            len((fabric.get("amdgpu") or {}).get("gpus") or [])))
        if isinstance(value, Mapping):
            pairs.extend(pair for pair in _map_pairs(fabric, worker, role_vars, value) if pair not in pairs)
        else:
            for nic in worker_nics(worker, role_vars) or []:
                listed.setdefault(nic, []).append(worker["name"])
        env = {}
        for name in WORKER_ENV_VARS + ("",):
            env.update((role_vars.get(name) if name else worker.get("env")) or {})
        indexes = dict((nic, gid_index[nic]) for nic in worker_nics(worker, role_vars) or [] if nic in gid_index)
        if len(set(indexes.values())) > 1 and env.get("MC_GID_INDEX") is None:
            found.append("%s: worker %s uses RoCE NICs whose routable RoCE v2 GIDs have different indexes (%s), and Mooncake "
                         "takes one MC_GID_INDEX for all: give the NICs' network devices their addresses at the same GID "
                         "index, or set MC_GID_INDEX in the worker's env."
                         % (host, worker["name"], ", ".join("%s %d" % item for item in sorted(indexes.items()))))
    found.extend(fabric_problems(pairs, rdma, host, cluster_cidr, allow_cross_numa))
    for nic, names in sorted(listed.items()):
        device = _device(rdma, nic)
        if device is None:
            found.append("%s: NIC %s (all GPUs of worker %s) is not in the node's RDMA devices (%s). Name a device the node "
                         "has, or set sglang_worker_ib_device: auto."
                         % (host, nic, ", ".join(names), ", ".join(d["name"] for d in rdma.get("devices") or []) or "none"))
        else:
            found.extend(_port_problems(host, "all of worker %s" % ", ".join(names), device, cluster_cidr))
    return found


class FilterModule:
    """GPU and RDMA device topology filters."""

    def filters(self):
        return {
            "gpu_nic_affinity": gpu_nic_affinity,
            "fabric_mtu_problems": fabric_mtu_problems,
            "roce_gid_indexes": roce_gid_indexes,
            "fabric_worker_problems": fabric_worker_problems,
        }
