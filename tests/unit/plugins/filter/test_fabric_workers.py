# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""sglang_worker_ib_device: auto, the check of the NICs a worker would use, and MC_GID_INDEX,
on fixture sysfs trees of an ND MI300X v5 style node (8 GPUs, 8 NICs, two NUMA nodes)."""
from __future__ import annotations

import json

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.filter import topology
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _amdgpu, _rdma
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils import service_plan as sp
from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx

CIDR = "10.0.0.0/24"


def fabric(root, cidr=CIDR):
    """What the role's tasks/fabric.yml sets as sglang_pd_fabric."""
    amdgpu, rdma = _amdgpu.collect(str(root)), _rdma.collect(str(root))
    return {"amdgpu": amdgpu, "rdma": rdma, "pairs": topology.gpu_nic_affinity(amdgpu, rdma),
            "gid_index": topology.roce_gid_indexes(rdma, cidr)}


def roce_node(root, v2=True, ipv4="10.0.0.%d", **kwargs):
    """The node of topology_node with RoCE NICs, each with its GIDs on eth<i>."""
    fx.topology_node(str(root), link_layer="Ethernet", **kwargs)
    for index, nic in enumerate(fx.IB_DEVICES):
        fx.add_roce_gids(str(root), nic, ipv4 % (11 + index), "eth%d" % index, v2=v2)
    return root


def worker(gpus=None, ib_device=None, env=None, mode="decode"):
    return {"host": "d0", "address": "10.0.0.11", "name": "sglang-%s" % mode, "mode": mode, "gpus": gpus, "gpus_per_host": 8,
            "ib_device": ib_device, "env": env or {}}


def role_vars(node_fabric, ib_device="auto", **more):
    return dict({"sglang_worker_ib_device": ib_device, "sglang_worker_fabric": node_fabric}, **more)


def ib_flag(one, variables):
    argv = sp.worker_options(one, variables)[0]["disaggregation_ib_device"]
    return json.loads(argv) if argv and argv.startswith("{") else argv


def test_auto_maps_every_gpu_of_a_whole_node_worker_to_the_nic_under_its_switch(tmp_path):
    node = fabric(fx.topology_node(str(tmp_path)))
    assert ib_flag(worker(), role_vars(node)) == dict((str(i), "mlx5_ib%d" % i) for i in range(8))
    assert topology.fabric_worker_problems(node, "d0", [worker()], role_vars(node), CIDR) == []


@pytest.mark.parametrize("isolation, keys", [("visible_devices", [0, 1, 2, 3]), ("base_gpu_id", [4, 5, 6, 7])])
def test_auto_keys_a_gpu_subset_as_the_worker_counts_its_gpus(tmp_path, isolation, keys):
    node = fabric(fx.topology_node(str(tmp_path)))
    variables = role_vars(node, sglang_worker_gpu_isolation=isolation)
    assert ib_flag(worker(gpus=[4, 5, 6, 7]), variables) == dict((str(k), "mlx5_ib%d" % (4 + i)) for i, k in enumerate(keys))


def test_auto_without_node_facts_or_rdma_devices_leaves_the_flag_out(tmp_path):
    assert ib_flag(worker(), role_vars(None)) is None
    no_nics = fabric(fx.topology_node(str(tmp_path), nics=()))
    assert ib_flag(worker(), role_vars(no_nics)) is None
    assert topology.fabric_worker_problems(no_nics, "d0", [worker()], role_vars(no_nics), CIDR) == []


def test_auto_without_rdma_devices_is_refused_when_rdma_is_required(tmp_path):
    no_nics = fabric(fx.topology_node(str(tmp_path), nics=()))
    [problem] = topology.fabric_worker_problems(no_nics, "d0", [worker()], role_vars(no_nics), CIDR, require_rdma=True)
    assert problem.startswith("d0: sglang_worker_ib_device is auto but the node shows no RDMA device")
    assert "0 RDMA devices, 8 GPUs" in problem and "sglang_pd_require_rdma" in problem


