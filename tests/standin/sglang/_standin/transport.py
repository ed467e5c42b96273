"""The lines Mooncake's transfer engine logs when it chooses a transport, as the stand-in prints them.

A PD worker of the real image (prefill or decode, transfer backend mooncake) starts
Mooncake's transfer engine, whose ``TransferEngineImpl::init``
(kvcache-ai/Mooncake, mooncake-transfer-engine/src/transfer_engine_impl.cpp) logs through
glog, on stderr, which transport it installed. The ROCm image is built with USE_HIP and
ENABLE_MULTI_PROTOCOL (no NVLink), so its lines are:

- MC_FORCE_TCP set (any value, even empty: Mooncake tests getenv() != nullptr):
  ``MC_FORCE_TCP is set, using TCP transport only`` and nothing else.
- Otherwise ``Topology discovery complete. Found <N> HCAs.``, then with HCAs
  ``installTransport, type=rdma``; without HCAs TCP is installed with no line of its own.
- The unpatched USE_HIP block adds ``HIP transport installed for intra-node GPU P2P``.

The HCAs are found as Mooncake finds them (``Topology::discover``, topology.cpp): the RDMA
devices of the node (``<sysfs>/class/infiniband/<device>``; the sysfs root is
SGLANG_STANDIN_SYSFS_ROOT, ``/sys`` by default), kept when --disaggregation-ib-device names
them (every one when it is empty). A named device the node does not have is left out without
a line of its own; a node with no RDMA device at all logs the warning
``No RDMA devices found, check your device installation`` (``listInfiniBandDevices``) and finds
0 HCAs. So the RDMA line appears only when a named device exists under the sysfs root.

SGLANG_STANDIN_TRANSPORT can pretend otherwise: ``tcp`` (no HCA whatever sysfs holds:
``Found 0 HCAs.``) or ``hip_ipc`` (no HCA, HIP IPC installed: a cross-node peer gets HIP IPC);
``rdma`` or unset is the discovery above. MC_FORCE_TCP wins over the setting, as it does in
Mooncake. glog's prefix is imitated without source line numbers (``<file>] ...``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import TextIO

ENV_TRANSPORT = "SGLANG_STANDIN_TRANSPORT"
ENV_SYSFS_ROOT = "SGLANG_STANDIN_SYSFS_ROOT"
SYSFS_ROOT_DEFAULT = "/sys"
TRANSPORTS = ("rdma", "tcp", "hip_ipc")
PD_MODES = ("prefill", "decode")
BACKEND = "mooncake"

FORCED_TCP = "MC_FORCE_TCP is set, using TCP transport only"
DISCOVERED = "Topology discovery complete. Found {count} HCAs."
RDMA_INSTALLED = "installTransport, type=rdma"
HIP_INSTALLED = "HIP transport installed for intra-node GPU P2P"
NO_DEVICES = "No RDMA devices found, check your device installation"
ENGINE_FILE, TOPOLOGY_FILE = "transfer_engine_impl.cpp", "topology.cpp"


def ib_devices(value: str | None) -> list[str]:
    """The devices --disaggregation-ib-device names: one, a comma list, or a per-GPU JSON map.

    A path to a JSON file is read when it exists; an unreadable one counts as one device.
    """
    text = (value or "").strip()
    if not text:
        return []
    if not text.startswith("{") and os.path.isfile(text):
        try:
            with open(text, encoding="utf-8") as handle:
                text = handle.read().strip()
        except OSError:
            return [text]
    if text.startswith("{"):
        try:
            mapping = json.loads(text)
        except ValueError:
            return [text]
        devices: list[str] = []
        for entry in mapping.values() if isinstance(mapping, dict) else []:
            for device in str(entry).split(","):
                if device.strip() and device.strip() not in devices:
                    devices.append(device.strip())
        return devices
    return [device.strip() for device in text.split(",") if device.strip()]


def chosen(environ: Mapping[str, str]) -> str:
    """The transport to pretend: SGLANG_STANDIN_TRANSPORT, else rdma (Mooncake's discovery over sysfs).

    Raises ValueError on a setting that is not one of TRANSPORTS.
    """
    setting = environ.get(ENV_TRANSPORT, "").strip()
    if setting and setting not in TRANSPORTS:
        raise ValueError(f"{ENV_TRANSPORT} must be one of {', '.join(TRANSPORTS)}, got {setting!r}")
    return setting or "rdma"


def present_devices(sysfs_root: str) -> list[str]:
    """The RDMA devices of the node: the entries of <sysfs_root>/class/infiniband, in order."""
    try:
        return sorted(os.listdir(os.path.join(sysfs_root, "class", "infiniband")))
    except OSError:
        return []


def discovered(ib_device: str | None, sysfs_root: str) -> tuple[list[str], bool]:
    """(HCAs Mooncake finds, whether the node has any RDMA device): the present devices the flag names."""
    present = present_devices(sysfs_root)
    wanted = ib_devices(ib_device)
    return [device for device in present if not wanted or device in wanted], bool(present)


Line = tuple[str, str, str]  # (glog severity letter, source file, message)


def engine_lines(mode: str, backend: str, ib_device: str | None, environ: Mapping[str, str]) -> list[Line]:
    """Mooncake's transport messages for this worker, in order; none unless a Mooncake PD worker."""
    if mode not in PD_MODES or backend != BACKEND:
        return []
    if "MC_FORCE_TCP" in environ:
        return [("I", ENGINE_FILE, FORCED_TCP)]
    transport = chosen(environ)
    if transport == "hip_ipc":
        return [("I", ENGINE_FILE, DISCOVERED.format(count=0)), ("I", ENGINE_FILE, HIP_INSTALLED)]
    if transport == "tcp":
        return [("I", ENGINE_FILE, DISCOVERED.format(count=0))]
    hcas, any_device = discovered(ib_device, environ.get(ENV_SYSFS_ROOT, "") or SYSFS_ROOT_DEFAULT)
    lines: list[Line] = [] if any_device else [("W", TOPOLOGY_FILE, NO_DEVICES)]
    lines.append(("I", ENGINE_FILE, DISCOVERED.format(count=len(hcas))))
    if hcas:
        lines.append(("I", ENGINE_FILE, RDMA_INSTALLED))
    return lines


def glog(message: str, now: float | None = None, pid: int | None = None, severity: str = "I",
         source: str = ENGINE_FILE) -> str:
    """One line in glog's shape: ``<severity><mmdd> <hh:mm:ss.uuuuuu> <pid> <file>] <message>``."""
    stamp = time.time() if now is None else now
    local = time.localtime(stamp)
    micros = int((stamp % 1) * 1_000_000)
    return (f"{severity}{time.strftime('%m%d', local)} {time.strftime('%H:%M:%S', local)}.{micros:06d} "
            f"{os.getpid() if pid is None else pid:>6} {source}] {message}")


def print_engine_lines(mode: str, backend: str, ib_device: str | None, environ: Mapping[str, str] | None = None,
                       stream: TextIO | None = None) -> list[str]:
    """Write this worker's transfer-engine lines to stderr (glog's stream); return them."""
    env = os.environ if environ is None else environ
    out = sys.stderr if stream is None else stream
    lines = [glog(message, severity=severity, source=source)
             for severity, source, message in engine_lines(mode, backend, ib_device, env)]
    for line in lines:
        out.write(line + "\n")
    out.flush()
    return lines
