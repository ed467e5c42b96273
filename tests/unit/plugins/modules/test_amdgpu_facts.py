# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _amdgpu
from ansible_collections.mindverse.sglang_pd.plugins.modules import amdgpu_facts
from ansible_collections.mindverse.sglang_pd.tests.unit import sysfs_fixtures as fx

HEALTHY = "healthy"
ONE_MISSING = "one GPU missing"
IN_TREE = "in-tree driver"
NON_AMD = "non-AMD node"
WRONG_GFX = "gfx90a GPUs"


def build(kind, root):
    root = str(root)
    if kind == HEALTHY:
        return fx.amd_gpu_node(root)
    if kind == ONE_MISSING:
        return fx.amd_gpu_node(root, missing=(1,))
    if kind == IN_TREE:
        return fx.amd_gpu_node(root, driver_version=None)
    if kind == WRONG_GFX:
        return fx.amd_gpu_node(root, gfx=90010)
    return fx.non_amd_node(root)


@pytest.mark.parametrize(
    "kind, count, pci_count, missing, driver_loaded, driver_version",
    [
        (HEALTHY, 8, 8, [], True, "6.12.12"),
        (ONE_MISSING, 7, 8, ["0000:22:00.0"], True, "6.12.12"),
        (IN_TREE, 8, 8, [], True, None),
        (NON_AMD, 0, 0, [], False, None),
    ],
)
def test_collect_counts(tmp_path, kind, count, pci_count, missing, driver_loaded, driver_version):
    facts = _amdgpu.collect(build(kind, tmp_path))
    assert facts["gpu_count"] == count
    assert facts["pci_gpu_count"] == pci_count
    assert facts["missing_pci_addresses"] == missing
    assert facts["driver_loaded"] is driver_loaded
    assert facts["driver_version"] == driver_version
    assert facts["kfd_present"] is (kind != NON_AMD)


def test_collect_describes_each_gpu(tmp_path):
    facts = _amdgpu.collect(build(HEALTHY, tmp_path))
    assert [g["pci_address"] for g in facts["gpus"]] == list(fx.MI300X_ADDRESSES)
    first = facts["gpus"][0]
    assert first == {
        "pci_address": "0000:0c:00.0",
        # No numa_node file in this tree; no bridges above a function written in place.
        "numa_node": None,
        "pci_path": ["0000:0c:00.0"],
        "vendor_id": "0x1002",
        "device_id": "0x74b5",
        "model": "MI300X",
        "gfx_target": "gfx942",
        "gfx_target_version": 90402,
        "simd_count": 1216,
        "vram_bytes": 192 * 1024 ** 3,
        "render_node": "/dev/dri/renderD128",
        "card": "card0",
        "kfd_node": 1,
        "unique_id": 0x1447000000000000,
    }
    assert facts["gpus"][7]["render_node"] == "/dev/dri/renderD135"
    assert facts["gpus"][7]["card"] == "card7"
    # The AMD audio function (class 0x0403) is not counted as a GPU.
    assert "0000:00:14.3" not in [g["pci_address"] for g in facts["pci_gpus"]]


@pytest.mark.parametrize(
    "version, name",
    [(90402, "gfx942"), (90010, "gfx90a"), (90008, "gfx908"), (110000, "gfx1100"), (0, None), (None, None)],
)
def test_gfx_target_name(version, name):
    assert _amdgpu.gfx_target_name(version) == name


@pytest.mark.parametrize(
    "device_id, model",
    [(0x74A1, "MI300X"), (0x74B5, "MI300X"), (0x74BD, "MI300X"), (0x740F, "unknown AMD GPU (0x740f)")],
)
def test_model_name(device_id, model):
    assert _amdgpu.model_name(device_id) == model


@pytest.mark.parametrize(
    "domain, location_id, address",
    [(0, 0x0C00, "0000:0c:00.0"), (2, 0xDF00, "0002:df:00.0"), (0, (0x5C << 8) | (1 << 3) | 2, "0000:5c:01.2")],
)
def test_pci_address(domain, location_id, address):
    assert _amdgpu.pci_address(domain, location_id) == address


@pytest.mark.parametrize("check_mode", [False, True])
def test_module_healthy_node_passes_expectations(tmp_path, capsys, check_mode):
    root = build(HEALTHY, tmp_path)
    args = {"root": root, "expected_count": 8, "expected_gfx": "gfx942", "_ansible_check_mode": check_mode}
    code, result = fx.run_module(amdgpu_facts.main, args, capsys)
    assert code == 0
    assert result["changed"] is False
    assert result["problems"] == []
    assert result["ansible_facts"]["amdgpu"]["gpu_count"] == 8


def test_module_second_run_is_identical(tmp_path, capsys):
    root = build(HEALTHY, tmp_path)
    first = fx.run_module(amdgpu_facts.main, {"root": root}, capsys)
    second = fx.run_module(amdgpu_facts.main, {"root": root}, capsys)
    assert first == second
    assert first[1]["changed"] is False


@pytest.mark.parametrize(
    "kind, args, expected_messages",
    [
        (
            ONE_MISSING,
            {"expected_count": 8},
            [
                "GPU at 0000:22:00.0 present on PCI but not visible to the driver",
                "expected 8 GPUs, the driver shows 7 and PCI shows 8",
            ],
        ),
        (
            NON_AMD,
            {"expected_count": 8, "expected_gfx": "gfx942"},
            [
                "the amdgpu kernel module is not loaded",
                "expected 8 GPUs, the driver shows 0 and PCI shows 0 (GPUs are missing from the PCI bus itself",
            ],
        ),
        (
            WRONG_GFX,
            {"expected_gfx": "gfx942"},
            ["GPU at 0000:0c:00.0 reports gfx90a (MI300X), expected gfx942"],
        ),
    ],
)
def test_module_fails_naming_each_problem(tmp_path, capsys, kind, args, expected_messages):
    args = dict(args, root=build(kind, tmp_path))
    code, result = fx.run_module(amdgpu_facts.main, args, capsys)
    assert code == 1
    assert result["failed"] is True
    for message in expected_messages:
        assert any(p.startswith(message) for p in result["problems"]), (message, result["problems"])
        assert message in result["msg"]
    # The facts still come back, so a play can show them.
    assert "gpus" in result["ansible_facts"]["amdgpu"]


def test_module_without_expectations_only_reports(tmp_path, capsys):
    code, result = fx.run_module(amdgpu_facts.main, {"root": build(ONE_MISSING, tmp_path)}, capsys)
    assert code == 0
    assert result["problems"] == []
    assert result["ansible_facts"]["amdgpu"]["missing_pci_addresses"] == ["0000:22:00.0"]


def test_expected_zero_gpus_on_non_amd_node(tmp_path, capsys):
    code, result = fx.run_module(amdgpu_facts.main, {"root": build(NON_AMD, tmp_path), "expected_count": 0}, capsys)
    assert code == 0
    assert result["problems"] == []