def test_a_crossed_numa_map_is_refused_naming_host_gpu_and_nic(tmp_path):
    """Every NIC on NUMA node 1: auto pairs GPUs 0-3 across the socket, and so does a map written by hand."""
    node = fabric(fx.topology_node(str(tmp_path), switches=False, nic_numa=lambda i: 1))
    problems = topology.fabric_worker_problems(node, "d0", [worker()], role_vars(node), CIDR)
    assert len(problems) == 4
    assert problems[0].startswith("d0: GPU 0 (0000:0c:00.0, NUMA node 0) is paired with NIC mlx5_ib")
    assert "on another NUMA node" in problems[0] and "allow_cross_numa" in problems[0]
    assert topology.fabric_worker_problems(node, "d0", [worker()], role_vars(node), CIDR, allow_cross_numa=True) == []
    by_hand = role_vars(node, ib_device={0: "mlx5_ib4", 4: "mlx5_ib5"})
    [problem] = topology.fabric_worker_problems(node, "d0", [worker()], by_hand, CIDR)
    assert problem.startswith("d0: GPU 0 (0000:0c:00.0, NUMA node 0) is paired with NIC mlx5_ib4 (0000:a0:00.0, NUMA node 1)")


def test_a_down_port_is_refused(tmp_path):
    root = fx.topology_node(str(tmp_path))
    fx.add_ib_port(str(root), "mlx5_ib3", state="1: DOWN", phys_state="3: Disabled")
    node = fabric(root)
    [problem] = topology.fabric_worker_problems(node, "d0", [worker()], role_vars(node), CIDR)
    assert problem.startswith("d0: NIC mlx5_ib3 port 1 (GPU 3) is DOWN (physical state Disabled), not ACTIVE")
    assert "ibstat mlx5_ib3" in problem


def test_a_listed_nic_the_node_lacks_is_refused(tmp_path):
    node = fabric(fx.topology_node(str(tmp_path)))
    variables = role_vars(node, ib_device=["mlx5_ib0", "mlx5_9"])
    [problem] = topology.fabric_worker_problems(node, "d0", [worker()], variables, CIDR)
    assert problem.startswith("d0: NIC mlx5_9 (all GPUs of worker sglang-decode) is not in the node's RDMA devices")


def test_roce_with_a_routable_v2_gid_passes_and_its_index_becomes_mc_gid_index(tmp_path):
    node = fabric(roce_node(tmp_path))
    assert node["gid_index"] == dict((nic, 3) for nic in fx.IB_DEVICES)
    assert topology.fabric_worker_problems(node, "d0", [worker()], role_vars(node), CIDR) == []
    assert sp.worker_env(worker(), role_vars(node))["MC_GID_INDEX"] == "3"


def test_mc_gid_index_set_in_the_inventory_wins(tmp_path):
    node = fabric(roce_node(tmp_path))
    assert sp.worker_env(worker(env={"MC_GID_INDEX": 5}), role_vars(node))["MC_GID_INDEX"] == "5"
    variables = role_vars(node, sglang_worker_mooncake_env={"MC_GID_INDEX": 1})
    assert sp.worker_env(worker(), variables)["MC_GID_INDEX"] == "1"
    assert "MC_GID_INDEX" not in sp.worker_env(worker(), role_vars(None))


def test_roce_with_only_link_local_gids_is_refused(tmp_path):
    """The v2 GIDs carry no address in the cluster network: Mooncake would pick a link-local GID."""
    node = fabric(roce_node(tmp_path, ipv4="192.168.9.%d"))
    problems = topology.fabric_worker_problems(node, "d0", [worker()], role_vars(node), CIDR)
    assert len(problems) == 8
    assert problems[0].startswith("d0: NIC mlx5_ib0 port 1 (GPU 0) is RoCE without a RoCE v2 GID in 10.0.0.0/24")
    assert "Give its network device eth0 an address in 10.0.0.0/24" in problems[0]
    assert "MC_GID_INDEX" not in sp.worker_env(worker(), role_vars(node))


def test_roce_nics_with_different_gid_indexes_are_refused_unless_mc_gid_index_is_set(tmp_path):
    root = roce_node(tmp_path)
    node = fabric(root)
    node["gid_index"]["mlx5_ib5"] = 4
    [problem] = topology.fabric_worker_problems(node, "d0", [worker()], role_vars(node), CIDR)
    assert problem == (
        "d0: worker sglang-decode uses RoCE NICs whose routable RoCE v2 GIDs have different indexes (mlx5_ib0 3, mlx5_ib1 3, "
        "mlx5_ib2 3, mlx5_ib3 3, mlx5_ib4 3, mlx5_ib5 4, mlx5_ib6 3, mlx5_ib7 3), and Mooncake takes one MC_GID_INDEX for "
        "all: give the NICs' network devices their addresses at the same GID index, or set MC_GID_INDEX in the worker's env.")
    assert topology.fabric_worker_problems(node, "d0", [worker(env={"MC_GID_INDEX": 3})], role_vars(node), CIDR) == []


