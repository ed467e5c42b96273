"""The KV transfer of one room from prefill to decode, over a small TCP channel, and its faults.

In SGLang each prefill rank listens on a ZMQ port (``rank_ip``/``rank_port``, registered with
the bootstrap server); decode sends it a room's metadata, the prefill writes the KV cache into
decode's memory with Mooncake and then pushes decode the room's status ``(room, status,
prefill_rank)`` (``MooncakeKVManager``, mooncake/conn.py; ``KVPoll`` in base/conn.py:
Failed 0, Success 4). The stand-in keeps the shape of that exchange on one TCP connection:

- decode sends ``<room> <seconds it waits>``;
- the prefill's listener waits for its own request with that room (the router sends both at
  once), "sends" the KV and answers ``<room> <status> <prefill_rank> <kv tokens>`` and, on a
  failure, a reason after it.

Faults (``SGLANG_STANDIN_KV_FAULT`` on the prefill, read at start):

- ``transfer_fails``: the prefill's send fails (SGLang logs ``Failed to send kv chunk of
  <room> to <decode>`` and pushes status Failed): decode's request fails.
- ``slow_transfer``: the KV takes ``SGLANG_STANDIN_SLOW_TRANSFER_SECS`` to arrive: the
  request is that much slower, and fails once it passes decode's
  SGLANG_DISAGGREGATION_WAITING_TIMEOUT.
- ``bootstrap_unreachable``: the prefill's bootstrap server does not run (launch_server.py).
- ``long_transfer_fails``: a transfer longer than ``SGLANG_STANDIN_KV_FAULT_MAX_PAGES`` KV pages
  (default 1024) fails at the first page past it, as a Mooncake write that breaks mid-transfer
  does (SGLang logs ``Failed to send kv chunk of <room> to <decode>``); a shorter one arrives.
  A short request passes, a long one (several thousand prompt tokens) fails.

The KV goes page by page, as SGLang's sender sends a room's KV indices in page-sized chunks
(``MooncakeKVManager.send_kvcache`` groups ``prefill_kv_indices`` by page; ``page_size`` is the
prefill's ``--page-size``, SGLang 0.5.14's default 1 token, registered with the bootstrap
server): a room of T prompt tokens is ``ceil(T / page_size)`` pages.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sglang._standin.pd import RoomRegistry, host_port

ENV_FAULT = "SGLANG_STANDIN_KV_FAULT"
FAULTS = ("transfer_fails", "slow_transfer", "bootstrap_unreachable", "long_transfer_fails")
ENV_MAX_PAGES = "SGLANG_STANDIN_KV_FAULT_MAX_PAGES"
MAX_PAGES_DEFAULT = 1024
ENV_SLOW_TRANSFER = "SGLANG_STANDIN_SLOW_TRANSFER_SECS"
SLOW_TRANSFER_DEFAULT = 30.0
# KVPoll (sglang/srt/disaggregation/base/conn.py).
FAILED, WAITING_FOR_INPUT, SUCCESS = 0, 2, 4
# How long decode's side of the channel waits beyond its own deadline for the prefill's answer.
ANSWER_GRACE_SECS = 1.0


@dataclass(frozen=True)
class TransferResult:
    """What the prefill answered for a room: a KVPoll status, its rank, the KV tokens, a reason on failure."""

    status: int
    prefill_rank: int = 0
    kv_tokens: int = 0
    reason: str = ""


def kv_pages(tokens: int, page_size: int) -> int:
    """The KV pages of a room of tokens prompt tokens: ceil(tokens / page_size), one page at least."""
    return max(1, -(-int(tokens) // max(1, int(page_size))))


def _read_line(sock: socket.socket, limit: int = 512) -> str:
    """One line (or limit bytes) from sock."""
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()


class _TransferHandler(socketserver.BaseRequestHandler):
    """The prefill side of one room's transfer."""

    server: TransferServer

    def handle(self) -> None:
        """A decode that went away is not an error."""
        with contextlib.suppress(OSError):
            self.request.settimeout(30.0)
            words = _read_line(self.request).split()
            if len(words) != 2 or not words[0].isdigit():
                self.request.sendall(f"0 {FAILED} 0 0 not a KV request: send <bootstrap_room> <wait seconds>\n".encode())
                return
            room, wait = int(words[0]), float(words[1])
            result = self.server.send_kv(room, wait, host_port(*self.client_address[:2]))
            self.request.settimeout(None)
            line = f"{room} {result.status} {result.prefill_rank} {result.kv_tokens} {result.reason}".rstrip()
            self.request.sendall((line + "\n").encode())


