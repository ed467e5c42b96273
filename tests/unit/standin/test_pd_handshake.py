"""The stand-in's PD path: SGLang's bootstrap server, decode's handshake with it, the KV transfer and its faults.

In-process tests of tests/standin/sglang/_standin/{bootstrap,receiver,kv_transfer}.py, then the
same paths through real stand-in processes, sent the way the router sends (the same body to
prefill and decode at once). Texts and status codes are SGLang 0.5.14's
(sglang/srt/disaggregation/common/conn.py, decode.py).
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from test_standin import CHAT, STANDIN_DIR, Standin, command, fixture_start, free_port, standin_env, wait_for  # noqa: F401  pylint: disable=unused-import

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the stand-in needs Python 3.10 or later")

if str(STANDIN_DIR) not in sys.path:
    sys.path.insert(0, str(STANDIN_DIR))

# pylint: disable=wrong-import-position
from sglang._standin import bootstrap, kv_transfer, pd, receiver  # noqa: E402
from sglang._standin.replies import RequestError  # noqa: E402

INFO_QUERY = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
PREFILL_ARGS = SimpleNamespace(tp_size=2, pp_size=1, page_size=None, kv_cache_dtype="fp8_e4m3", load_balance_method="auto")
FAST = receiver.DecodeSettings(waiting_timeout_secs=600.0, ensure_retry_secs=0.0)


def call(port: int, method: str, path: str, body: Any = None) -> tuple[int, str, str]:
    """(status, content type, text) of one request to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read().decode()
    finally:
        conn.close()


class Prefill:
    """An in-process prefill: its rooms, KV sender and bootstrap server (with its ranks registered)."""

    def __init__(self, fault: str = "", slow_secs: float = 0.0, register: int | None = None) -> None:
        self.rooms = pd.RoomRegistry()
        self.logged: list[str] = []
        self.transfer = kv_transfer.start_transfer("127.0.0.1", self.rooms, fault, slow_secs, self.logged.append)
        self.server = bootstrap.start_bootstrap("127.0.0.1", 0)
        self.port = int(self.server.server_address[1])
        rank_port = int(self.transfer.server_address[1])
        payloads = [bootstrap.registration(PREFILL_ARGS, "127.0.0.1", rank_port, tp, 0) for tp in range(PREFILL_ARGS.tp_size)]
        assert bootstrap.register_ranks("127.0.0.1", self.port, payloads[:register], self.logged.append)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        kv_transfer.stop_transfer(self.transfer)


@pytest.fixture(name="prefill")
def fixture_prefill() -> Iterator[Callable[..., Prefill]]:
    """Factory of in-process prefills, closed after the test."""
    made: list[Prefill] = []

    def _make(**kwargs: Any) -> Prefill:
        made.append(Prefill(**kwargs))
        return made[-1]

    yield _make
    for one in made:
        one.close()


def receive(prefill: Prefill, room: int | None, settings: receiver.DecodeSettings = FAST) -> tuple[int, list[str], list[float]]:
    """Decode's side for room: (KV tokens, what it logged, the pauses between its tries)."""
    logged: list[str] = []
    pauses: list[float] = []
    tokens = receiver.receive_kv("127.0.0.1", prefill.port, room, "rid-1", settings, logged.append, pauses.append)
    return tokens, logged, pauses


