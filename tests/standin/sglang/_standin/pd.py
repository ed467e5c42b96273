"""Prefill/decode (PD) disaggregation: the bootstrap fields of a request, and the rooms a prefill received.

The router sends one request, with the same ``bootstrap_host``/``bootstrap_port``/
``bootstrap_room``, to a prefill and a decode server at once. Prefill records the
room of each generation request it gets (kept ``ROOM_TTL_SECS``); its KV transfer
listener (kv_transfer.py) sends a room's KV cache to decode once the room is here.
Decode finds that listener through the prefill's bootstrap server (bootstrap.py)
and fetches the KV (receiver.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sglang._standin.replies import RequestError

# How long prefill remembers a room it received.
ROOM_TTL_SECS = 120.0
# SGLang's FAKE_BOOTSTRAP_HOST (disaggregation/utils.py): a health check's token carries it and
# never reaches a peer.
FAKE_BOOTSTRAP_HOST = "2.2.2.2"


def host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (SGLang's NetworkAddress.to_host_port_str)."""
    bare = host.strip("[]")
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"


class RoomRegistry:
    """Bootstrap rooms a prefill server has received, each kept for a TTL; thread-safe."""

    def __init__(self, ttl: float = ROOM_TTL_SECS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._rooms: dict[int, tuple[float, int]] = {}
        self._cond = threading.Condition()

    def add(self, room: int, tokens: int = 0) -> None:
        """Record room and its prompt's token count (renewing its TTL); wake the KV transfers waiting for it."""
        with self._cond:
            now = self.clock()
            for old in [r for r, (expiry, _tokens) in self._rooms.items() if expiry <= now]:
                del self._rooms[old]
            self._rooms[room] = (now + self.ttl, tokens)
            self._cond.notify_all()

    def _known(self, room: int) -> bool:
        entry = self._rooms.get(room)
        return entry is not None and entry[0] > self.clock()

    def tokens(self, room: int) -> int:
        """The prompt tokens of room: the KV cache prefill computed for it (0 when unknown)."""
        with self._cond:
            entry = self._rooms.get(room)
            return entry[1] if entry is not None else 0

    def wait_for(self, room: int, timeout: float) -> bool:
        """True once room is known; False if it is not within timeout seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._known(room):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True


# One stand-in process runs one server: its HTTP handlers record rooms here and its
# KV transfer listener sends from here unless given another registry.
PREFILL_ROOMS = RoomRegistry()


def _as_list(value: Any, count: int) -> list[Any]:
    """A batched field as a list of count items (a scalar is repeated)."""
    return value if isinstance(value, list) else [value] * count


def _valid_room(room: Any) -> bool:
    return isinstance(room, int) and not isinstance(room, bool) and room >= 0


def bootstrap_rooms(body: Mapping[str, Any]) -> list[int]:
    """The bootstrap_room values of a request body (scalar or list; none: empty)."""
    rooms = body.get("bootstrap_room")
    if rooms is None:
        return []
    rooms = rooms if isinstance(rooms, list) else [rooms]
    for room in rooms:
        if not _valid_room(room):
            raise RequestError(f"invalid bootstrap_room {room!r}: expected an integer >= 0")
    return list(rooms)


def bootstrap_requests(body: Mapping[str, Any], default_port: int) -> list[tuple[str, int, int | None]]:
    """(host, port, room) of each prefill bootstrap server named in a request body.

    The router sends scalars, or lists for batched requests. A missing port
    means decode's own default, as in SGLang. No bootstrap_host: plain request.
    No bootstrap_room: room None (reachability only).
    """
    hosts = body.get("bootstrap_host")
    if hosts is None:
        return []
    hosts = hosts if isinstance(hosts, list) else [hosts]
    ports = _as_list(body.get("bootstrap_port"), len(hosts))
    rooms = _as_list(body.get("bootstrap_room"), len(hosts))
    if len(ports) != len(hosts) or len(rooms) != len(hosts):
        raise RequestError("bootstrap_host, bootstrap_port and bootstrap_room must be lists of the same length")
    targets: list[tuple[str, int, int | None]] = []
    for host, given_port, room in zip(hosts, ports, rooms, strict=True):
        port = default_port if given_port is None else given_port
        if not isinstance(host, str) or not host or isinstance(port, bool) or not isinstance(port, int):
            raise RequestError(f"invalid bootstrap address: bootstrap_host={host!r} bootstrap_port={port!r}")
        if room is not None and not _valid_room(room):
            raise RequestError(f"invalid bootstrap_room {room!r}: expected an integer >= 0")
        if (host, port, room) not in targets:
            targets.append((host, port, room))
    return targets
