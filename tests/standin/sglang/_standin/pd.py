"""Prefill/decode (PD) disaggregation: the prefill bootstrap listener and decode's handshake with it.

Real SGLang runs the bootstrap server on the PREFILL server's
``--disaggregation-bootstrap-port``. The router sends one request, with the
same ``bootstrap_host``/``bootstrap_port``/``bootstrap_room``, to a prefill and
a decode server at once; decode reaches the prefill named by host and port and
receives the KV cache of that room from it. The stand-in keeps that handshake:

- prefill records the ``bootstrap_room`` of each generation request it gets
  (kept ``ROOM_TTL_SECS``);
- decode connects to ``bootstrap_host:bootstrap_port``, sends ``ROOM <room>``
  and reads the greeting ``OK prefill <http port>`` and then the answer;
- the bootstrap listener answers ``OK room <room>`` for a room its prefill has
  received (waiting up to ``ROOM_WAIT_SECS`` for it, since both requests are sent
  at once), else ``REFUSED room <room>: ...``;
- decode answers 500 naming the room and the bootstrap address when the
  address is unreachable, is not a bootstrap listener, or refuses the room.

A client that only reads the greeting and closes (the old one-line protocol)
still gets ``OK prefill <http port>``. A decode request with bootstrap_host but
no bootstrap_room is only checked for reachability.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sglang._standin.replies import RequestError

BOOTSTRAP_TIMEOUT_SECS = 5.0
# How long the bootstrap listener waits for its prefill to receive a room decode asks for.
ROOM_WAIT_SECS = 5.0
# How long prefill remembers a room it received.
ROOM_TTL_SECS = 120.0
_GREETING = "OK prefill"
_ROOM_OK = "OK room"
_REFUSED = "REFUSED"


def _family(host: str) -> socket.AddressFamily:
    """IPv6 for literal IPv6 hosts, IPv4 otherwise."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class RoomRegistry:
    """Bootstrap rooms a prefill server has received, each kept for a TTL; thread-safe."""

    def __init__(self, ttl: float = ROOM_TTL_SECS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._rooms: dict[int, float] = {}
        self._cond = threading.Condition()

    def add(self, room: int) -> None:
        """Record room (renewing its TTL) and wake bootstrap handlers waiting for it."""
        with self._cond:
            now = self.clock()
            for old in [r for r, expiry in self._rooms.items() if expiry <= now]:
                del self._rooms[old]
            self._rooms[room] = now + self.ttl
            self._cond.notify_all()

    def _known(self, room: int) -> bool:
        expiry = self._rooms.get(room)
        return expiry is not None and expiry > self.clock()

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
# bootstrap listener answers from here unless given another registry.
PREFILL_ROOMS = RoomRegistry()


def _read_line(sock: socket.socket, limit: int = 256) -> bytes:
    """Read up to one line (or limit bytes) from sock; stops at the first newline."""
    data = b""
    while b"\n" not in data and len(data) < limit:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


class _BootstrapHandler(socketserver.BaseRequestHandler):
    """Greet, then answer one ``ROOM <room>`` question if the client asks one."""

    server: BootstrapServer

    def handle(self) -> None:
        """A client that went away is not an error."""
        self.server.on_connect()
        with contextlib.suppress(OSError):
            self.request.sendall(f"{_GREETING} {self.server.http_port}\n".encode())
            self.request.settimeout(self.server.room_wait + BOOTSTRAP_TIMEOUT_SECS)
            line = _read_line(self.request).decode("utf-8", "replace").strip()
            if not line:
                return  # the one-line protocol: greeting only
            self.request.sendall(self._answer(line).encode())

    def _answer(self, line: str) -> str:
        """The answer line to ``ROOM <room>``."""
        word, _space, value = line.partition(" ")
        if word != "ROOM" or not value.strip().isdigit():
            return f"{_REFUSED} unknown question {line[:60]!r}: send ROOM <bootstrap_room>\n"
        room = int(value)
        if self.server.rooms.wait_for(room, self.server.room_wait):
            return f"{_ROOM_OK} {room}\n"
        return (f"{_REFUSED} room {room}: the prefill server (HTTP port {self.server.http_port}) received no request"
                f" with bootstrap_room {room} within {self.server.room_wait:g} s\n")


class BootstrapServer(socketserver.ThreadingTCPServer):
    """TCP listener on the prefill bootstrap port."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, http_port: int, on_connect: Callable[[], None],
                 rooms: RoomRegistry | None = None, room_wait: float = ROOM_WAIT_SECS) -> None:
        self.address_family = _family(host)
        self.http_port = http_port
        self.on_connect = on_connect
        self.rooms = PREFILL_ROOMS if rooms is None else rooms
        self.room_wait = room_wait
        super().__init__((host, port), _BootstrapHandler)


def start_bootstrap(host: str, port: int, http_port: int, on_connect: Callable[[], None],
                    rooms: RoomRegistry | None = None, room_wait: float = ROOM_WAIT_SECS) -> BootstrapServer:
    """Bind the bootstrap listener (raises OSError) and serve it in a background thread."""
    server = BootstrapServer(host, port, http_port, on_connect, rooms, room_wait)
    threading.Thread(target=server.serve_forever, name="bootstrap", daemon=True).start()
    return server


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


def bootstrap_targets(body: Mapping[str, Any], default_port: int) -> list[tuple[str, int]]:
    """(host, port) pairs of the prefill bootstrap servers named in a request body."""
    targets: list[tuple[str, int]] = []
    for host, port, _room in bootstrap_requests(body, default_port):
        if (host, port) not in targets:
            targets.append((host, port))
    return targets


def check_bootstrap(host: str, port: int, timeout: float = BOOTSTRAP_TIMEOUT_SECS, room: int | None = None) -> str | None:
    """None when the prefill bootstrap server at host:port answers (and knows room), else an error.

    The error names the address (and the room). The server passes
    SGLANG_DISAGGREGATION_WAITING_TIMEOUT as TIMEOUT: like real decode, a request
    to an unreachable (dropped, not refused) prefill waits that long.
    """
    address = f"{host}:{port}"
    asked = f" (decode asked it for bootstrap_room {room})" if room is not None else ""
    try:
        sock = socket.create_connection((host.strip("[]"), port), timeout=timeout)
    except OSError as exc:
        return f"decode cannot reach the prefill bootstrap server at {address} (for bootstrap_room {room}): {exc}"
    with sock:
        try:
            if room is not None:
                # Ask first: a server that is not a bootstrap listener (an HTTP port) answers at once.
                sock.sendall(f"ROOM {room}\n".encode())
            greeting = _read_line(sock)
        except OSError as exc:
            return f"no prefill bootstrap server at {address}: connected, but no answer ({exc}){asked}"
        if not greeting.startswith(_GREETING.encode()):
            return f"no prefill bootstrap server at {address}: it answered {greeting[:80]!r}, not a bootstrap greeting{asked}"
        if room is None:
            return None
        try:
            sock.settimeout(max(timeout, ROOM_WAIT_SECS + BOOTSTRAP_TIMEOUT_SECS))
            answer = _read_line(sock).decode("utf-8", "replace").strip()
        except OSError as exc:
            return f"prefill bootstrap server at {address} did not answer for bootstrap_room {room} ({exc})"
    if answer == f"{_ROOM_OK} {room}":
        return None
    return f"prefill bootstrap server at {address} refused bootstrap_room {room}: {answer or 'it closed the connection'}"
