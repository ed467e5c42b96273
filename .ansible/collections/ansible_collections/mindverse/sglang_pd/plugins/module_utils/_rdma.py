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


def read_port(port_dir, number):
    state_num, state = parse_state(read_text(os.path.join(port_dir, "state")))
    phys_num, phys_state = parse_state(read_text(os.path.join(port_dir, "phys_state")))
    rate_text = read_text(os.path.join(port_dir, "rate"))
    gids = []
    gids_dir = os.path.join(port_dir, "gids")
    for index in _sorted_numeric(_listdir(gids_dir)):
        gid = read_text(os.path.join(gids_dir, index))
        if gid and gid != ZERO_GID:
            gids.append({"index": int(index), "gid": gid})
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
    }


def collect(root="/"):
    """Return the ``rdma`` facts for the tree under ``root``."""
    base = os.path.join(root, INFINIBAND_CLASS)
    devices = []
    for name in sorted(_listdir(base)):
        dev_dir = os.path.join(base, name)
        ports_dir = os.path.join(dev_dir, "ports")
        devices.append({
            "name": name,
            "node_guid": read_text(os.path.join(dev_dir, "node_guid")),
            "node_type": parse_state(read_text(os.path.join(dev_dir, "node_type")))[1],
            "hca_type": read_text(os.path.join(dev_dir, "hca_type")),
            "fw_ver": read_text(os.path.join(dev_dir, "fw_ver")),
            "ports": [
                read_port(os.path.join(ports_dir, number), int(number))
                for number in _sorted_numeric(_listdir(ports_dir))
            ],
        })
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
            msg="RDMA ports differ from the expectation (every expected port ACTIVE%s): %s"
            % (
                "" if params["expected_rate_gbps"] is None else " at %s Gb/s" % params["expected_rate_gbps"],
                "; ".join(found),
            ),
            **result
        )
    module.exit_json(**result)
