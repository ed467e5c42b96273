# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Read AMD GPU state from sysfs (KFD topology, DRM cards, PCI, amdgpu module).

Private helper of the amdgpu_facts module. Every path is taken relative to a root
directory, so tests can point it at a tree they wrote themselves.
"""

from __future__ import annotations

import os
import re

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._pci import pci_placement

AMD_VENDOR_ID = 0x1002

# PCI device id -> marketing name. 0x74b5 is the virtual function that Azure ND MI300X v5
# passes through; 0x74a1 the bare-metal part, 0x74bd the MI300X HF variant.
MODEL_NAMES = {
    0x74A1: "MI300X",
    0x74B5: "MI300X",
    0x74BD: "MI300X",
}

# PCI class codes (upper 16 bits of the 24-bit class) that an AMD GPU function can carry:
# 0x0300 VGA, 0x0380 other display controller, 0x1200 processing accelerator.
GPU_PCI_CLASSES = (0x0300, 0x0302, 0x0380, 0x1200)

KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
DRM_CLASS = "sys/class/drm"
PCI_DEVICES = "sys/bus/pci/devices"
AMDGPU_MODULE = "sys/module/amdgpu"

_CARD_RE = re.compile(r"^card\d+$")


def _path(root, rel):
    return os.path.join(root, rel)


def read_text(path):
    """Return the stripped content of a sysfs file, or None when it cannot be read."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def parse_int(value):
    """Parse a sysfs number written in decimal or 0x-hex; None when absent or malformed."""
    if value is None:
        return None
    try:
        return int(value, 0)
    except ValueError:
        return None


def parse_properties(text):
    """Parse a KFD ``properties`` file (``name value`` per line) into a dict of ints."""
    props = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            props[parts[0]] = int(parts[1])
        except ValueError:
            continue
    return props


