# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU and RDMA device placement read from fixture sysfs trees, and the GPU-NIC pairing."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import topology
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _amdgpu, _rdma
from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx


def facts(root):
    return _amdgpu.collect(str(root)), _rdma.collect(str(root))


def test_each_gpu_and_nic_has_its_pci_address_numa_node_and_bridges(tmp_path):
    amdgpu, rdma = facts(fx.topology_node(str(tmp_path)))
    assert [g["numa_node"] for g in amdgpu["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert amdgpu["gpus"][2]["pci_path"] == ["0000:00:03.0", "0000:a2:00.0", "0000:38:00.0"]
    nic = rdma["devices"][2]
    assert (nic["name"], nic["pci_address"], nic["numa_node"]) == ("mlx5_ib2", "0000:39:00.0", 0)
    assert nic["pci_path"] == ["0000:00:03.0", "0000:a2:00.0", "0000:39:00.0"]


def test_healthy_node_pairs_each_gpu_with_the_nic_under_its_switch(tmp_path):
    pairs = topology.gpu_nic_affinity(*facts(fx.topology_node(str(tmp_path))))
    assert [(p["gpu"], p["nic"], p["via"]) for p in pairs] == [(i, "mlx5_ib%d" % i, "pcie_switch") for i in range(8)]
    assert pairs[5]["gpu_pci_address"] == "0000:af:00.0" and pairs[5]["nic_pci_address"] == "0000:b0:00.0"


def test_without_shared_switches_the_numa_node_decides_one_to_one(tmp_path):
    """A VM: every function on its own root port; NICs of node 0 listed last by NUMA."""
    root = fx.topology_node(str(tmp_path), switches=False, nic_numa=lambda i: 1 - i // 4)
    pairs = topology.gpu_nic_affinity(*facts(root))
    assert {p["via"] for p in pairs} == {"numa"}
    assert [p["nic"] for p in pairs] == ["mlx5_ib%d" % i for i in (4, 5, 6, 7, 0, 1, 2, 3)]
    assert all(p["gpu_numa_node"] == p["nic_numa_node"] for p in pairs)


def test_a_crossed_numa_map_says_none(tmp_path):
    """Every NIC on NUMA node 1: the GPUs of node 0 have no near NIC, and the pairing says so."""
    root = fx.topology_node(str(tmp_path), switches=False, nic_numa=lambda i: 1)
    pairs = topology.gpu_nic_affinity(*facts(root))
    assert [p["via"] for p in pairs] == ["none"] * 4 + ["numa"] * 4
    assert (pairs[0]["gpu_numa_node"], pairs[0]["nic_numa_node"]) == (0, 1)


def test_fewer_nics_than_gpus_are_shared_evenly(tmp_path):
    root = fx.topology_node(str(tmp_path), switches=False, nics=("mlx5_ib0", "mlx5_ib1"), nic_numa=lambda i: i)
    pairs = topology.gpu_nic_affinity(*facts(root))
    assert [p["nic"] for p in pairs] == ["mlx5_ib0"] * 4 + ["mlx5_ib1"] * 4
    assert topology.gpu_nic_affinity(facts(root)[0], {"devices": []}) == []


def test_roce_gids_carry_their_type_address_and_netdev_mtu(tmp_path):
    root = fx.topology_node(str(tmp_path), nics=("mlx5_0",), link_layer="Ethernet")
    fx.add_roce_gids(root, "mlx5_0", "10.0.0.11", "eth2", mtu=4200)
    port = _rdma.collect(root)["devices"][0]["ports"][0]
    assert (port["link_layer"], port["netdev"], port["mtu"]) == ("Ethernet", "eth2", 4200)
    assert [(g["index"], g["type"], g["ipv4"]) for g in port["gids"]] == [
        (0, "IB/RoCE v1", None), (1, "RoCE v2", None), (2, "IB/RoCE v1", "10.0.0.11"), (3, "RoCE v2", "10.0.0.11")]


def test_infiniband_ports_have_no_sysfs_mtu(tmp_path):
    port = _rdma.collect(fx.topology_node(str(tmp_path), nics=("mlx5_ib0",)))["devices"][0]["ports"][0]
    assert (port["netdev"], port["mtu"], port["gids"][0]["type"]) == (None, None, None)


@pytest.mark.parametrize("gid, ipv4", [
    ("0000:0000:0000:0000:0000:ffff:0a00:000b", "10.0.0.11"),
    ("0000:0000:0000:0000:0000:FFFF:c0a8:0101", "192.168.1.1"),
    ("fe80:0000:0000:0000:0e42:a1ff:fe97:0001", None),
    ("0000:0000:0000:0000:0000:0000:0a00:000b", None),
    ("not a gid", None),
    (None, None),
])
def test_ipv4_of_gid(gid, ipv4):
    assert _rdma.ipv4_of_gid(gid) == ipv4


def test_the_filter_refuses_anything_but_facts():
    with pytest.raises(AnsibleFilterError, match="amdgpu facts and the rdma facts"):
        topology.gpu_nic_affinity([], {})


def problems_of(root, host="node-1", cidr="10.0.0.0/24", **args):
    amdgpu, rdma = facts(root)
    return topology.fabric_problems(topology.gpu_nic_affinity(amdgpu, rdma), rdma, host, cidr, **args)


def test_a_healthy_infiniband_node_has_no_fabric_problem(tmp_path):
    assert problems_of(fx.topology_node(str(tmp_path))) == []


def test_a_crossed_numa_map_is_refused_naming_host_gpu_nic_and_fix(tmp_path):
    root = fx.topology_node(str(tmp_path), switches=False, nic_numa=lambda i: 1)
    found = problems_of(root)
    assert len(found) == 4
    assert found[0] == (
        "node-1: GPU 0 (0000:0c:00.0, NUMA node 0) is paired with NIC mlx5_ib0 (0000:0d:00.0, NUMA node 1) on another "
        "NUMA node: its KV transfers cross the CPU interconnect. Map the GPU to a NIC of its NUMA node, or accept it "
        "(allow_cross_numa).")
    assert problems_of(root, allow_cross_numa=True) == []


def test_a_down_port_is_refused(tmp_path):
    root = fx.topology_node(str(tmp_path))
    fx.add_ib_port(root, "mlx5_ib1", state="1: DOWN", phys_state="3: Disabled")
    found = problems_of(root)
    assert found == [
        "node-1: NIC mlx5_ib1 port 1 (GPU 1) is DOWN (physical state Disabled), not ACTIVE: KV transfers through "
        "it fail. Bring the link up (ibstat mlx5_ib1) or pair the GPU with another NIC."]


def test_roce_with_only_link_local_gids_is_refused_and_a_routable_v2_gid_is_found(tmp_path):
    root = fx.topology_node(str(tmp_path), nics=("mlx5_0", "mlx5_1"), link_layer="Ethernet",
                            switches=False, nic_numa=lambda i: i)
    fx.add_roce_gids(root, "mlx5_0", "10.0.0.11", "eth0")
    fx.add_roce_gids(root, "mlx5_1", "10.0.0.12", "eth1", v2=False)
    rdma = facts(root)[1]
    assert topology.roce_gid_index(rdma, "mlx5_0", "10.0.0.0/24") == 3
    assert topology.roce_gid_index(rdma, "mlx5_0", "10.0.0.7/24") == 3  # a node's address with its prefix names the network
    assert topology.roce_gid_index(rdma, "mlx5_0", "192.168.0.0/16") is None
    assert topology.roce_gid_index(rdma, "mlx5_1", "10.0.0.0/24") is None
    found = problems_of(root)
    assert len(found) == 1
    link_local = "fe80:0000:0000:0000:0e42:a1ff:fe97:0001"
    assert found[0] == (
        "node-1: NIC mlx5_1 port 1 (GPU 4, 5, 6, 7) is RoCE without a RoCE v2 GID in 10.0.0.0/24 (GIDs: 0 IB/RoCE v1 %s, "
        "1 RoCE v2 %s, 2 IB/RoCE v1 10.0.0.12): Mooncake would pick a link-local GID and cross-node transfers fail. "
        "Give its network device eth1 an address in 10.0.0.0/24." % (link_local, link_local))


def test_mixed_mtus_across_nodes_are_refused(tmp_path):
    rdmas = {}
    for host, mtu in (("node-1", 9000), ("node-2", 9000), ("node-3", 4200)):
        root = fx.topology_node(str(tmp_path / host), nics=("mlx5_0",), link_layer="Ethernet")
        fx.add_roce_gids(root, "mlx5_0", "10.0.0.11", "eth0", mtu=mtu)
        rdmas[host] = facts(root)[1]
    assert topology.fabric_mtu_problems(rdmas) == [
        "RoCE ports differ in MTU: 4200 on node-3 mlx5_0; 9000 on node-1 mlx5_0, node-2 mlx5_0. KV transfers between "
        "them are cut to the smaller size or fail: set one MTU on every RoCE network device."]
    del rdmas["node-3"]
    assert topology.fabric_mtu_problems(rdmas) == []


def test_a_bad_cluster_cidr_is_named():
    with pytest.raises(AnsibleFilterError, match="'nonsense' is not a network"):
        topology.roce_gid_index({"devices": []}, "mlx5_0", "nonsense")


def placed(name, bridges, numa_node=0):
    """A function as the fact modules report it: its PCI address at the end of its sysfs path."""
    return {"name": name, "pci_address": name, "numa_node": numa_node, "pci_path": list(bridges) + [name]}


def test_the_deepest_shared_bridge_wins_and_a_shared_root_port_counts_as_near():
    """GPU 0 sits under a switch below root port 1; GPU 1 straight under root port 2.
    mlx5_0 shares only root port 1 with GPU 0, mlx5_1 its switch too; mlx5_2 shares root port 2 with GPU 1."""
    amdgpu = {"gpus": [placed("gpu0", ["0000:00:01.0", "0000:01:00.0"]), placed("gpu1", ["0000:00:02.0"])]}
    rdma = {"devices": [placed("mlx5_0", ["0000:00:01.0"]), placed("mlx5_1", ["0000:00:01.0", "0000:01:00.0"]),
                        placed("mlx5_2", ["0000:00:02.0"])]}
    pairs = topology.gpu_nic_affinity(amdgpu, rdma)
    assert [(p["gpu"], p["nic"], p["via"]) for p in pairs] == [(0, "mlx5_1", "pcie_switch"), (1, "mlx5_2", "pcie_switch")]


def test_equally_near_nics_are_shared_in_turn(tmp_path):
    """Two NICs on NUMA node 0: its GPUs alternate between them, and so do node 1's GPUs (near to neither)."""
    root = fx.topology_node(str(tmp_path), switches=False, nics=("mlx5_ib0", "mlx5_ib1"), nic_numa=lambda i: 0)
    pairs = topology.gpu_nic_affinity(*facts(root))
    assert [(p["nic"], p["via"]) for p in pairs] == [("mlx5_ib%d" % (i % 2), "numa" if i < 4 else "none") for i in range(8)]


def test_the_refusals_say_what_the_filter_takes_and_why_the_cidr_is_wrong():
    with pytest.raises(AnsibleFilterError) as refused:
        topology.gpu_nic_affinity([], {})
    assert str(refused.value) == "gpu_nic_affinity takes the amdgpu facts and the rdma facts of one node [SGLPD-DEF-001]"
    with pytest.raises(AnsibleFilterError) as refused:
        topology.roce_gid_index({"devices": []}, "mlx5_0", "nonsense")
    assert str(refused.value) == "cluster_cidr 'nonsense' is not a network: 'nonsense' does not appear to be an IPv4 or IPv6 network [SGLPD-FAB-002]"


def test_what_a_port_does_not_show_is_named_as_unknown():
    pairs = [{"gpu": 0, "gpu_pci_address": "0000:0c:00.0", "gpu_numa_node": 0, "nic": "mlx5_0",
              "nic_pci_address": "0000:0d:00.0", "nic_numa_node": 0, "via": "pcie_switch"}]
    untyped = {"index": 0, "gid": "fe80:0000:0000:0000:0e42:a1ff:fe97:0001"}
    rdma = {"devices": [{"name": "mlx5_0", "ports": [
        {"port": 1, "link_layer": "Ethernet"},
        {"port": 2, "state": "ACTIVE", "link_layer": "Ethernet", "netdev": "eth0", "gids": [untyped]}]}]}
    assert topology.fabric_problems(pairs, rdma, "node-1", "10.0.0.0/24") == [
        "node-1: NIC mlx5_0 port 1 (GPU 0) is unknown (physical state unknown), not ACTIVE: KV transfers through it fail. "
        "Bring the link up (ibstat mlx5_0) or pair the GPU with another NIC.",
        "node-1: NIC mlx5_0 port 1 (GPU 0) is RoCE without a RoCE v2 GID in 10.0.0.0/24 (GIDs: none): Mooncake would pick "
        "a link-local GID and cross-node transfers fail. Give its network device (none) an address in 10.0.0.0/24.",
        "node-1: NIC mlx5_0 port 2 (GPU 0) is RoCE without a RoCE v2 GID in 10.0.0.0/24 (GIDs: 0 ? %s): Mooncake would "
        "pick a link-local GID and cross-node transfers fail. Give its network device eth0 an address in 10.0.0.0/24."
        % untyped["gid"]]


def test_paired_nics_the_node_lacks_are_each_named_with_their_gpus():
    pairs = [{"gpu": gpu, "nic": nic, "via": "unknown"} for gpu, nic in ((0, "mlx5_8"), (1, "mlx5_8"), (2, "mlx5_9"))]
    assert topology.fabric_problems(pairs, {"devices": []}, "node-1") == [
        "node-1: NIC mlx5_8 (GPU 0, 1) is not in the node's RDMA devices.",
        "node-1: NIC mlx5_9 (GPU 2) is not in the node's RDMA devices."]


def test_mc_gid_index_comes_from_port_1_of_roce_devices_only():
    routable = [{"index": 3, "type": "RoCE v2", "ipv4": "10.0.0.11"}]
    rdma = {"devices": [{"name": "mlx5_0", "ports": [{"port": 2, "link_layer": "Ethernet", "gids": routable}]},
                        {"name": "mlx5_1", "ports": [{"port": 1, "link_layer": "Ethernet", "gids": routable}]}]}
    assert topology.roce_gid_indexes(rdma, "10.0.0.0/24") == {"mlx5_1": 3}


def test_the_filters_are_registered_by_these_names():
    assert sorted(topology.FilterModule().filters()) == [
        "fabric_mtu_problems", "fabric_worker_problems", "gpu_nic_affinity", "roce_gid_indexes"]
