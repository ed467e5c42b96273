# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which transport Mooncake's transfer engine chose, read from a worker's log.

Every health check can be green while the KV cache moves over TCP (or not at all): the
engine falls back without an error. ``mooncake_transport`` reads the engine's own start-up
lines, ``mooncake_transport_problem`` turns a finding that is not RDMA into a sentence
naming the host, the worker, the line and the fix.

The lines are Mooncake's, from ``TransferEngineImpl::init`` in
kvcache-ai/Mooncake ``mooncake-transfer-engine/src/transfer_engine_impl.cpp`` (read at
commits 0066eef4 and later; the same lines in older trees), and from
``mooncake-transfer-engine/src/transport/hip_transport/hip_transport.cpp``:

- ``MC_FORCE_TCP is set, using TCP transport only``: MC_FORCE_TCP is set (any value);
  nothing else is installed.
- ``Topology discovery complete. Found <N> HCAs.``: every auto-discovering engine.
- ``installTransport, type=rdma`` (or ``type=barex``): the RDMA transport, in the builds
  without NVLink (the ROCm image: USE_HIP, ENABLE_MULTI_PROTOCOL).
- ``Using RDMA transport (RoCE/iWARP)`` and ``Using TCP transport (no HCA detected)``:
  the same choice in the NVLink/MUSA builds.
- Without HCAs (and without MC_FORCE_HCA) the non-NVLink builds install TCP and log
  NOTHING: ``Found 0 HCAs.`` with no install line after it is that silent fallback.
