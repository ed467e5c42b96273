# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Build sysfs trees for the fact-module tests.

The layout and value formats follow what the kernel writes: KFD topology ``properties``
files (``name value`` lines), DRM cards with a PCI ``uevent``, PCI ``vendor``/``device``/
``class`` in 0x-hex, ``/sys/module/amdgpu/version`` from amdgpu-dkms, and
``/sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer,gids/N}``.
"""

from __future__ import annotations

import os

# Eight MI300X on an ND MI300X v5: the virtual function 0x74b5 at these PCI addresses.
MI300X_ADDRESSES = (
    "0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0",
    "0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0",
)
MI300X_VF = 0x74B5
MI300X_VRAM = 192 * 1024 ** 3
GFX942 = 90402
AMDGPU_VERSION = "6.12.12"
IB_DEVICES = tuple("mlx5_ib%d" % i for i in range(8))
NDR_RATE = "400 Gb/sec (4X NDR)"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _properties(values):
    return "".join("%s %d\n" % (key, value) for key, value in values)


def _location_id(address):
    bus, device_function = address.split(":")[1:]
    device, function = device_function.split(".")
    return (int(bus, 16) << 8) | (int(device, 16) << 3) | int(function, 16)


def add_pci_device(root, address, vendor, device, pci_class):
    base = os.path.join(root, "sys/bus/pci/devices", address)
    write(os.path.join(base, "vendor"), "0x%04x\n" % vendor)
    write(os.path.join(base, "device"), "0x%04x\n" % device)
    write(os.path.join(base, "class"), "0x%06x\n" % pci_class)


def add_cpu_node(root, node=0):
    base = os.path.join(root, "sys/class/kfd/kfd/topology/nodes", str(node))
    write(os.path.join(base, "properties"), _properties([
        ("cpu_cores_count", 96), ("simd_count", 0), ("mem_banks_count", 1),
        ("gfx_target_version", 0), ("vendor_id", 0), ("device_id", 0),
        ("location_id", 0), ("domain", 0), ("drm_render_minor", 0),
    ]))
    write(os.path.join(base, "mem_banks/0/properties"), _properties([
        ("heap_type", 0), ("size_in_bytes", 1024 ** 4),
    ]))


def add_gpu(root, index, address, device=MI300X_VF, gfx=GFX942, vram=MI300X_VRAM):
    """One GPU the driver sees: PCI function, KFD node index+1, DRM card<index>."""
    add_pci_device(root, address, 0x1002, device, 0x120000)
    node = os.path.join(root, "sys/class/kfd/kfd/topology/nodes", str(index + 1))
    write(os.path.join(node, "properties"), _properties([
        ("cpu_cores_count", 0), ("simd_count", 1216), ("mem_banks_count", 1),
        ("gfx_target_version", gfx), ("vendor_id", 0x1002), ("device_id", device),
        ("location_id", _location_id(address)), ("domain", int(address.split(":")[0], 16)),
        ("drm_render_minor", 128 + index), ("unique_id", 0x1447000000000000 + index),
    ]))
    write(os.path.join(node, "mem_banks/0/properties"), _properties([
        ("heap_type", 1), ("size_in_bytes", vram), ("width", 64),
    ]))
    card = os.path.join(root, "sys/class/drm/card%d/device" % index)
    write(os.path.join(card, "vendor"), "0x1002\n")
    write(os.path.join(card, "device"), "0x%04x\n" % device)
    write(os.path.join(card, "uevent"), "DRIVER=amdgpu\nPCI_CLASS=120000\nPCI_SLOT_NAME=%s\n" % address)


def amd_gpu_node(root, missing=(), driver_version=AMDGPU_VERSION, driver_loaded=True, gfx=GFX942):
    """An ND MI300X v5: 8 GPUs on PCI; the indexes in ``missing`` are on PCI only."""
    add_cpu_node(root)
    os.makedirs(os.path.join(root, "sys/class/kfd/kfd"), exist_ok=True)
    # Other AMD functions that are not GPUs: an audio function (class 0x0403).
    add_pci_device(root, "0000:00:14.3", 0x1002, 0x1640, 0x040300)
    kfd_index = 0
    for index, address in enumerate(MI300X_ADDRESSES):
        if index in missing:
            add_pci_device(root, address, 0x1002, MI300X_VF, 0x120000)
            continue
        add_gpu(root, kfd_index, address, gfx=gfx)
        kfd_index += 1
    if driver_loaded:
        os.makedirs(os.path.join(root, "sys/module/amdgpu"), exist_ok=True)
        if driver_version is not None:
            write(os.path.join(root, "sys/module/amdgpu/version"), driver_version + "\n")
    return root


def non_amd_node(root):
    """A node with an NVIDIA GPU, an Ethernet NIC, no KFD, no amdgpu, no RDMA."""
    add_pci_device(root, "0000:3b:00.0", 0x10DE, 0x2330, 0x030200)
    add_pci_device(root, "0000:5e:00.0", 0x8086, 0x1592, 0x020000)
    os.makedirs(os.path.join(root, "sys/class/drm"), exist_ok=True)
    return root


def add_ib_port(root, device, port=1, state="4: ACTIVE", phys_state="5: LinkUp", rate=NDR_RATE,
                link_layer="InfiniBand", gid="fe80:0000:0000:0000:0c42:a103:0097:0000"):
    base = os.path.join(root, "sys/class/infiniband", device, "ports", str(port))
    write(os.path.join(base, "state"), state + "\n")
    write(os.path.join(base, "phys_state"), phys_state + "\n")
    write(os.path.join(base, "rate"), rate + "\n")
    write(os.path.join(base, "link_layer"), link_layer + "\n")
    write(os.path.join(base, "gids/0"), gid + "\n")
    write(os.path.join(base, "gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000\n")


def add_ib_device(root, device, ports=1, **port_args):
    base = os.path.join(root, "sys/class/infiniband", device)
    guid = "0c42:a103:0097:%04x" % (sum(device.encode()) % 0x10000)
    write(os.path.join(base, "node_guid"), guid + "\n")
    write(os.path.join(base, "node_type"), "1: CA\n")
    write(os.path.join(base, "hca_type"), "MT4129\n")
    write(os.path.join(base, "fw_ver"), "28.39.1002\n")
    port_args.setdefault("gid", "fe80:0000:0000:0000:" + guid)
    for port in range(1, ports + 1):
        add_ib_port(root, device, port, **port_args)


def ib_node(root, devices=IB_DEVICES, down=(), slow=(), absent=()):
    """ND MI300X v5 InfiniBand: 8 x NDR; ``down``/``slow``/``absent`` name devices to spoil."""
    for device in devices:
        if device in absent:
            continue
        if device in down:
            add_ib_device(root, device, state="1: DOWN", phys_state="3: Disabled",
                          rate="10 Gb/sec (4X SDR)")
        elif device in slow:
            add_ib_device(root, device, rate="200 Gb/sec (4X HDR)")
        else:
            add_ib_device(root, device)
    return root


def run_module(main, args, capsys):
    """Run a module's main() with ``args``; return (exit code, parsed JSON result)."""
    # Imported here so that building trees needs nothing from ansible.
    import json

    import pytest

    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            main()
    return exc.value.code, json.loads(capsys.readouterr().out)