def test_mixed_mtus_across_the_fleet_are_refused(tmp_path):
    one = fabric(roce_node(tmp_path / "p0"))
    other_root = roce_node(tmp_path / "d0")
    fx.write(str(other_root / "sys/class/net/eth2/mtu"), "1500\n")
    [problem] = topology.fabric_mtu_problems({"p0": one["rdma"], "d0": fabric(other_root)["rdma"]})
    assert problem.startswith("RoCE ports differ in MTU: 1500 on d0 mlx5_ib2; 9000 on d0 mlx5_ib0")


def test_auto_with_no_pairing_for_the_workers_gpus_names_what_the_node_shows(tmp_path):
    """The node's sysfs shows GPUs 0-3 only: auto finds no NIC for a worker on GPUs 4-7."""
    node = fabric(fx.topology_node(str(tmp_path)))
    node["amdgpu"]["gpus"] = node["amdgpu"]["gpus"][:4]
    node["pairs"] = topology.gpu_nic_affinity(node["amdgpu"], node["rdma"])
    variables = role_vars(node, sglang_worker_gpu_isolation="base_gpu_id")
    assert topology.fabric_worker_problems(node, "d0", [worker(gpus=[4, 5, 6, 7])], variables, CIDR, require_rdma=True) == [
        "d0: sglang_worker_ib_device is auto but the node shows no RDMA device for the GPUs of worker sglang-decode "
        "(8 RDMA devices, 4 GPUs in sysfs): its KV transfers would go over TCP. Check the RDMA stack (ibstat, the rdma "
        "role) or set sglang_pd_require_rdma: false."]


def test_a_per_gpu_map_is_checked_nic_by_nic(tmp_path):
    """A comma list per GPU names each NIC; a key that is no GPU number is named as written; a GPU
    the node's sysfs does not show gets no NUMA verdict, but its NIC is still checked."""
    node = fabric(fx.topology_node(str(tmp_path)))
    node["amdgpu"]["gpus"] = node["amdgpu"]["gpus"][:4]
    by_hand = role_vars(node, ib_device={0: "mlx5_ib0,mlx5_8", "first": "mlx5_9", 4: "mlx5_ib4"})
    assert topology.fabric_worker_problems(node, "d0", [worker()], by_hand, CIDR) == [
        "d0: NIC mlx5_8 (GPU 0) is not in the node's RDMA devices.",
        "d0: NIC mlx5_9 (GPU first) is not in the node's RDMA devices."]


def test_listed_nics_name_every_worker_that_uses_them(tmp_path):
    root = fx.topology_node(str(tmp_path))
    fx.add_ib_port(str(root), "mlx5_ib3", state="1: DOWN", phys_state="3: Disabled")
    node = fabric(root)
    both = [worker(mode="prefill"), worker()]
    assert topology.fabric_worker_problems(node, "d0", both, role_vars(node, ib_device=["mlx5_ib3", "mlx5_9"]), CIDR) == [
        "d0: NIC mlx5_9 (all GPUs of worker sglang-prefill, sglang-decode) is not in the node's RDMA devices "
        "(mlx5_ib0, mlx5_ib1, mlx5_ib2, mlx5_ib3, mlx5_ib4, mlx5_ib5, mlx5_ib6, mlx5_ib7). Name a device the node has, "
        "or set sglang_worker_ib_device: auto.",
        "d0: NIC mlx5_ib3 port 1 (GPU all of worker sglang-prefill, sglang-decode) is DOWN (physical state Disabled), not "
        "ACTIVE: KV transfers through it fail. Bring the link up (ibstat mlx5_ib3) or pair the GPU with another NIC."]
    no_nics = fabric(fx.topology_node(str(tmp_path / "bare"), nics=()))
    [problem] = topology.fabric_worker_problems(no_nics, "d0", [worker()], role_vars(no_nics, ib_device=["mlx5_0"]), CIDR)
    assert "is not in the node's RDMA devices (none)." in problem
