# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _rdma
from ansible_collections.mindverse.sglang_pd.plugins.modules import rdma_facts
from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx

EXPECTED = {"expected_devices": list(fx.IB_DEVICES), "expected_rate_gbps": 400}


def build(kind, root):
    root = str(root)
    if kind == "healthy":
        return fx.ib_node(root)
    if kind == "port down":
        return fx.ib_node(root, down=("mlx5_ib3",))
    if kind == "slow port":
        return fx.ib_node(root, slow=("mlx5_ib6",))
    if kind == "device missing":
        return fx.ib_node(root, absent=("mlx5_ib7",))
    return fx.non_amd_node(root)


@pytest.mark.parametrize(
    "text, number, word",
    [("4: ACTIVE", 4, "ACTIVE"), ("1: DOWN", 1, "DOWN"), ("5: LinkUp", 5, "LinkUp"),
     ("3: Disabled", 3, "Disabled"), ("ACTIVE", None, "ACTIVE"), (None, None, None)],
)
def test_parse_state(text, number, word):
    assert _rdma.parse_state(text) == (number, word)


@pytest.mark.parametrize(
    "text, rate",
    [("400 Gb/sec (4X NDR)", 400), ("200 Gb/sec (4X HDR)", 200), ("2.5 Gb/sec (1X SDR)", 2.5),
     ("100 Gb/sec (4X EDR)", 100), ("garbage", None), (None, None)],
)
def test_parse_rate(text, rate):
    assert _rdma.parse_rate(text) == rate


@pytest.mark.parametrize(
    "kind, devices, active",
    [("healthy", 8, 8), ("port down", 8, 7), ("slow port", 8, 8), ("device missing", 7, 7), ("non-AMD", 0, 0)],
)
def test_collect(tmp_path, kind, devices, active):
    facts = _rdma.collect(build(kind, tmp_path))
    assert facts["device_count"] == devices
    assert facts["port_count"] == devices
    ports = [p for d in facts["devices"] for p in d["ports"]]
    assert sum(1 for p in ports if p["state"] == "ACTIVE") == active


def test_collect_describes_each_port(tmp_path):
    facts = _rdma.collect(build("healthy", tmp_path))
    assert [d["name"] for d in facts["devices"]] == list(fx.IB_DEVICES)
    device = facts["devices"][0]
    assert device["node_type"] == "CA"
    assert device["hca_type"] == "MT4129"
    guid = device["node_guid"]
    assert device["ports"] == [{
        "port": 1,
        "state": "ACTIVE",
        "state_num": 4,
        "phys_state": "LinkUp",
        "phys_state_num": 5,
        "rate": "400 Gb/sec (4X NDR)",
        "rate_gbps": 400,
        "link_layer": "InfiniBand",
        "gid0": "fe80:0000:0000:0000:" + guid,
        "gids": [{"index": 0, "gid": "fe80:0000:0000:0000:" + guid, "type": None, "ndev": None, "ipv4": None}],
        "netdev": None,
        "mtu": None,
    }]
    # No device link in this tree: where it sits on PCI is unknown.
    assert (device["pci_address"], device["numa_node"], device["pci_path"]) == (None, None, [])


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_healthy_node_passes(tmp_path, capsys, check_mode):
    args = dict(EXPECTED, root=build("healthy", tmp_path), _ansible_check_mode=check_mode)
    code, result = fx.run_module(rdma_facts.main, args, capsys)
    assert code == 0
    assert result["changed"] is False
    assert result["problems"] == []
    assert result["ansible_facts"]["rdma"]["device_count"] == 8


def test_module_second_run_is_identical(tmp_path, capsys):
    root = build("healthy", tmp_path)
    assert fx.run_module(rdma_facts.main, {"root": root}, capsys) == fx.run_module(
        rdma_facts.main, {"root": root}, capsys
    )


@pytest.mark.parametrize(
    "kind, args, problems",
    [
        (
            "port down",
            EXPECTED,
            [
                "mlx5_ib3 port 1: state DOWN (physical state Disabled), expected ACTIVE",
                "mlx5_ib3 port 1: rate 10 Gb/s, expected 400 Gb/s",
            ],
        ),
        ("slow port", EXPECTED, ["mlx5_ib6 port 1: rate 200 Gb/s, expected 400 Gb/s"]),
        (
            "device missing",
            EXPECTED,
            ["mlx5_ib7: device missing (found: " + ", ".join(fx.IB_DEVICES[:7]) + ")"],
        ),
        (
            "non-AMD",
            EXPECTED,
            ["%s: device missing (found: none)" % name for name in fx.IB_DEVICES],
        ),
        ("non-AMD", {"expected_rate_gbps": 400}, ["no RDMA device under /sys/class/infiniband"]),
        # Without a device list every port of every device is checked.
        ("slow port", {"expected_rate_gbps": 400}, ["mlx5_ib6 port 1: rate 200 Gb/s, expected 400 Gb/s"]),
    ],
)
def test_module_fails_naming_each_port(tmp_path, capsys, kind, args, problems):
    args = dict(args, root=build(kind, tmp_path))
    code, result = fx.run_module(rdma_facts.main, args, capsys)
    assert code == 1
    assert result["problems"] == problems
    for problem in problems:
        assert problem in result["msg"]


def test_module_only_checks_expected_devices(tmp_path, capsys):
    args = {"root": build("port down", tmp_path), "expected_devices": ["mlx5_ib0", "mlx5_ib1"],
            "expected_rate_gbps": 400}
    code, result = fx.run_module(rdma_facts.main, args, capsys)
    assert code == 0
    assert result["problems"] == []


def test_module_without_expectations_only_reports(tmp_path, capsys):
    code, result = fx.run_module(rdma_facts.main, {"root": build("port down", tmp_path)}, capsys)
    assert code == 0
    assert result["problems"] == []