def gfx_target_name(version):
    """Turn a KFD gfx_target_version (90402) into an LLVM target name (gfx942)."""
    if not version:
        return None
    major = version // 10000
    minor = (version // 100) % 100
    stepping = version % 100
    return "gfx%d%x%x" % (major, minor, stepping)


def model_name(device_id):
    if device_id is None:
        return None
    return MODEL_NAMES.get(device_id, "unknown AMD GPU (0x%04x)" % device_id)


def pci_address(domain, location_id):
    """Build a PCI address (0000:11:00.0) from the KFD domain and location_id."""
    bus = (location_id >> 8) & 0xFF
    device = (location_id >> 3) & 0x1F
    function = location_id & 0x7
    return "%04x:%02x:%02x.%x" % (domain or 0, bus, device, function)


def _sorted_numeric(names):
    return sorted((n for n in names if n.isdigit()), key=int)


def _listdir(path):
    try:
        return os.listdir(path)
    except (IOError, OSError):
        return []


def read_pci_gpus(root):
    """AMD GPU functions on the PCI bus: {address: {vendor_id, device_id, class}}."""
    found = {}
    base = _path(root, PCI_DEVICES)
    for address in sorted(_listdir(base)):
        dev = os.path.join(base, address)
        vendor = parse_int(read_text(os.path.join(dev, "vendor")))
        if vendor != AMD_VENDOR_ID:
            continue
        pci_class = parse_int(read_text(os.path.join(dev, "class")))
        if pci_class is None or (pci_class >> 8) not in GPU_PCI_CLASSES:
            continue
        found[address.lower()] = {
            "vendor_id": vendor,
            "device_id": parse_int(read_text(os.path.join(dev, "device"))),
            "class": pci_class,
        }
    return found


def read_drm_cards(root):
    """DRM cards: {pci address: {card, vendor_id, device_id, driver}}."""
    cards = {}
    base = _path(root, DRM_CLASS)
    for name in sorted(_listdir(base), key=lambda n: (len(n), n)):
        if not _CARD_RE.match(name):
            continue
        dev = os.path.join(base, name, "device")
        uevent = {}
        for line in (read_text(os.path.join(dev, "uevent")) or "").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                uevent[key] = value
        slot = uevent.get("PCI_SLOT_NAME")
        if not slot:
            continue
        cards[slot.lower()] = {
            "card": name,
            "vendor_id": parse_int(read_text(os.path.join(dev, "vendor"))),
            "device_id": parse_int(read_text(os.path.join(dev, "device"))),
            "driver": uevent.get("DRIVER"),
        }
    return cards


def _vram_bytes(node_dir):
    """Sum the frame-buffer memory banks of a KFD node (heap_type 1 public, 2 private)."""
    total = 0
    banks_dir = os.path.join(node_dir, "mem_banks")
    for bank in _sorted_numeric(_listdir(banks_dir)):
        props = parse_properties(read_text(os.path.join(banks_dir, bank, "properties")))
        heap_type = props.get("heap_type")
        if heap_type is not None and heap_type not in (1, 2):
            continue
        total += props.get("size_in_bytes", 0)
    return total


def read_kfd_gpus(root):
    """GPU nodes of the KFD topology (simd_count > 0), in node order."""
    gpus = []
    base = _path(root, KFD_NODES)
    for node in _sorted_numeric(_listdir(base)):
        node_dir = os.path.join(base, node)
        props = parse_properties(read_text(os.path.join(node_dir, "properties")))
        if props.get("simd_count", 0) <= 0:
            continue
        render_minor = props.get("drm_render_minor")
        gpus.append({
            "kfd_node": int(node),
            "pci_address": pci_address(props.get("domain", 0), props.get("location_id", 0)),
            "vendor_id": props.get("vendor_id"),
            "device_id": props.get("device_id"),
            "gfx_target_version": props.get("gfx_target_version"),
            "simd_count": props.get("simd_count"),
            "unique_id": props.get("unique_id"),
            "render_node": "/dev/dri/renderD%d" % render_minor if render_minor else None,
            "vram_bytes": _vram_bytes(node_dir),
        })
    return gpus


def _hex(value):
    return None if value is None else "0x%04x" % value


def collect(root="/"):
    """Return the ``amdgpu`` facts for the tree under ``root``."""
    pci = read_pci_gpus(root)
    cards = read_drm_cards(root)
    module_dir = _path(root, AMDGPU_MODULE)
    gpus = []
    for node in read_kfd_gpus(root):
        address = node["pci_address"]
        card = cards.get(address, {})
        device_id = node["device_id"]
        if device_id is None:
            device_id = card.get("device_id") or pci.get(address, {}).get("device_id")
        placement = pci_placement(os.path.join(_path(root, PCI_DEVICES), address))
        gpus.append({
            "pci_address": address,
            "numa_node": placement["numa_node"],
            "pci_path": placement["pci_path"] or [address],
            "vendor_id": _hex(node["vendor_id"]),
            "device_id": _hex(device_id),
            "model": model_name(device_id),
            "gfx_target": gfx_target_name(node["gfx_target_version"]),
            "gfx_target_version": node["gfx_target_version"],
            "simd_count": node["simd_count"],
            "vram_bytes": node["vram_bytes"],
            "render_node": node["render_node"],
            "card": card.get("card"),
            "kfd_node": node["kfd_node"],
            "unique_id": node["unique_id"],
        })
    visible = set(gpu["pci_address"] for gpu in gpus)
    pci_gpus = [
        {"pci_address": address, "device_id": _hex(info["device_id"]), "model": model_name(info["device_id"])}
        for address, info in sorted(pci.items())
    ]
    return {
        "gpu_count": len(gpus),
        "gpus": gpus,
        "pci_gpu_count": len(pci_gpus),
        "pci_gpus": pci_gpus,
        "missing_pci_addresses": [g["pci_address"] for g in pci_gpus if g["pci_address"] not in visible],
        "driver_loaded": os.path.isdir(module_dir),
        "driver_version": read_text(os.path.join(module_dir, "version")),
        "kfd_present": os.path.isdir(_path(root, "sys/class/kfd/kfd")),
    }


def problems(facts, expected_count=None, expected_gfx=None):
    """List what differs from the expectation, one sentence per GPU or fact."""
    found = []
    if expected_count is None and expected_gfx is None:
        return found
    if not facts["driver_loaded"] and (expected_count is None or expected_count > 0):
        found.append(
            "the amdgpu kernel module is not loaded (no /sys/module/amdgpu): load it or, "
            "on Azure ND MI300X v5, check the unit that loads it once the GPUs appear"
        )
    for address in facts["missing_pci_addresses"]:
        found.append("GPU at %s present on PCI but not visible to the driver" % address)
    if expected_count is not None and facts["gpu_count"] != expected_count:
        found.append(
            "expected %d GPUs, the driver shows %d and PCI shows %d%s"
            % (
                expected_count,
                facts["gpu_count"],
                facts["pci_gpu_count"],
                " (GPUs are missing from the PCI bus itself: check the VM size or the passthrough)"
                if facts["pci_gpu_count"] < expected_count else "",
            )
        )
    if expected_gfx is not None:
        for gpu in facts["gpus"]:
            if gpu["gfx_target"] != expected_gfx:
                found.append(
                    "GPU at %s reports %s (%s), expected %s"
                    % (gpu["pci_address"], gpu["gfx_target"], gpu["model"], expected_gfx)
                )
    return found


def run_module(module):
    """Body of the amdgpu_facts module: collect, compare, exit or fail."""
    params = module.params
    facts = collect(params["root"])
    found = problems(facts, params["expected_count"], params["expected_gfx"])
    result = {"changed": False, "ansible_facts": {"amdgpu": facts}, "problems": found}
    if found:
        wanted = []
        if params["expected_count"] is not None:
            wanted.append("%d GPUs" % params["expected_count"])
        if params["expected_gfx"] is not None:
            wanted.append(params["expected_gfx"])
        module.fail_json(
            msg="AMD GPUs differ from the expectation (%s): %s [SGLPD-HST-001]" % (", ".join(wanted), "; ".join(found)),
            **result
        )
    module.exit_json(**result)