# ------------------------------------------------------------ the bootstrap server
def test_the_routes_answer_as_sglangs(prefill: Callable[..., Prefill]) -> None:
    server = prefill()
    rank_port = int(server.transfer.server_address[1])
    assert call(server.port, "GET", "/health")[::2] == (200, "OK")
    status, kind, text = call(server.port, "GET", INFO_QUERY)
    assert (status, kind.split(";")[0]) == (200, "application/json")
    assert json.loads(text) == {"attn_tp_size": 2, "attn_cp_size": 1, "dp_size": 1, "pp_size": 1, "page_size": 1,
                                "kv_cache_dtype": "fp8_e4m3", "follow_bootstrap_room": False}
    rank = "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=1&target_pp_rank=0"
    assert json.loads(call(server.port, "GET", rank)[2]) == {"rank_ip": "127.0.0.1", "rank_port": rank_port}
    assert call(server.port, "GET", rank.replace("target_tp_rank=1", "target_tp_rank=5"))[::2] == (
        404, "Bootstrap info not found for dp_rank=0 cp_rank=0 tp_rank=5 pp_rank=0")
    assert call(server.port, "GET", "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0")[::2] == (
        400, "Missing inputs for bootstrap server.")
    assert call(server.port, "GET", rank.replace("target_pp_rank=0", "target_pp_rank="))[0] == 400
    assert call(server.port, "DELETE", "/route")[:2] == (405, "application/json")
    assert call(server.port, "DELETE", "/route")[2] == "Method not allowed"
    assert call(server.port, "GET", "/nothing")[::2] == (404, "404: Not Found")
    assert call(server.port, "GET", "/register_dp_rank")[::2] == (405, "405: Method Not Allowed")
    assert call(server.port, "PUT", "/route", {"attn_tp_size": 2})[0] == 500  # a key missing: the handler raises


def test_the_dp_rank_table(prefill: Callable[..., Prefill]) -> None:
    server = prefill()
    assert call(server.port, "POST", "/register_dp_rank", {"bootstrap_room": 77, "dp_rank": 3})[::2] == (200, "OK")
    assert call(server.port, "POST", "/register_dp_rank", {"bootstrap_room": 79, "dp_rank": 1})[::2] == (200, "OK")
    assert json.loads(call(server.port, "POST", "/query_dp_ranks", {"bootstrap_rooms": [77, 78]})[2]) == {"77": 3}


def test_routes_answer_503_until_every_rank_registered(prefill: Callable[..., Prefill]) -> None:
    server = prefill(register=1)  # 1 of the 2 TP ranks
    assert call(server.port, "GET", INFO_QUERY)[::2] == (503, "Prefill server not fully registered yet (1 workers registered).")
    assert call(server.port, "GET", "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0")[0] == 503


# ------------------------------------------------------- decode's side, in process
def test_decode_receives_the_rooms_kv(prefill: Callable[..., Prefill]) -> None:
    server = prefill()
    threading.Timer(0.2, server.rooms.add, args=(9, 12)).start()  # the prefill's request arrives while decode asks
    tokens, logged, pauses = receive(server, 9)
    assert (tokens, logged, pauses) == (12, [], [])


def test_an_unreachable_bootstrap_server_aborts_after_sglangs_15_tries() -> None:
    closed = free_port()
    logged: list[str] = []
    pauses: list[float] = []
    settings = receiver.DecodeSettings(ensure_retry_secs=1.0)
    with pytest.raises(RequestError) as err:
        receiver.receive_kv("127.0.0.1", closed, 5, "rid-5", settings, logged.append, pauses.append)
    assert err.value.status == 500 and err.value.error_type == "500"
    assert str(err.value).startswith(
        "Decode handshake failed for request rank=0 decode_req.req.rid='rid-5' decode_req.req.bootstrap_room=5 "
        "with exception KVTransferError(bootstrap_room=5): Aborted by AbortReq. (decode log: ")
    assert f"cannot reach the prefill bootstrap server at 127.0.0.1:{closed}" in str(err.value)
    assert logged[-1] == f"Could not fetch prefill parallel info from 127.0.0.1:{closed} after 15 attempts"
    assert pauses == [1.0] * 14  # 15 tries, SGLang's 1 s apart


def test_a_prefill_not_fully_registered_is_retried_then_aborts(prefill: Callable[..., Prefill]) -> None:
    server = prefill(register=1)
    with pytest.raises(RequestError, match="Aborted by AbortReq") as err:
        receive(server, 5)
    assert "Failed to get prefill server info: 503, Prefill server not fully registered yet (1 workers registered)." in str(err.value)


def test_a_rank_the_bootstrap_server_lacks_fails_the_handshake(prefill: Callable[..., Prefill]) -> None:
    server = prefill()
    server.server.table.ranks.pop((0, 0, 0, 0))
    with pytest.raises(RequestError) as err:
        receive(server, 6)
    assert ("KVTransferError(bootstrap_room=6): Could not fetch bootstrap info for: prefill_dp_rank: 0 prefill_cp_rank: 0 "
            "target_tp_rank: 0 and target_pp_rank 0") in str(err.value)
    assert "Decode handshake failed" in str(err.value)


