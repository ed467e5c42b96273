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

The stand-in has no HCAs and no GPUs; SGLANG_STANDIN_TRANSPORT says what to pretend:
``rdma`` (one HCA per device of --disaggregation-ib-device), ``tcp`` (the silent fallback:
``Found 0 HCAs.``) or ``hip_ipc`` (no HCA, HIP IPC installed: a cross-node peer gets HIP
IPC). Unset: ``rdma`` when --disaggregation-ib-device names devices, else ``tcp``.
MC_FORCE_TCP wins over the setting, as it does in Mooncake. glog's prefix is imitated
without source line numbers (``transfer_engine_impl.cpp] ...``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import TextIO

ENV_TRANSPORT = "SGLANG_STANDIN_TRANSPORT"
TRANSPORTS = ("rdma", "tcp", "hip_ipc")
PD_MODES = ("prefill", "decode")
BACKEND = "mooncake"

FORCED_TCP = "MC_FORCE_TCP is set, using TCP transport only"
DISCOVERED = "Topology discovery complete. Found {count} HCAs."
RDMA_INSTALLED = "installTransport, type=rdma"
HIP_INSTALLED = "HIP transport installed for intra-node GPU P2P"


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


def chosen(environ: Mapping[str, str], ib_device: str | None) -> str:
    """The transport to pretend: SGLANG_STANDIN_TRANSPORT, or rdma with devices, else tcp.

    Raises ValueError on a setting that is not one of TRANSPORTS.
    """
    setting = environ.get(ENV_TRANSPORT, "").strip()
    if setting:
        if setting not in TRANSPORTS:
            raise ValueError(f"{ENV_TRANSPORT} must be one of {', '.join(TRANSPORTS)}, got {setting!r}")
        return setting
    return "rdma" if ib_devices(ib_device) else "tcp"


def engine_lines(mode: str, backend: str, ib_device: str | None, environ: Mapping[str, str]) -> list[str]:
    """Mooncake's transport messages for this worker, in order; none unless a Mooncake PD worker."""
    if mode not in PD_MODES or backend != BACKEND:
        return []
    if "MC_FORCE_TCP" in environ:
        return [FORCED_TCP]
    transport = chosen(environ, ib_device)
    if transport == "rdma":
        return [DISCOVERED.format(count=max(1, len(ib_devices(ib_device)))), RDMA_INSTALLED]
    if transport == "hip_ipc":
        return [DISCOVERED.format(count=0), HIP_INSTALLED]
    return [DISCOVERED.format(count=0)]


def glog(message: str, now: float | None = None, pid: int | None = None) -> str:
    """One INFO line in glog's shape: ``I<mmdd> <hh:mm:ss.uuuuuu> <pid> <file>] <message>``."""
    stamp = time.time() if now is None else now
    local = time.localtime(stamp)
    micros = int((stamp % 1) * 1_000_000)
    return (f"I{time.strftime('%m%d', local)} {time.strftime('%H:%M:%S', local)}.{micros:06d} "
            f"{os.getpid() if pid is None else pid:>6} transfer_engine_impl.cpp] {message}")


def print_engine_lines(mode: str, backend: str, ib_device: str | None, environ: Mapping[str, str] | None = None,
                       stream: TextIO | None = None) -> list[str]:
    """Write this worker's transfer-engine lines to stderr (glog's stream); return them."""
    env = os.environ if environ is None else environ
    out = sys.stderr if stream is None else stream
    lines = [glog(message) for message in engine_lines(mode, backend, ib_device, env)]
    for line in lines:
        out.write(line + "\n")
    out.flush()
    return lines
