"""The scale tests' load generator (tests/load/loadgen.py): safety bounds, answer checks, summary."""

from __future__ import annotations

import http.client
import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
LOADGEN = HERE.parents[2] / "load" / "loadgen.py"
sys.path.insert(0, str(HERE.parents[1] / "standin"))
from test_standin import command, free_port, standin_env  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the load generator needs Python 3.10 or later")

_spec = importlib.util.spec_from_file_location("loadgen", LOADGEN)
loadgen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(loadgen)


@pytest.mark.parametrize("url, expected", [
    ("http://127.0.0.1:30000", ("127.0.0.1", 30000)),
    ("http://172.30.57.101:30000/", ("172.30.57.101", 30000)),
    ("http://localhost", ("localhost", 80)),
    ("http://[::1]:8000", ("::1", 8000)),
])
def test_test_addresses_are_accepted(url, expected):
    assert loadgen.check_test_address(url) == expected


@pytest.mark.parametrize("url, message", [
    ("http://8.8.8.8:80", "not a loopback or private test address"),
    ("http://router.example.com:30000", "not a name"),
    ("https://127.0.0.1:30000", "expected an http:// URL"),
    ("http://0.0.0.0:30000", "not a loopback or private"),
])
def test_other_addresses_are_refused(url, message):
    with pytest.raises(ValueError, match=message):
        loadgen.check_test_address(url)


def sse(*events):
    return "".join(f"data: {e}\n\n" for e in events).encode()


CHUNK = json.dumps({"choices": [{"index": 0, "delta": {"content": "hi"}}]})
USAGE = json.dumps({"choices": [], "usage": {"total_tokens": 3}})


@pytest.mark.parametrize("status, raw, problem", [
    (200, sse(CHUNK, USAGE, "[DONE]"), None),
    (200, sse(CHUNK, USAGE), "without data: [DONE]"),
    (200, sse(CHUNK, "[DONE]"), "carries no usage"),
    (200, sse(USAGE, "[DONE]"), "no content"),
    (200, sse("{not json", "[DONE]"), "not JSON"),
    (503, b"no workers", "HTTP 503"),
])
def test_stream_checks(status, raw, problem):
    found = loadgen.check_stream(status, raw)
    assert found is None if problem is None else problem in found


@pytest.mark.parametrize("status, raw, problem", [
    (200, json.dumps({"choices": [{"message": {"content": "x"}}], "usage": {"total_tokens": 1}}).encode(), None),
    (200, json.dumps({"choices": [{"message": {"content": ""}}], "usage": {}}).encode(), "empty content"),
    (200, json.dumps({"choices": [{"message": {"content": "x"}}]}).encode(), "no usage"),
    (200, b"<html>", "malformed"),
    (500, b"boom", "HTTP 500"),
])
def test_plain_checks(status, raw, problem):
    found = loadgen.check_plain(status, raw)
    assert found is None if problem is None else problem in found


def test_quantiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (loadgen.quantile(values, 0.5), loadgen.quantile(values, 0.99), loadgen.quantile([], 0.5)) == (50.0, 99.0, None)


def test_summary_buckets_requests_by_the_phase_they_ended_in(tmp_path):
    phases = tmp_path / "phases.jsonl"
    loadgen.append_phase(phases, "one", "start", 10.0)
    loadgen.append_phase(phases, "one", "end", 20.0)
    loadgen.append_phase(phases, "two", "start", 20.0)
    loadgen.append_phase(phases, "two", "end", 30.0)
    records = [
        {"start": 11.0, "end": 11.1, "latency": 0.1, "ok": True, "stream": False, "error": None, "connect_retries": 0},
        {"start": 12.0, "end": 12.3, "latency": 0.3, "ok": True, "stream": True, "error": None, "connect_retries": 2,
         "refused_secs": 0.4},
        # Sent in phase one, cut in phase two: it failed during two.
        {"start": 19.9, "end": 20.1, "latency": 0.2, "ok": False, "stream": True, "error": "HTTP 503: x", "connect_retries": 0},
        {"start": 35.0, "end": 35.2, "latency": 0.2, "ok": True, "stream": False, "error": None, "connect_retries": 0},
    ]
    rows = {r["phase"]: r for r in loadgen.summarise(records, loadgen.phase_windows(loadgen.read_jsonl(phases)))}
    assert (rows["one"]["requests"], rows["one"]["failed"], rows["one"]["p50_ms"], rows["one"]["p99_ms"]) == (2, 0, 100.0, 300.0)
    assert (rows["one"]["connect_retries"], rows["one"]["max_refused_secs"]) == (2, 0.4)
    assert (rows["two"]["requests"], rows["two"]["failed"], rows["two"]["errors"]) == (1, 1, ["HTTP 503: x"])
    assert (rows["one"]["plain_p50_ms"], rows["one"]["stream_p99_ms"], rows["two"]["plain_p50_ms"]) == (100.0, 300.0, None)
    assert rows["all"]["requests"] == 4
    assert "one" in loadgen.format_table(list(rows.values()))