# Where the functions sit on an ND MI300X v5 style host: GPU i and NIC i under one root port
# and PCIe switch, GPUs and NICs 0-3 on NUMA node 0, 4-7 on node 1 (addresses illustrative).
NIC_ADDRESSES = tuple("0000:%02x:00.0" % (int(a.split(":")[1], 16) + 1) for a in MI300X_ADDRESSES)


def place_pci_function(root, address, bridges, numa_node):
    """Put a PCI function under sys/devices/pci0000:00/<bridges...>/, linked from sys/bus/pci/devices."""
    real = os.path.join(root, "sys/devices/pci0000:00", *bridges, address)
    os.makedirs(real, exist_ok=True)
    write(os.path.join(real, "numa_node"), "%d\n" % numa_node)
    link = os.path.join(root, "sys/bus/pci/devices", address)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if not os.path.islink(link):
        os.symlink(real, link)
    return real


def _switch(index):
    """The root port and the PCIe switch's upstream port of slot ``index``."""
    return ["0000:00:%02x.0" % (index + 1), "0000:%02x:00.0" % (0xA0 + index)]


def topology_node(root, nic_numa=None, switches=True, nics=IB_DEVICES, **ib_args):
    """8 GPUs and the RDMA devices ``nics`` placed on PCI: with ``switches`` GPU i and NIC i share
    a PCIe switch, else every function hangs off its own root port (as in a VM); ``nic_numa``
    gives NIC i's NUMA node (default: the GPU's, i // 4)."""
    for index, address in enumerate(MI300X_ADDRESSES):
        place_pci_function(root, address, _switch(index) if switches else ["0000:00:%02x.0" % (index + 1)], index // 4)
    amd_gpu_node(root)
    for index, device in enumerate(nics):
        add_ib_device(root, device, **ib_args)
        numa = nic_numa(index) if nic_numa else index // 4
        bridges = _switch(index) if switches else ["0000:00:%02x.0" % (0x40 + index)]
        real = place_pci_function(root, NIC_ADDRESSES[index], bridges, numa)
        os.symlink(real, os.path.join(root, "sys/class/infiniband", device, "device"))
    return root


def add_roce_gids(root, device, ipv4, netdev, mtu=9000, port=1, v2=True):
    """RoCE GIDs as the kernel lists them: link-local v1 and v2, then the IPv4-mapped v1 and v2
    (only v1 when ``v2`` is false), each with its type and network device; the netdev's MTU."""
    base = os.path.join(root, "sys/class/infiniband", device, "ports", str(port))
    high, low = [int(part) for part in ipv4.split(".")[:2]], [int(part) for part in ipv4.split(".")[2:]]
    mapped = "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % tuple(high + low)
    gids = [("fe80:0000:0000:0000:0e42:a1ff:fe97:0001", "IB/RoCE v1"), ("fe80:0000:0000:0000:0e42:a1ff:fe97:0001", "RoCE v2"),
            (mapped, "IB/RoCE v1")] + ([(mapped, "RoCE v2")] if v2 else [])
    for index, (gid, kind) in enumerate(gids):
        write(os.path.join(base, "gids", str(index)), gid + "\n")
        write(os.path.join(base, "gid_attrs/types", str(index)), kind + "\n")
        write(os.path.join(base, "gid_attrs/ndevs", str(index)), netdev + "\n")
    write(os.path.join(root, "sys/class/net", netdev, "mtu"), "%d\n" % mtu)


def roce_node(root, ipv4):
    """An ND MI300X v5 style node with RoCE: topology_node's 8 GPUs and 8 NICs, each NIC's GIDs
    carrying ``ipv4`` on its network device eth<i> (MTU 9000)."""
    topology_node(root, link_layer="Ethernet")
    for index, device in enumerate(IB_DEVICES):
        add_roce_gids(root, device, ipv4, "eth%d" % index)
    return root


def main(argv):
    """``python3 sysfs_fixtures.py ROOT IPV4``: write roce_node under ROOT unless it is there.

    The local fleet's nodes run it (tests/fleet/up.yml) so that the fabric facts and
    sglang_worker_ib_device: auto have a node to read: a fixture, there is no GPU or RDMA here.
    """
    root, ipv4 = argv
    if os.path.isdir(os.path.join(root, "sys")):
        print("present %s" % root)
        return
    roce_node(root, ipv4)
    print("wrote %s" % root)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
