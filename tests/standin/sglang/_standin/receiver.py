"""Decode's side of a PD request: find the prefill through its bootstrap server, receive the room's KV.

What SGLang 0.5.14's decode does for a request with ``bootstrap_host``/``bootstrap_port``/
``bootstrap_room`` (sglang/srt/disaggregation/decode.py, common/conn.py, mooncake/conn.py):

1. ``DecodePreallocQueue._ensure_prefill_info`` → ``CommonKVManager.try_ensure_parallel_info``:
   ``GET /route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1``
   (timeout 5 s), tried once per scheduling round at least ``_ensure_retry_interval`` (1 s)
   apart, ``_max_ensure_retries`` (15) times. Then it logs ``Could not fetch prefill parallel
   info from <addr> after 15 attempts`` and aborts the request's receiver (``Aborted by AbortReq.``).
2. ``_resolve_prefill_dp_rank``: DP rank 0 of a prefill with one DP group, else
   ``bootstrap_room % dp_size`` (follow_bootstrap_room).
3. ``CommonKVReceiver._get_bootstrap_info_from_server``: ``GET /route`` with that DP rank, CP
   rank 0, decode's target TP rank (0) and each PP rank; a failure records ``Could not fetch
   bootstrap info for: ...``.
4. The transfer (kv_transfer.py); the receiver fails with ``Failed to get kvcache from prefill
   instance, it might be dead`` when the prefill pushes status Failed, or
   (``_check_waiting_timeout``) ``Request <room> timed out after <s>s in KVPoll.WaitingForInput``
   once SGLANG_DISAGGREGATION_WAITING_TIMEOUT has passed.

A failure in steps 1-3 is ``_update_handshake_waiters``' abort, one in step 4 is
``pop_transferred``': ``prepare_abort`` with status 500 and the message ``Decode handshake
failed`` / ``Decode transfer failed for request rank=0 decode_req.req.rid='<rid>'
decode_req.req.bootstrap_room=<room> with exception KVTransferError(bootstrap_room=<room>):
<reason>``; the HTTP API answers it as a 500 ErrorResponse. SGLang writes the prefill's
address only to decode's log; the stand-in adds what it logged to the message, after
``(decode log: ...)``, so that a caller sees which address failed.

Not modelled: decode caches a prefill's info and its connections (and a heartbeat drops
them); the stand-in asks the bootstrap server again for every request.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang._standin import kv_transfer
from sglang._standin.bootstrap import ROUTE, call
from sglang._standin.pd import host_port
from sglang._standin.replies import RequestError

# DecodePreallocQueue: _max_ensure_retries and _ensure_retry_interval (seconds).
ENSURE_ATTEMPTS = 15
ENSURE_RETRY_SECS = 1.0
ENV_ENSURE_RETRY = "SGLANG_STANDIN_BOOTSTRAP_RETRY_SECS"
# Tests only: while the file this names exists, this decode cannot reach any bootstrap server, as
# behind a firewall rule that drops the packets (a partition between decode and prefill).
ENV_PARTITION_FILE = "SGLANG_STANDIN_PARTITION_FILE"
# The decode's own TP rank: the stand-in is one process, rank 0.
DECODE_TP_RANK = 0


@dataclass(frozen=True)
class DecodeSettings:
    """How decode waits: SGLANG_DISAGGREGATION_WAITING_TIMEOUT and the retry interval of step 1."""

    waiting_timeout_secs: float = 300.0
    ensure_retry_secs: float = ENSURE_RETRY_SECS


class DecodeAbort(RequestError):
    """A request decode aborted: status 500 with SGLang's message."""

    def __init__(self, stage: str, rid: str, room: int, reason: str, logged: str) -> None:
        message = (f"Decode {stage} failed for request rank={DECODE_TP_RANK} decode_req.req.rid={rid!r} "
                   f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {reason}")
        # SGLang raises HTTPException(500) for the abort; its handler names the type by the status.
        super().__init__(f"{message} (decode log: {logged})", 500, error_type="500")
        self.logged = logged


def _route_query(dp: int, cp: int, tp: int, pp: int) -> str:
    return f"{ROUTE}?prefill_dp_rank={dp}&prefill_cp_rank={cp}&target_tp_rank={tp}&target_pp_rank={pp}"


def partitioned() -> None:
    """Raise the error of a dropped connection while the partition file (ENV_PARTITION_FILE) exists."""
    path = os.environ.get(ENV_PARTITION_FILE)
    if path and os.path.exists(path):
        raise TimeoutError(f"timed out (partition: {ENV_PARTITION_FILE} {path} exists)")


def prefill_info(addr: str, settings: DecodeSettings, log: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep) -> dict[str, Any] | None:
    """Step 1: the prefill's parallel info, or None after ENSURE_ATTEMPTS failed tries (each logged)."""
    url = f"http://{addr}{_route_query(-1, -1, -1, -1)}"
    for attempt in range(1, ENSURE_ATTEMPTS + 1):
        try:
            partitioned()
            status, text = call("GET", url)
            if status == 200:
                return dict(json.loads(text))
            log(f"Failed to get prefill server info: {status}, {text}")
        except (OSError, ValueError, TypeError) as exc:
            log(f"Error fetching prefill server info from bootstrap: decode cannot reach the prefill bootstrap server"
                f" at {addr}: {exc}")
        if attempt < ENSURE_ATTEMPTS:
            sleep(settings.ensure_retry_secs)
    return None


def rank_info(addr: str, dp_rank: int, pp_rank: int, log: Callable[[str], None]) -> dict[str, Any] | None:
    """Step 3: where one prefill rank's KV sender listens (rank_ip, rank_port), or None."""
    try:
        status, text = call("GET", f"http://{addr}{_route_query(dp_rank, 0, DECODE_TP_RANK, pp_rank)}")
        if status == 200:
            return dict(json.loads(text))
        log(f"Failed to get prefill server info: {status}, {text}")
    except (OSError, ValueError, TypeError) as exc:
        log(f"Error fetching prefill info from bootstrap: {exc}")
    return None


def receive_kv(host: str, port: int, room: int | None, rid: str, settings: DecodeSettings,
               log: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> int:
    """Steps 1-4 for one request; the KV tokens received. Raises DecodeAbort as SGLang's decode aborts.

    Without a room only step 1 runs (the bootstrap server answers).
    """
    addr = host_port(host, port)
    shown_room = -1 if room is None else room
    logged: list[str] = []

    def note(line: str) -> None:
        logged.append(line)
        log(line)

    info = prefill_info(addr, settings, note, sleep)
    if info is None:
        note(f"Could not fetch prefill parallel info from {addr} after {ENSURE_ATTEMPTS} attempts")
        raise DecodeAbort("handshake", rid, shown_room, "Aborted by AbortReq.", "; ".join(logged[-2:]))
    if room is None:
        return 0
    dp_size = int(info.get("dp_size") or 1)
    dp_rank = 0 if dp_size == 1 else room % dp_size
    ranks = []
    for pp_rank in reversed(range(int(info.get("pp_size") or 1))):
        found = rank_info(addr, dp_rank, pp_rank, note)
        if found is None:
            reason = (f"Could not fetch bootstrap info for: prefill_dp_rank: {dp_rank} prefill_cp_rank: 0 "
                      f"target_tp_rank: {DECODE_TP_RANK} and target_pp_rank {pp_rank}")
            raise DecodeAbort("handshake", rid, room, reason, f"{logged[-1]} (bootstrap server {addr})")
        ranks.append(found)
    return _transfer(addr, ranks[0], room, rid, settings, note)


def _transfer(addr: str, rank: dict[str, Any], room: int, rid: str, settings: DecodeSettings,
              log: Callable[[str], None]) -> int:
    """Step 4: the room's KV from the prefill rank; its token count."""
    rank_addr = host_port(str(rank["rank_ip"]), int(rank["rank_port"]))
    wait = settings.waiting_timeout_secs
    began = time.monotonic()
    try:
        result = kv_transfer.fetch_kv(str(rank["rank_ip"]), int(rank["rank_port"]), room, wait)
    except OSError as exc:
        elapsed = time.monotonic() - began
        if elapsed >= wait:
            reason = f"Request {room} timed out after {elapsed:.1f}s in KVPoll.WaitingForInput"
            detail = f"no KV from the prefill rank at {rank_addr} (bootstrap server {addr}) within {wait:g} s: {exc}"
        else:
            reason = "Failed to get kvcache from prefill instance, it might be dead"
            detail = f"the prefill rank at {rank_addr} (bootstrap server {addr}) failed: {exc}"
        log(detail)
        raise DecodeAbort("transfer", rid, room, reason, detail) from exc
    if result.status == kv_transfer.SUCCESS:
        return result.kv_tokens
    if result.status == kv_transfer.WAITING_FOR_INPUT:
        elapsed = time.monotonic() - began
        reason = f"Request {room} timed out after {elapsed:.1f}s in KVPoll.WaitingForInput"
        detail = f"the prefill at {rank_addr} (bootstrap server {addr}) refused bootstrap_room {room}: {result.reason}"
    else:
        reason = "Failed to get kvcache from prefill instance, it might be dead"
        detail = f"the prefill at {rank_addr} (bootstrap server {addr}) failed bootstrap_room {room}: {result.reason}"
    log(detail)
    raise DecodeAbort("transfer", rid, room, reason, detail)