def test_a_connection_reset_before_the_request_is_sent_counts_as_refused(monkeypatch):
    """A connection queued for a listener that then closes (a router restarting) is reset unread: Refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    real_connect = loadgen.http.client.HTTPConnection.connect

    def connect_then_close_the_listener(conn):
        real_connect(conn)  # the kernel completed the handshake; the server never accepts it
        listener.close()
        time.sleep(0.05)

    monkeypatch.setattr(loadgen.http.client.HTTPConnection, "connect", connect_then_close_the_listener)
    with pytest.raises(loadgen.Refused, match="closed before the request was sent"):
        loadgen.send("127.0.0.1", listener.getsockname()[1], {"stream": False}, timeout=2)


def test_an_error_after_the_request_was_sent_is_a_failure():
    """A server that read the request and closed without an answer is not Refused: the request failed."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def read_and_close():
        conn = listener.accept()[0]
        with conn, conn.makefile("rb") as request:  # the whole request: its line, headers and body
            request.readline()
            request.read(int(http.client.parse_headers(request)["Content-Length"]))

    thread = threading.Thread(target=read_and_close)
    thread.start()
    try:
        # Closed after a full read the client sees end of file (RemoteDisconnected); a close racing
        # the kernel's delivery resets the connection instead. Both are failures (Refused is neither).
        with pytest.raises(ConnectionResetError):
            loadgen.send("127.0.0.1", listener.getsockname()[1], {"stream": False}, timeout=5)
    finally:
        thread.join()
        listener.close()


def test_run_is_bounded_and_retries_refused_connections(tmp_path, standin_model_dir):
    """Load starts before the server listens: refused requests are sent again and succeed."""
    port, bootstrap = free_port(), free_port()
    out = tmp_path / "records.jsonl"
    server: list[subprocess.Popen] = []

    def start_later():
        time.sleep(0.6)
        server.append(subprocess.Popen(command("null", port, bootstrap, model_path=standin_model_dir), env=standin_env(),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))

    thread = threading.Thread(target=start_later)
    thread.start()
    try:
        result = subprocess.run(
            [sys.executable, str(LOADGEN), "run", "--url", f"http://127.0.0.1:{port}", "--model", "glm-5.2-fp8",
             "--out", str(out), "--concurrency", "2", "--rate", "20", "--max-requests", "12", "--max-seconds", "20",
             "--connect-retry-secs", "10", "--expect-standin", "null"],
            capture_output=True, text=True, timeout=60, check=True)
    finally:
        thread.join()
        for proc in server:
            proc.terminate()
            proc.wait(10)
    summary = json.loads(result.stdout)
    assert summary["requests"] == 12 and summary["failed"] == 0, out.read_text()
    records = loadgen.read_jsonl(out)
    assert sorted(r["seq"] for r in records) == list(range(12))
    assert sum(r["stream"] for r in records) == 6
    assert sum(r["connect_retries"] for r in records) > 0


def test_run_refuses_a_public_address(tmp_path):
    result = subprocess.run([sys.executable, str(LOADGEN), "run", "--url", "http://1.1.1.1:80", "--model", "m",
                             "--out", str(tmp_path / "r.jsonl"), "--max-seconds", "1"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2 and "not a loopback or private" in result.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_bounds_have_hard_caps():
    with pytest.raises(SystemExit):
        loadgen.parse_args(["run", "--url", "http://127.0.0.1:1", "--model", "m", "--out", "x", "--max-seconds", "99999"])


def test_send_carries_the_api_key_as_a_bearer_token():
    """With --api-key-file the key goes in the Authorization header, never on the command line."""
    import http.server

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(401 if seen[-1] != "Bearer k-123" else 200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        body = loadgen.chat_body(0, "m", False, 4)
        assert loadgen.send("127.0.0.1", server.server_port, body, 5, "k-123")[0] == 200
        assert loadgen.send("127.0.0.1", server.server_port, body, 5)[0] == 401
    finally:
        server.shutdown()
    assert seen == ["Bearer k-123", None]


def test_the_expected_text_is_the_standins_reply_and_a_wrong_one_fails(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parents[2] / "standin"))
    from sglang._standin.replies import chat_reply  # pylint: disable=import-outside-toplevel
    body = loadgen.chat_body(7, "m", False, 8)
    assert loadgen.standin_reply(7, "decode", 8) == chat_reply("decode", body).text == "standin reply from decode: four three two one"
    answer = json.dumps({"choices": [{"message": {"content": "standin reply from prefill: four three two one"}}],
                         "usage": {"total_tokens": 1}}).encode()
    assert loadgen.check_plain(200, answer, loadgen.standin_reply(7, "prefill", 8)) is None
    assert "not 'standin reply from decode: four three two one'" in loadgen.check_plain(200, answer, loadgen.standin_reply(7, "decode", 8))
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "standin reply from null: three"}}]})
    assert "the answer is" in loadgen.check_stream(200, sse(chunk, USAGE, "[DONE]"), loadgen.standin_reply(7, "null", 8))