def test_a_room_the_prefill_never_got_times_out_at_decodes_waiting_timeout(prefill: Callable[..., Prefill]) -> None:
    server = prefill()
    server.rooms.add(1001)
    with pytest.raises(RequestError) as err:
        receive(server, 1002, receiver.DecodeSettings(waiting_timeout_secs=0.3, ensure_retry_secs=0.0))
    message = str(err.value)
    assert message.startswith("Decode transfer failed for request rank=0 decode_req.req.rid='rid-1' "
                              "decode_req.req.bootstrap_room=1002 with exception KVTransferError(bootstrap_room=1002): "
                              "Request 1002 timed out after ")
    assert "s in KVPoll.WaitingForInput (decode log: " in message
    assert "refused bootstrap_room 1002: the prefill received no request with bootstrap_room 1002 within 0.3 s" in message


def test_the_transfer_fails_fault(prefill: Callable[..., Prefill]) -> None:
    server = prefill(fault="transfer_fails")
    server.rooms.add(3)
    with pytest.raises(RequestError) as err:
        receive(server, 3)
    assert ("Decode transfer failed for request rank=0 decode_req.req.rid='rid-1' decode_req.req.bootstrap_room=3 with "
            "exception KVTransferError(bootstrap_room=3): Failed to get kvcache from prefill instance, it might be dead") in str(err.value)
    assert server.logged[-1].startswith("Failed to send kv chunk of 3 to 127.0.0.1:")


def test_the_kv_goes_in_pages_of_the_page_size() -> None:
    assert [kv_transfer.kv_pages(tokens, 1) for tokens in (0, 1, 7)] == [1, 1, 7]
    assert [kv_transfer.kv_pages(tokens, 4) for tokens in (3, 4, 5, 8192)] == [1, 1, 2, 2048]


def test_the_long_transfer_fault_fails_only_past_its_pages() -> None:
    rooms = pd.RoomRegistry()
    logged: list[str] = []
    server = kv_transfer.TransferServer("127.0.0.1", 0, rooms, "long_transfer_fails", 0.0, logged.append, page_size=2, max_pages=4)
    try:
        rooms.add(5, 8)  # 4 pages of 2 tokens: within the limit
        assert server.send_kv(5, 1.0, "d:1") == kv_transfer.TransferResult(kv_transfer.SUCCESS, kv_tokens=8)
        assert server.pages_sent == 4
        rooms.add(6, 9)  # 5 pages: the fifth fails
        result = server.send_kv(6, 1.0, "d:1")
        assert result.status == kv_transfer.FAILED and result.kv_tokens == 8
        assert result.reason == "the KV transfer failed at page 5 of 5 (long_transfer_fails fault)"
        assert logged[-1].startswith("Failed to send kv chunk of 6 to d:1: page 5 of 5 (page size 2;")
    finally:
        server.server_close()


def test_a_slow_transfer_arrives_late(prefill: Callable[..., Prefill]) -> None:
    server = prefill(fault="slow_transfer", slow_secs=0.5)
    server.rooms.add(4, 7)
    began = time.monotonic()
    assert receive(server, 4)[0] == 7
    assert time.monotonic() - began >= 0.5  # no sooner than the slow transfer takes
    assert "slow transfer, 0.5 s" in server.logged[-1]


def test_a_transfer_slower_than_decodes_wait_fails(prefill: Callable[..., Prefill]) -> None:
    server = prefill(fault="slow_transfer", slow_secs=600.0)
    server.rooms.add(8)
    with pytest.raises(RequestError) as err:
        receive(server, 8, receiver.DecodeSettings(waiting_timeout_secs=0.3, ensure_retry_secs=0.0))
    assert "KVTransferError(bootstrap_room=8): Request 8 timed out after " in str(err.value)
    assert "s in KVPoll.WaitingForInput" in str(err.value)


# --------------------------------------------------------------- request fields
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


