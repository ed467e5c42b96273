# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Read RDMA devices and ports from /sys/class/infiniband.

Private helper of the rdma_facts module. Every path is taken relative to a root
directory, so tests can point it at a tree they wrote themselves.
"""

from __future__ import annotations

import os
import re

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._pci import pci_placement

INFINIBAND_CLASS = "sys/class/infiniband"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"

_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def read_text(path):
    """Return the stripped content of a sysfs file, or None when it cannot be read."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def _listdir(path):
    try:
        return os.listdir(path)
    except (IOError, OSError):
        return []


def _sorted_numeric(names):
    return sorted((n for n in names if n.isdigit()), key=int)


def parse_state(text):
    """Split ``4: ACTIVE`` into (4, 'ACTIVE'); a bare word gives (None, word)."""
    if text is None:
        return None, None
    match = _STATE_RE.match(text)
    if match:
        return int(match.group(1)), match.group(2)
    return None, text.strip() or None


def parse_rate(text):
    """Turn ``400 Gb/sec (4X NDR)`` into 400 (an int when whole, else a float)."""
    if text is None:
        return None
    match = _RATE_RE.match(text)
    if not match:
        return None
    value = float(match.group(1))
    return int(value) if value.is_integer() else value


def ipv4_of_gid(gid):
    """The IPv4 address of an IPv4-mapped GID (``...:0000:ffff:0a00:000b`` is 10.0.0.11), else None."""
    groups = (gid or "").split(":")
    if len(groups) != 8 or [g.lower() for g in groups[:6]] != ["0000"] * 5 + ["ffff"]:
        return None
    try:
        high, low = int(groups[6], 16), int(groups[7], 16)
    except ValueError:
        return None
    return "%d.%d.%d.%d" % (high >> 8, high & 0xFF, low >> 8, low & 0xFF)


def read_gid_attrs(port_dir, index):
    """Type (``IB/RoCE v1`` or ``RoCE v2``) and network device of one GID, None when absent."""
    attrs = os.path.join(port_dir, "gid_attrs")
    return (read_text(os.path.join(attrs, "types", str(index))) or None,
            read_text(os.path.join(attrs, "ndevs", str(index))) or None)


def read_port(port_dir, number, root="/"):
    state_num, state = parse_state(read_text(os.path.join(port_dir, "state")))
    phys_num, phys_state = parse_state(read_text(os.path.join(port_dir, "phys_state")))
    rate_text = read_text(os.path.join(port_dir, "rate"))
    gids = []
    gids_dir = os.path.join(port_dir, "gids")
    for index in _sorted_numeric(_listdir(gids_dir)):
        gid = read_text(os.path.join(gids_dir, index))
        if gid and gid != ZERO_GID:
            gid_type, ndev = read_gid_attrs(port_dir, index)
            gids.append({"index": int(index), "gid": gid, "type": gid_type, "ndev": ndev,
                         "ipv4": ipv4_of_gid(gid)})
    # RoCE: the MTU of the port's network device. InfiniBand ports have no MTU in sysfs
    # (ibv_devinfo's active_mtu comes from the verbs API): None there.
    ndevs = [g["ndev"] for g in gids if g["ndev"]]
    mtu = read_text(os.path.join(root, "sys/class/net", ndevs[0], "mtu")) if ndevs else None
    return {
        "port": number,
        "state": state,
        "state_num": state_num,
        "phys_state": phys_state,
        "phys_state_num": phys_num,
        "rate": rate_text,
        "rate_gbps": parse_rate(rate_text),
        "link_layer": read_text(os.path.join(port_dir, "link_layer")),
        "gid0": read_text(os.path.join(gids_dir, "0")),
        "gids": gids,
        "netdev": ndevs[0] if ndevs else None,
        "mtu": int(mtu) if mtu and mtu.isdigit() else None,
    }


def collect(root="/"):
    """Return the ``rdma`` facts for the tree under ``root``."""
    base = os.path.join(root, INFINIBAND_CLASS)
    devices = []
    for name in sorted(_listdir(base)):
        dev_dir = os.path.join(base, name)
        ports_dir = os.path.join(dev_dir, "ports")
        devices.append(dict({
            "name": name,
            "node_guid": read_text(os.path.join(dev_dir, "node_guid")),
            "node_type": parse_state(read_text(os.path.join(dev_dir, "node_type")))[1],
            "hca_type": read_text(os.path.join(dev_dir, "hca_type")),
            "fw_ver": read_text(os.path.join(dev_dir, "fw_ver")),
            "ports": [
                read_port(os.path.join(ports_dir, number), int(number), root)
                for number in _sorted_numeric(_listdir(ports_dir))
            ],
        }, **pci_placement(os.path.join(dev_dir, "device"))))
    return {
        "device_count": len(devices),
        "port_count": sum(len(d["ports"]) for d in devices),
        "devices": devices,
    }


def _rate_text(rate):
    return "unknown" if rate is None else "%s Gb/s" % rate


def problems(facts, expected_devices=None, expected_rate_gbps=None):
    """List each missing device and each port not ACTIVE or at the wrong rate."""
    found = []
    if expected_devices is None and expected_rate_gbps is None:
        return found
    by_name = dict((d["name"], d) for d in facts["devices"])
    if expected_devices is None:
        names = sorted(by_name)
        if not names:
            found.append("no RDMA device under /sys/class/infiniband")
    else:
        names = list(expected_devices)
        for name in names:
            if name not in by_name:
                found.append(
                    "%s: device missing (found: %s)" % (name, ", ".join(sorted(by_name)) or "none")
                )
    for name in names:
        device = by_name.get(name)
        if device is None:
            continue
        if not device["ports"]:
            found.append("%s: device has no ports" % name)
        for port in device["ports"]:
            where = "%s port %d" % (name, port["port"])
            if port["state"] != "ACTIVE":
                found.append(
                    "%s: state %s (physical state %s), expected ACTIVE"
                    % (where, port["state"] or "unknown", port["phys_state"] or "unknown")
                )
            if expected_rate_gbps is not None and port["rate_gbps"] != expected_rate_gbps:
                found.append(
                    "%s: rate %s, expected %s"
                    % (where, _rate_text(port["rate_gbps"]), _rate_text(expected_rate_gbps))
                )
    return found


def run_module(module):
    """Body of the rdma_facts module: collect, compare, exit or fail."""
    params = module.params
    facts = collect(params["root"])
    found = problems(facts, params["expected_devices"], params["expected_rate_gbps"])
    result = {"changed": False, "ansible_facts": {"rdma": facts}, "problems": found}
    if found:
        module.fail_json(
            msg="RDMA ports differ from the expectation (every expected port ACTIVE%s): %s [SGLPD-HST-002]"
            % (
                "" if params["expected_rate_gbps"] is None else " at %s Gb/s" % params["expected_rate_gbps"],
                "; ".join(found),
            ),
            **result
        )
    module.exit_json(**result)