- ``HIP transport installed for intra-node GPU P2P``: the USE_HIP block installs HIP IPC
  beside RDMA/TCP (absent where the collection's Mooncake patch disables it).
- ``HipTransport: hipIpcOpenMemHandle failed``: at transfer time, HIP IPC was chosen for a
  peer whose memory it cannot open, a peer on another node.

The start-up lines do not say which transport a given peer gets: HIP IPC beside RDMA is
reported (``hip_ipc_installed``), not refused; only the run-time HIP failure proves HIP IPC
was used for a cross-node peer.
"""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

# One extended regular expression (grep -E and Python agree on it) that finds every line
# below; the worker role greps the log on the node with it and reads only those lines.
MARKER_PATTERN = (r"MC_FORCE_TCP is set|Found [0-9]+ HCAs|installTransport, type=|Using (RDMA|TCP) transport"
                  r"|HIP transport installed|hipIpcOpenMemHandle failed")

FORCED_TCP = re.compile(r"MC_FORCE_TCP is set, using TCP transport only")
NVLINK_BUILD_TCP = re.compile(r"Using TCP transport \(no HCA detected\)")
DISCOVERED = re.compile(r"Topology discovery complete\. Found (\d+) HCAs\.")
INSTALLED = re.compile(r"installTransport, type=(\w+)")
NVLINK_BUILD_RDMA = re.compile(r"Using RDMA transport \(RoCE/iWARP\)")
HIP_INSTALLED = re.compile(r"HIP transport installed for intra-node GPU P2P")
HIP_CROSS_NODE = re.compile(r"HipTransport: hipIpcOpenMemHandle failed")
RDMA_TYPES = ("rdma", "barex")

# Worst first: one engine on TCP makes the worker's KV path TCP.
RANK = ("tcp", "hip_ipc", "unknown", "rdma")
TRANSPORTS = RANK

FIXES = {
    "tcp": ("unset MC_FORCE_TCP in the worker's environment (sglang_worker_mooncake_env, sglang_worker_extra_env, "
            "its env in sglang_pd_<mode>_workers) and check that the container sees the RDMA devices "
            "(/dev/infiniband in sglang_worker_devices, ibv_devices inside it) and that --disaggregation-ib-device "
            "(sglang_worker_ib_device) names devices the node has"),
    "hip_ipc": ("keep cross-node transfers off HIP IPC: run the image with the Mooncake patch (playbooks/mooncake_patch.yml) "
                "or an engine that reads MC_DISABLE_HIP=1 (sglang_worker_mooncake_env), and give it the RDMA devices "
                "(/dev/infiniband, --disaggregation-ib-device via sglang_worker_ib_device)"),
    "unknown": ("check that the worker runs the Mooncake transfer backend (--disaggregation-transfer-backend mooncake) "
                "and that its log (docker logs) holds the transfer engine's start-up lines; MC_LOG_LEVEL must not hide INFO"),
}
MEANING = {
    "tcp": "Mooncake moves the KV cache over TCP",
    "hip_ipc": "Mooncake uses HIP IPC (intra-node only) for a peer it should reach over RDMA",
    "unknown": "no line of Mooncake's transfer engine says it installed RDMA",
}


def _lines(log_text):
    if log_text is None:
        return []
    if isinstance(log_text, (list, tuple)):
        return [str(line) for line in log_text]
    if not isinstance(log_text, str):
        raise AnsibleFilterError(f"mooncake_transport wants a log as text or a list of lines, got {type(log_text).__name__} [SGLPD-DEF-001]")
    return log_text.splitlines()


def _engines(lines):
    """One record per transfer engine start, in log order (each TP rank starts its own)."""
    engines = []
    hip_failure = None
    for raw in lines:
        line = raw.strip()
        if FORCED_TCP.search(line):
            engines.append({"transport": "tcp", "line": line, "hcas": None, "hip": None})
            continue
        found = DISCOVERED.search(line)
        if found:
            engines.append({"transport": None, "line": line, "hcas": int(found.group(1)), "hip": None})
            continue
        current = engines[-1] if engines and engines[-1]["hcas"] is not None else None
        if current is None and (INSTALLED.search(line) or NVLINK_BUILD_RDMA.search(line) or NVLINK_BUILD_TCP.search(line)
                                or HIP_INSTALLED.search(line)):
            # A start whose discovery line is out of the log (cut) or was never written.
            current = {"transport": None, "line": line, "hcas": None, "hip": None}
            engines.append(current)
        installed = INSTALLED.search(line)
        if installed:
            current.update(transport="rdma" if installed.group(1) in RDMA_TYPES else "unknown", line=line)
        elif NVLINK_BUILD_RDMA.search(line):
            current.update(transport="rdma", line=line)
        elif NVLINK_BUILD_TCP.search(line):
            current.update(transport="tcp", line=line)
        elif HIP_INSTALLED.search(line):
            current["hip"] = line
        elif HIP_CROSS_NODE.search(line) and hip_failure is None:
            hip_failure = line
    for engine in engines:
        if engine["transport"] is None:
            if engine["hcas"] == 0:
                # No HCA: TCP installed silently, and HIP IPC (if installed) outranks it.
                engine["transport"] = "hip_ipc" if engine["hip"] else "tcp"
                engine["line"] = engine["hip"] or engine["line"]
            else:
                engine["transport"] = "hip_ipc" if engine["hip"] and engine["hcas"] is None else "unknown"
                engine["line"] = engine["hip"] or engine["line"]
    return engines, hip_failure


def mooncake_transport(log_text):
    """The transport Mooncake's transfer engine chose, from a worker's log (text or lines).

    Returns ``{transport: rdma|tcp|hip_ipc|unknown, line, lines, engines, hip_ipc_installed}``:
    the worst engine's transport (a worker whose TP ranks disagree is as slow as its slowest),
    the log line that shows it (empty when none), every Mooncake transport line, the number of
    engine starts found, and whether HIP IPC was installed beside the chosen transport.
    """
    lines = _lines(log_text)
    engines, hip_failure = _engines(lines)
    marker = re.compile(MARKER_PATTERN)
    matched = [line.strip() for line in lines if marker.search(line)]
    hip_installed = any(engine["hip"] for engine in engines)
    if hip_failure is not None:
        return {"transport": "hip_ipc", "line": hip_failure, "lines": matched, "engines": len(engines),
                "hip_ipc_installed": True}
    if not engines:
        return {"transport": "unknown", "line": "", "lines": matched, "engines": 0, "hip_ipc_installed": False}
    worst = min(engines, key=lambda engine: RANK.index(engine["transport"]))
    return {"transport": worst["transport"], "line": worst["line"], "lines": matched, "engines": len(engines),
            "hip_ipc_installed": hip_installed}


def mooncake_transport_problem(found, host, worker):
    """A sentence naming HOST, WORKER, the transport, its log line and the fix; empty for RDMA.

    FOUND is what ``mooncake_transport`` returned for the worker's log.
    """
    if not isinstance(found, dict) or found.get("transport") not in TRANSPORTS:
        raise AnsibleFilterError(f"mooncake_transport_problem wants the result of mooncake_transport, got {found!r} [SGLPD-DEF-001]")
    transport = found["transport"]
    if transport == "rdma":
        return ""
    line = found.get("line") or ""
    shown = f'its log says "{line}"' if line else "its log has no Mooncake transport line"
    return f"{host}: worker {worker}: transport {transport}, {MEANING[transport]}: {shown}. Fix: {FIXES[transport]}."


def mooncake_transport_pattern(_anything=None):
    """The extended regular expression (grep -E) that finds Mooncake's transport lines in a log."""
    return MARKER_PATTERN


class FilterModule:
    """Mooncake transport filters."""

    def filters(self):
        return {
            "mooncake_transport": mooncake_transport,
            "mooncake_transport_problem": mooncake_transport_problem,
            "mooncake_transport_pattern": mooncake_transport_pattern,
        }