def test_rooms_expire_after_their_ttl() -> None:
    now = [100.0]
    rooms = pd.RoomRegistry(ttl=10.0, clock=lambda: now[0])
    rooms.add(3)
    assert rooms.wait_for(3, 0.0)
    now[0] = 111.0
    assert not rooms.wait_for(3, 0.05)
    rooms.add(4)  # purges the expired room
    assert rooms.wait_for(4, 0.0) and not rooms.wait_for(3, 0.0)


# ----------------------------------------------------- through stand-in processes
def dispatch(prefill: Standin, decode: Standin, body: dict[str, Any]) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """Send body to prefill and decode at once, as the router does; ((status, json) of prefill, of decode)."""
    with ThreadPoolExecutor(2) as pool:
        to_prefill = pool.submit(prefill.json, "POST", "/v1/chat/completions", body)
        to_decode = pool.submit(decode.json, "POST", "/v1/chat/completions", body)
        return to_prefill.result(), to_decode.result()


def pd_body(prefill: Standin, room: int, port: int | None = None) -> dict[str, Any]:
    return dict(CHAT, bootstrap_host="127.0.0.1", bootstrap_port=port or prefill.bootstrap_port, bootstrap_room=room)


def test_the_router_flow_serves_from_decode(start: Callable[..., Standin]) -> None:
    prefill, decode = start("prefill"), start("decode")
    (prefill_status, _prefill_reply), (status, reply) = dispatch(prefill, decode, pd_body(prefill, 2**63 - 1))
    assert (prefill_status, status) == (200, 200), reply
    assert reply["choices"][0]["message"]["content"].startswith("standin reply from decode:")
    assert prefill.json("GET", "/get_server_info")[1]["standin_kv_transfers"] == 1
    assert decode.json("GET", "/get_server_info")[1]["standin_kv_transfers"] == 1
    # Without bootstrap fields both serve directly, as before.
    assert decode.json("POST", "/v1/chat/completions", CHAT)[0] == 200
    assert prefill.json("POST", "/v1/chat/completions", CHAT)[0] == 200


