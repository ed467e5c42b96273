"""The stand-in's PD handshake: decode asks the prefill bootstrap listener for the request's room.

In-process tests of tests/standin/sglang/_standin/pd.py, then the same faults
through real stand-in processes, sent the way the router sends (the same body to
prefill and decode at once).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from test_standin import CHAT, STANDIN_DIR, Standin, fixture_start, free_port  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the stand-in needs Python 3.10 or later")

if str(STANDIN_DIR) not in sys.path:
    sys.path.insert(0, str(STANDIN_DIR))

from sglang._standin import pd  # noqa: E402  pylint: disable=wrong-import-position
from sglang._standin.replies import RequestError  # noqa: E402  pylint: disable=wrong-import-position

# TEST-NET-1 (RFC 5737): never routed, so a connection to it is dropped or fails at once.
UNROUTABLE = "192.0.2.1"


@pytest.fixture(name="bootstrap")
def fixture_bootstrap() -> Iterator[Callable[..., pd.BootstrapServer]]:
    """Factory of in-process bootstrap listeners on free loopback ports, each with its own rooms."""
    servers: list[pd.BootstrapServer] = []

    def _start(rooms: pd.RoomRegistry | None = None, room_wait: float = 0.5) -> pd.BootstrapServer:
        server = pd.start_bootstrap("127.0.0.1", 0, 30100, lambda: None, rooms or pd.RoomRegistry(), room_wait)
        servers.append(server)
        return server

    yield _start
    for server in servers:
        server.shutdown()
        server.server_close()


def port_of(server: pd.BootstrapServer) -> int:
    return int(server.server_address[1])


# --------------------------------------------------------------- in process
def test_a_room_the_prefill_received_is_answered(bootstrap: Callable[..., pd.BootstrapServer]) -> None:
    server = bootstrap()
    server.rooms.add(42)
    assert pd.check_bootstrap("127.0.0.1", port_of(server), 2.0, room=42) is None


def test_a_room_arriving_while_decode_asks_is_answered(bootstrap: Callable[..., pd.BootstrapServer]) -> None:
    # The router sends both requests at once: decode may ask before prefill has the request.
    # Answered once the room arrives (not before it, and well before the 600 s the server would wait).
    server = bootstrap(room_wait=600.0)
    threading.Timer(0.3, server.rooms.add, args=(7,)).start()
    began = time.monotonic()
    assert pd.check_bootstrap("127.0.0.1", port_of(server), 600.0, room=7) is None
    assert 0.2 <= time.monotonic() - began < 300


def test_a_room_mismatch_is_refused_naming_room_and_address(bootstrap: Callable[..., pd.BootstrapServer]) -> None:
    server = bootstrap(room_wait=0.3)
    server.rooms.add(1001)
    problem = pd.check_bootstrap("127.0.0.1", port_of(server), 2.0, room=1002)
    assert problem is not None
    assert f"127.0.0.1:{port_of(server)} refused bootstrap_room 1002" in problem
    assert "received no request with bootstrap_room 1002" in problem


def test_an_unreachable_prefill_fails_naming_the_address() -> None:
    closed = free_port()
    problem = pd.check_bootstrap("127.0.0.1", closed, 2.0, room=5)
    assert problem is not None and f"cannot reach the prefill bootstrap server at 127.0.0.1:{closed}" in problem
    assert "bootstrap_room 5" in problem
    began = time.monotonic()
    problem = pd.check_bootstrap(UNROUTABLE, 8998, 0.5, room=5)
    assert problem is not None and f"cannot reach the prefill bootstrap server at {UNROUTABLE}:8998" in problem
    # The 0.5 s connect timeout held, not the kernel's (minutes): a bound no slow machine comes near.
    assert time.monotonic() - began < 60


def test_a_port_that_is_not_a_bootstrap_listener_fails_at_once() -> None:
    # Something that answers, but not the greeting (like an HTTP port): decode's question gets a wrong answer.
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)

        def _answer() -> None:
            conn, _address = other.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=_answer, daemon=True).start()
        began = time.monotonic()
        problem = pd.check_bootstrap("127.0.0.1", other.getsockname()[1], 600.0, room=9)
    assert problem is not None and "not a bootstrap greeting" in problem and "HTTP/1.1 400" in problem
    assert "bootstrap_room 9" in problem
    # At once on the wrong answer, not after the 600 s the check would wait.
    assert time.monotonic() - began < 300


def test_the_greeting_alone_still_answers_old_clients(bootstrap: Callable[..., pd.BootstrapServer]) -> None:
    server = bootstrap()
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=5) as sock:
        assert sock.makefile("rb").readline() == b"OK prefill 30100\n"
    assert pd.check_bootstrap("127.0.0.1", port_of(server), 2.0) is None  # no room: reachability only


def test_an_unknown_question_is_refused(bootstrap: Callable[..., pd.BootstrapServer]) -> None:
    server = bootstrap()
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=5) as sock:
        sock.sendall(b"HELLO\n")
        lines = sock.makefile("rb").read().decode().splitlines()
    assert lines[0] == "OK prefill 30100" and lines[1].startswith("REFUSED unknown question 'HELLO'")


def test_rooms_expire_after_their_ttl() -> None:
    now = [100.0]
    rooms = pd.RoomRegistry(ttl=10.0, clock=lambda: now[0])
    rooms.add(3)
    assert rooms.wait_for(3, 0.0)
    now[0] = 111.0
    assert not rooms.wait_for(3, 0.05)
    rooms.add(4)  # purges the expired room
    assert rooms.wait_for(4, 0.0) and not rooms.wait_for(3, 0.0)


@pytest.mark.parametrize(
    ("body", "targets"),
    [
        pytest.param({"text": "hi"}, [], id="plain"),
        pytest.param({"bootstrap_host": "p1", "bootstrap_port": 9000, "bootstrap_room": 5}, [("p1", 9000, 5)], id="single"),
        pytest.param({"bootstrap_host": "p1", "bootstrap_room": 5}, [("p1", 8998, 5)], id="default-port"),
        pytest.param({"bootstrap_host": "p1", "bootstrap_port": 9000}, [("p1", 9000, None)], id="no-room"),
        pytest.param({"bootstrap_host": ["p1", "p1"], "bootstrap_port": [9000, 9000], "bootstrap_room": [1, 2]},
                     [("p1", 9000, 1), ("p1", 9000, 2)], id="batch"),
    ],
)
def test_bootstrap_fields_of_a_request(body: dict[str, Any], targets: list[Any]) -> None:
    assert pd.bootstrap_requests(body, 8998) == targets


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"bootstrap_host": ["p1", "p2"], "bootstrap_port": [1, 2], "bootstrap_room": [1]}, id="short-rooms"),
        pytest.param({"bootstrap_host": "p1", "bootstrap_port": 1, "bootstrap_room": "7"}, id="room-string"),
        pytest.param({"bootstrap_host": "p1", "bootstrap_port": 1, "bootstrap_room": -1}, id="room-negative"),
    ],
)
def test_invalid_bootstrap_fields_are_a_bad_request(body: dict[str, Any]) -> None:
    with pytest.raises(RequestError):
        pd.bootstrap_requests(body, 8998)


# ----------------------------------------------------- through stand-in processes
def dispatch(prefill: Standin, decode: Standin, body: dict[str, Any]) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """Send body to prefill and decode at once, as the router does; ((status, json) of prefill, of decode)."""
    with ThreadPoolExecutor(2) as pool:
        to_prefill = pool.submit(prefill.json, "POST", "/v1/chat/completions", body)
        to_decode = pool.submit(decode.json, "POST", "/v1/chat/completions", body)
        return to_prefill.result(), to_decode.result()


def test_the_router_flow_serves_from_decode(start: Callable[..., Standin]) -> None:
    prefill, decode = start("prefill"), start("decode")
    body = dict(CHAT, bootstrap_host="127.0.0.1", bootstrap_port=prefill.bootstrap_port, bootstrap_room=2**63 - 1)
    (prefill_status, _prefill_reply), (status, reply) = dispatch(prefill, decode, body)
    assert (prefill_status, status) == (200, 200), reply
    assert reply["choices"][0]["message"]["content"].startswith("standin reply from decode:")
    assert prefill.json("GET", "/get_server_info")[1]["standin_bootstrap_connections"] == 1
    # Without bootstrap fields both serve directly, as before.
    assert decode.json("POST", "/v1/chat/completions", CHAT)[0] == 200
    assert prefill.json("POST", "/v1/chat/completions", CHAT)[0] == 200


def test_a_room_mismatch_fails_decode_with_500(start: Callable[..., Standin]) -> None:
    prefill, decode = start("prefill"), start("decode")
    where = {"bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap_port}
    assert prefill.json("POST", "/v1/chat/completions", dict(CHAT, bootstrap_room=11, **where))[0] == 200
    status, error = decode.json("POST", "/v1/chat/completions", dict(CHAT, bootstrap_room=12, **where))
    assert status == 500
    assert f"127.0.0.1:{prefill.bootstrap_port} refused bootstrap_room 12" in error["message"]


def test_the_prefill_http_port_as_bootstrap_port_fails_at_once(start: Callable[..., Standin]) -> None:
    prefill, decode = start("prefill"), start("decode")
    body = dict(CHAT, bootstrap_host="127.0.0.1", bootstrap_port=prefill.port, bootstrap_room=13)
    began = time.monotonic()
    _prefill_answer, (status, error) = dispatch(prefill, decode, body)
    assert status == 500
    assert f"no prefill bootstrap server at 127.0.0.1:{prefill.port}" in error["message"]
    assert "bootstrap_room 13" in error["message"]
    # At once, not after decode's 300 s wait for the KV cache (SGLANG_DISAGGREGATION_WAITING_TIMEOUT).
    assert time.monotonic() - began < 150