class TransferServer(socketserver.ThreadingTCPServer):
    """The prefill's KV sender: one listener for every rank of the stand-in (rank 0 answers)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, rooms: RoomRegistry, fault: str = "", slow_secs: float = SLOW_TRANSFER_DEFAULT,
                 log: Callable[[str], None] = lambda _line: None, on_sent: Callable[[], None] = lambda: None,
                 page_size: int = 1, max_pages: int = MAX_PAGES_DEFAULT) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.rooms = rooms
        self.fault = fault
        self.slow_secs = slow_secs
        self.page_size = max(1, int(page_size))
        self.max_pages = int(max_pages)
        self.pages_sent = 0
        self.log = log
        self.on_sent = on_sent
        self.stopping = threading.Event()
        super().__init__((host.strip("[]"), port), _TransferHandler)

    def send_kv(self, room: int, wait: float, decode: str) -> TransferResult:
        """Wait (up to wait seconds) for this prefill's request with room, then send its KV, or fail as the fault says."""
        if not self.rooms.wait_for(room, wait):
            reason = f"the prefill received no request with bootstrap_room {room} within {wait:g} s"
            return TransferResult(WAITING_FOR_INPUT, reason=reason)
        if self.fault == "transfer_fails":
            self.log(f"Failed to send kv chunk of {room} to {decode} (fault {ENV_FAULT}=transfer_fails)")
            return TransferResult(FAILED, reason="the KV transfer failed (transfer_fails fault)")
        if self.fault == "slow_transfer":
            self.log(f"KV of room {room} to {decode}: slow transfer, {self.slow_secs:g} s (fault {ENV_FAULT}=slow_transfer)")
            if self.stopping.wait(self.slow_secs):
                return TransferResult(FAILED, reason="the prefill stopped during the transfer")
        tokens = self.rooms.tokens(room)
        pages = kv_pages(tokens, self.page_size)
        for page in range(pages):
            if self.fault == "long_transfer_fails" and page >= self.max_pages:
                self.log(f"Failed to send kv chunk of {room} to {decode}: page {page + 1} of {pages} "
                         f"(page size {self.page_size}; fault {ENV_FAULT}=long_transfer_fails, {ENV_MAX_PAGES}={self.max_pages})")
                return TransferResult(FAILED, kv_tokens=min(tokens, page * self.page_size),
                                      reason=f"the KV transfer failed at page {page + 1} of {pages} (long_transfer_fails fault)")
            self.pages_sent += 1
        self.on_sent()
        return TransferResult(SUCCESS, kv_tokens=tokens)


def start_transfer(host: str, rooms: RoomRegistry, fault: str = "", slow_secs: float = SLOW_TRANSFER_DEFAULT,
                   log: Callable[[str], None] = lambda _line: None, on_sent: Callable[[], None] = lambda: None,
                   page_size: int = 1, max_pages: int = MAX_PAGES_DEFAULT) -> TransferServer:
    """Listen on a free port of host (SGLang's rank port is a free port too) and serve in a background thread."""
    server = TransferServer(host, 0, rooms, fault, slow_secs, log, on_sent, page_size, max_pages)
    threading.Thread(target=server.serve_forever, name="kv-transfer", daemon=True).start()
    return server


def stop_transfer(server: TransferServer) -> None:
    """Stop the listener; transfers held by the slow fault end as failed."""
    server.stopping.set()
    server.shutdown()
    server.server_close()


def fetch_kv(rank_ip: str, rank_port: int, room: int, wait: float) -> TransferResult:
    """Decode's side: ask the prefill rank for room's KV and wait up to wait seconds for its status.

    Raises OSError when the rank cannot be reached or did not answer in time (socket.timeout).
    """
    with socket.create_connection((rank_ip.strip("[]"), rank_port), timeout=min(wait + ANSWER_GRACE_SECS, 30.0)) as sock:
        sock.settimeout(wait + ANSWER_GRACE_SECS)
        sock.sendall(f"{room} {wait:g}\n".encode())
        words = _read_line(sock).split(" ", 4)
    if len(words) < 4 or not all(word.lstrip("-").isdigit() for word in words[:4]):
        raise OSError(f"the prefill rank at {host_port(rank_ip, rank_port)} sent no status for bootstrap_room {room}"
                      f" ({' '.join(words)[:80]!r})")
    return TransferResult(int(words[1]), int(words[2]), int(words[3]), words[4] if len(words) > 4 else "")