def test_a_room_mismatch_fails_decode_with_500(start: Callable[..., Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "1")
    prefill, decode = start("prefill"), start("decode")
    assert prefill.json("POST", "/v1/chat/completions", pd_body(prefill, 11))[0] == 200
    status, error = decode.json("POST", "/v1/chat/completions", pd_body(prefill, 12))
    assert status == 500 and error["code"] == 500 and error["type"] == "500"
    assert "KVTransferError(bootstrap_room=12): Request 12 timed out after " in error["message"]
    assert "refused bootstrap_room 12" in error["message"]
    assert "kv_waiting_timeout=1.0s" in decode.log()


def test_the_prefill_http_port_as_bootstrap_port_fails_the_handshake(start: Callable[..., Standin]) -> None:
    prefill, decode = start("prefill"), start("decode")
    _prefill_answer, (status, error) = dispatch(prefill, decode, pd_body(prefill, 13, prefill.port))
    assert status == 500
    assert "KVTransferError(bootstrap_room=13): Aborted by AbortReq." in error["message"]
    assert f"Could not fetch prefill parallel info from 127.0.0.1:{prefill.port} after 15 attempts" in error["message"]
    assert "Failed to get prefill server info: 404" in decode.log()  # the HTTP server has no /route


@pytest.mark.parametrize(("fault", "reason"), [
    pytest.param("transfer_fails", "Failed to get kvcache from prefill instance, it might be dead", id="transfer-fails"),
    pytest.param("slow_transfer", "Request 14 timed out after ", id="slow-transfer"),
    pytest.param("bootstrap_unreachable", "Aborted by AbortReq.", id="bootstrap-unreachable"),
])
def test_each_fault_fails_the_pd_request(start: Callable[..., Standin], monkeypatch: pytest.MonkeyPatch, fault: str,
                                         reason: str) -> None:
    monkeypatch.setenv("SGLANG_STANDIN_KV_FAULT", fault)
    monkeypatch.setenv("SGLANG_STANDIN_SLOW_TRANSFER_SECS", "600")
    monkeypatch.setenv("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "1")
    prefill, decode = start("prefill"), start("decode")
    (prefill_status, _reply), (status, error) = dispatch(prefill, decode, pd_body(prefill, 14))
    assert prefill_status == 200  # the prefill's own request is served: decode's fails
    assert status == 500 and f"KVTransferError(bootstrap_room=14): {reason}" in error["message"]
    assert prefill.request("GET", "/health_generate")[0] == 200  # its HTTP server answers through every fault
    assert decode.json("GET", "/get_server_info")[1]["standin_requests_served"] == 0


def test_a_slow_transfer_within_decodes_wait_is_served_late(start: Callable[..., Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_STANDIN_KV_FAULT", "slow_transfer")
    monkeypatch.setenv("SGLANG_STANDIN_SLOW_TRANSFER_SECS", "1")
    prefill, decode = start("prefill"), start("decode")
    began = time.monotonic()
    _prefill_answer, (status, reply) = dispatch(prefill, decode, pd_body(prefill, 15))
    assert status == 200, reply
    assert time.monotonic() - began >= 1.0  # no sooner than the slow transfer takes
    assert "KV of room 15 to 127.0.0.1:" in prefill.log() and "slow transfer, 1 s" in prefill.log()


def test_a_long_prompt_fails_under_the_long_transfer_fault_and_a_short_one_passes(
        start: Callable[..., Standin], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_STANDIN_KV_FAULT", "long_transfer_fails")
    monkeypatch.setenv("SGLANG_STANDIN_KV_FAULT_MAX_PAGES", "16")
    prefill, decode = start("prefill", ("--page-size", "2")), start("decode")
    _prefill_answer, (status, reply) = dispatch(prefill, decode, pd_body(prefill, 16))
    assert status == 200, reply  # a few words: one page
    long_body = dict(pd_body(prefill, 17), messages=[{"role": "user", "content": " ".join(["kv"] * 40)}])
    (prefill_status, _reply), (status, error) = dispatch(prefill, decode, long_body)
    assert prefill_status == 200 and status == 500
    assert "KVTransferError(bootstrap_room=17): Failed to get kvcache from prefill instance" in error["message"]
    assert "Failed to send kv chunk of 17 to 127.0.0.1:" in prefill.log() and "page 17 of 20 (page size 2;" in prefill.log()


def test_an_unknown_fault_is_refused(standin_model_dir: Any) -> None:
    proc = subprocess.run(command("prefill", free_port(), free_port(), model_path=standin_model_dir), capture_output=True,
                          text=True, timeout=30, env={**standin_env(), "SGLANG_STANDIN_KV_FAULT": "disk_full"}, check=False)
    assert proc.returncode == 2
    assert ("SGLANG_STANDIN_KV_FAULT must be one of transfer_fails, slow_transfer, bootstrap_unreachable, "
            "long_transfer_fails, got 'disk_full'") in proc.stderr


def test_a_stalled_decode_scheduler_holds_a_pd_request_until_it_resumes(start: Callable[..., Standin]) -> None:
    # SGLang bootstraps a request in its scheduler's loop: a stalled decode (SIGUSR2) asks no prefill.
    prefill, decode = start("prefill"), start("decode")
    registered = prefill.json("GET", "/get_server_info")[1]["standin_bootstrap_connections"]
    decode.proc.send_signal(signal.SIGUSR2)
    wait_for(lambda: "scheduler stalled" in decode.log(), "the stall began")
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(decode.json, "POST", "/v1/chat/completions", pd_body(prefill, 16))
        wait_for(lambda: decode.json("GET", "/get_load")[1][0]["num_reqs"] == 1, "the request is in decode's scheduler")
        assert prefill.json("POST", "/v1/chat/completions", pd_body(prefill, 16))[0] == 200
        assert prefill.json("GET", "/get_server_info")[1]["standin_bootstrap_connections"] == registered  # decode asked nothing yet
        assert not pending.done()
        decode.proc.send_signal(signal.SIGUSR2)
        status, _reply = pending.result(timeout=60)
    assert status == 200


def test_a_decode_with_no_bootstrap_room_only_asks_the_bootstrap_server(prefill: Callable[..., Prefill]) -> None:
    server = prefill()
    assert receive(server, None) == (0, [], [])
