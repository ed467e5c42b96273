"""Prefill/decode (PD) disaggregation: the prefill bootstrap listener and decode's check of it.

Real SGLang runs the bootstrap server on the PREFILL server's
``--disaggregation-bootstrap-port``; decode servers reach it at the
``bootstrap_host``/``bootstrap_port`` the router injects into each request.
The stand-in keeps only that reachability: prefill answers one line, decode
connects to it before answering, so a prefill registered at an address decode
cannot reach fails the request.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sglang._standin.replies import RequestError

BOOTSTRAP_TIMEOUT_SECS = 5.0
_GREETING = "OK prefill"


def _family(host: str) -> socket.AddressFamily:
    """IPv6 for literal IPv6 hosts, IPv4 otherwise."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class _BootstrapHandler(socketserver.BaseRequestHandler):
    """Answer one line naming the prefill server, then close."""

    server: BootstrapServer

    def handle(self) -> None:
        """Send the greeting; a client that went away is not an error."""
        self.server.on_connect()
        with contextlib.suppress(OSError):
            self.request.sendall(f"{_GREETING} {self.server.http_port}\n".encode())


class BootstrapServer(socketserver.ThreadingTCPServer):
    """TCP listener on the prefill bootstrap port."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, http_port: int, on_connect: Callable[[], None]) -> None:
        self.address_family = _family(host)
        self.http_port = http_port
        self.on_connect = on_connect
        super().__init__((host, port), _BootstrapHandler)


def start_bootstrap(host: str, port: int, http_port: int, on_connect: Callable[[], None]) -> BootstrapServer:
    """Bind the bootstrap listener (raises OSError) and serve it in a background thread."""
    server = BootstrapServer(host, port, http_port, on_connect)
    threading.Thread(target=server.serve_forever, name="bootstrap", daemon=True).start()
    return server


def bootstrap_targets(body: Mapping[str, Any], default_port: int) -> list[tuple[str, int]]:
    """(host, port) pairs of the prefill bootstrap servers named in a request body.

    The router sends scalars, or lists for batched requests. A missing port
    means decode's own default, as in SGLang. No bootstrap_host: plain request.
    """
    hosts = body.get("bootstrap_host")
    if hosts is None:
        return []
    ports = body.get("bootstrap_port")
    hosts = hosts if isinstance(hosts, list) else [hosts]
    ports = ports if isinstance(ports, list) else [ports] * len(hosts)
    if len(ports) != len(hosts):
        raise RequestError("bootstrap_host and bootstrap_port must be lists of the same length")
    targets: list[tuple[str, int]] = []
    for host, given_port in zip(hosts, ports, strict=True):
        port = default_port if given_port is None else given_port
        if not isinstance(host, str) or not host or isinstance(port, bool) or not isinstance(port, int):
            raise RequestError(f"invalid bootstrap address: bootstrap_host={host!r} bootstrap_port={port!r}")
        if (host, port) not in targets:
            targets.append((host, port))
    return targets


def _read_line(sock: socket.socket, limit: int = 256) -> bytes:
    """Read up to one line (or limit bytes) from sock."""
    data = b""
    while b"\n" not in data and len(data) < limit:
        chunk = sock.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data


def check_bootstrap(host: str, port: int, timeout: float = BOOTSTRAP_TIMEOUT_SECS) -> str | None:
    """None when the prefill bootstrap server at host:port answers, else an error naming the address.

    The server passes SGLANG_DISAGGREGATION_WAITING_TIMEOUT as TIMEOUT: like real decode, a
    request to an unreachable (dropped, not refused) prefill waits that long.
    """
    address = f"{host}:{port}"
    try:
        sock = socket.create_connection((host.strip("[]"), port), timeout=timeout)
    except OSError as exc:
        return f"decode cannot reach the prefill bootstrap server at {address}: {exc}"
    with sock:
        try:
            line = _read_line(sock)
        except OSError as exc:
            return f"no prefill bootstrap server at {address}: connected, but no answer ({exc})"
    if not line.startswith(_GREETING.encode()):
        return f"no prefill bootstrap server at {address}: it answered {line[:80]!r}"
    return None
