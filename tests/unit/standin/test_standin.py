"""Tests of the CPU stand-in for the SGLang server (tests/standin).

Each test starts ``python -m sglang.launch_server`` with the flags the roles
template, on free loopback ports, and checks what the collection relies on. The model
path is the ``standin_model_dir`` fixture (tests/conftest.py): a directory with a
config.json, without which the stand-in, like SGLang, refuses to start.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the stand-in needs Python 3.10 or later")

STANDIN_DIR = Path(__file__).resolve().parents[2] / "standin"
MODEL = "glm-5.2-fp8"
ROLE_FLAGS = (
    "--served-model-name", MODEL, "--tp-size", "8", "--trust-remote-code",
    "--kv-cache-dtype", "fp8_e4m3", "--attention-backend", "aiter", "--disaggregation-transfer-backend", "mooncake",
    "--disaggregation-ib-device", "mlx5_0,mlx5_1",
)
# SGLang flags the stand-in parses (the pinned table) and does not act on, but --enable-metrics.
MORE_FLAGS = (
    "--mem-fraction-static", "0.88", "--enable-metrics", "--context-length", "202752", "--attn-cp-size", "2",
    "--model-loader-extra-config", '{"enable_multithread_load": true}',
)
CHAT = {"model": MODEL, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three four five"}]}


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(mode: str, port: int, bootstrap_port: int, *extra: str, model_path: Path | str) -> list[str]:
    """The command line the roles template, on loopback, for the model directory model_path."""
    return [sys.executable, "-m", "sglang.launch_server", "--disaggregation-mode", mode, "--host", "127.0.0.1",
            "--port", str(port), "--disaggregation-bootstrap-port", str(bootstrap_port), "--model-path", str(model_path),
            *ROLE_FLAGS, *extra]


def standin_env(warmup: float = 0.0, token_delay: float = 0.0, load: float = 0.0) -> dict[str, str]:
    """Environment that imports the stand-in as ``sglang``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(STANDIN_DIR), env.get("PYTHONPATH", "")) if p)
    env["SGLANG_STANDIN_LOAD_SECS"] = str(load)
    # SGLang's SIGTERM watchdog looks every 5 s; the tests' stand-ins look every 0.2 s.
    env.setdefault("SGLANG_STANDIN_EXIT_POLL_SECS", "0.2")
    env["SGLANG_STANDIN_WARMUP_SECS"] = str(warmup)
    env["SGLANG_STANDIN_TOKEN_DELAY_SECS"] = str(token_delay)
    return env


def sse_payloads(raw: bytes) -> list[str]:
    """Payloads of a server-sent-events body (``data: ...`` blocks)."""
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == "", raw[-200:]
    assert all(b.startswith("data: ") for b in blocks[:-1]), raw[:200]
    return [b[len("data: "):] for b in blocks[:-1]]


@dataclass
class Standin:
    """One running stand-in process."""

    proc: subprocess.Popen[bytes]
    port: int
    bootstrap_port: int
    log_path: Path

    def request(self, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, bytes]:
        """One request on a fresh connection (with ``Authorization: Bearer KEY`` when given); (status, body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = None if body is None else json.dumps(body)
            headers = {"Content-Type": "application/json"}
            if key is not None:
                headers["Authorization"] = f"Bearer {key}"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Like request, with the body decoded as JSON."""
        status, raw = self.request(method, path, body)
        return status, json.loads(raw)

    def log(self) -> str:
        """Everything the process printed."""
        return self.log_path.read_text(encoding="utf-8")


def launch(
    log_dir: Path, model_dir: Path, mode: str = "null", extra: tuple[str, ...] = (), *, warmup: float = 0.0, token_delay: float = 0.0
) -> Standin:
    """Start a stand-in of the model directory model_dir and wait until its HTTP port accepts connections."""
    port, bootstrap_port = free_port(), free_port()
    log_path = log_dir / f"standin-{mode}-{port}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(command(mode, port, bootstrap_port, *extra, model_path=model_dir), stdout=out,
                                stderr=subprocess.STDOUT, env=standin_env(warmup, token_delay))
    standin = Standin(proc, port, bootstrap_port, log_path)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"stand-in exited with {proc.returncode}:\n{standin.log()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return standin
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"stand-in did not listen on port {port}:\n{standin.log()}")


def stop(standin: Standin) -> None:
    """Kill a stand-in that is still running."""
    if standin.proc.poll() is None:
        standin.proc.kill()
        standin.proc.wait(5)


@pytest.fixture(name="start")
def fixture_start(tmp_path: Path, standin_model_dir: Path) -> Iterator[Callable[..., Standin]]:
    """Factory of stand-ins, all stopped after the test."""
    started: list[Standin] = []

    def _start(mode: str = "null", extra: tuple[str, ...] = (), *, warmup: float = 0.0, token_delay: float = 0.0) -> Standin:
        started.append(launch(tmp_path, standin_model_dir, mode, extra, warmup=warmup, token_delay=token_delay))
        return started[-1]

    yield _start
    for standin in started:
        stop(standin)


@pytest.fixture(name="plain", scope="module")
def fixture_plain(tmp_path_factory: pytest.TempPathFactory, standin_model_dir: Path) -> Iterator[Standin]:
    """One non-PD stand-in, started with more SGLang flags, shared by read-only tests."""
    standin = launch(tmp_path_factory.mktemp("plain"), standin_model_dir, "null", MORE_FLAGS)
    yield standin
    stop(standin)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait until condition() holds; the timeout is a safety net, not the test's claim."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


def test_warmup_answers_503_then_200(start: Callable[..., Standin]) -> None:
    # A warm-up longer than any test: it ends when the test says so (SIGUSR1), not on a clock.
    standin = start(warmup=3600)
    assert standin.request("GET", "/health")[0] == 503
    assert standin.request("GET", "/health_generate")[0] == 503
    assert standin.json("POST", "/v1/chat/completions", CHAT)[0] == 503
    standin.proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: standin.request("GET", "/health_generate")[0] == 200, "200 after the warm-up ended")
    assert standin.request("GET", "/health") == (200, b"")
    assert standin.request("GET", "/health_generate") == (200, b"")
    assert standin.json("POST", "/v1/chat/completions", CHAT)[0] == 200


def test_refuses_connections_while_loading_the_model(tmp_path: Path, standin_model_dir: Path) -> None:
    # SGLang loads the model before its HTTP server starts: until then a connection is refused.
    port, bootstrap_port = free_port(), free_port()
    log_path = tmp_path / "loading.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(command("prefill", port, bootstrap_port, model_path=standin_model_dir), stdout=out,
                                stderr=subprocess.STDOUT, env=standin_env(load=3600))
    try:
        wait_for(lambda: "loading the model" in log_path.read_text(encoding="utf-8"), "the load began")
        for refused in (port, bootstrap_port):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", refused), timeout=5).close()
        proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: "started: mode=prefill" in log_path.read_text(encoding="utf-8"), "listening after the load")
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        socket.create_connection(("127.0.0.1", bootstrap_port), timeout=5).close()
    finally:
        proc.kill()
        proc.wait(10)


def test_a_hung_server_queues_connections_like_a_real_one(start: Callable[..., Standin]) -> None:
    """Frozen (SIGSTOP, a hung worker), it still completes 100 TCP handshakes: they wait, none is refused."""
    standin = start()
    standin.proc.send_signal(signal.SIGSTOP)
    sockets = []
    try:
        for _attempt in range(100):
            sockets.append(socket.create_connection(("127.0.0.1", standin.port), timeout=2))
        sockets[-1].settimeout(0.5)
        sockets[-1].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(socket.timeout):
            sockets[-1].recv(1)  # no answer while hung
    finally:
        standin.proc.send_signal(signal.SIGCONT)
        for sock in sockets:
            sock.close()
    assert standin.request("GET", "/health")[0] == 200


def test_api_keys_guard_every_endpoint_but_health_and_metrics(start: Callable[..., Standin]) -> None:
    standin = start(extra=("--api-key", "k-user", "--admin-api-key", "k-admin", "--enable-metrics"))
    assert standin.request("GET", "/health_generate")[0] == 200
    assert standin.request("GET", "/metrics")[0] == 200
    assert standin.request("GET", "/get_server_info")[0] == 401
    assert standin.request("POST", "/v1/chat/completions", CHAT, key="wrong")[0] == 401
    assert standin.request("POST", "/v1/chat/completions", CHAT, key="k-user")[0] == 200
    assert standin.request("POST", "/flush_cache", {}, key="k-user")[0] == 401
    assert standin.request("POST", "/flush_cache", {}, key="k-admin")[0] == 200
    status, raw = standin.request("GET", "/get_server_info", key="k-user")
    assert status == 200 and b"k-user" not in raw and b"k-admin" not in raw
    assert "k-user" not in standin.log() and "k-admin" not in standin.log()


def test_metrics_only_with_enable_metrics(start: Callable[..., Standin]) -> None:
    # SGLang mounts /metrics only when started with --enable-metrics.
    assert start().request("GET", "/metrics")[0] == 404


def test_sglang_flags_parsed_into_server_info(plain: Standin) -> None:
    status, info = plain.json("GET", "/get_server_info")
    assert status == 200
    assert info["version"] == "0.5.14"
    assert (info["tp_size"], info["kv_cache_dtype"], info["disaggregation_mode"]) == (8, "fp8_e4m3", "null")
    assert info["disaggregation_ib_device"] == "mlx5_0,mlx5_1"
    assert (info["mem_fraction_static"], info["context_length"], info["attn_cp_size"], info["enable_metrics"]) == (0.88, 202752, 2, True)
    # SGLang's defaults for what was not given.
    assert (info["dp_size"], info["schedule_policy"], info["enable_metrics_for_all_schedulers"]) == (1, "fcfs", False)
    assert f"mode=null host=127.0.0.1 port={plain.port}" in plain.log()


@pytest.mark.parametrize("extra, message", [
    (("--no-such-flag",), "unrecognized arguments: --no-such-flag"),
    (("--attention-backend", "flash"), "argument --attention-backend: invalid choice: 'flash'"),
    (("--tp-size", "eight"), "argument --tp-size: invalid int value: 'eight'"),
])
def test_refuses_what_sglang_refuses(extra: tuple[str, ...], message: str, standin_model_dir: Path) -> None:
    # SGLang 0.5.14 parses its flags with argparse (server_args.py): exit 2 and argparse's message.
    done = subprocess.run(command("null", 30000, 8998, *extra, model_path=standin_model_dir), env=standin_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_refuses_no_model_path() -> None:
    done = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--port", "30000"], env=standin_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "the following arguments are required: --model-path/--model" in done.stderr


def test_models_and_model_info(plain: Standin, standin_model_dir: Path) -> None:
    model_path = str(standin_model_dir)
    status, models = plain.json("GET", "/v1/models")
    assert status == 200
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"], m["root"]) for m in models["data"]] == [(MODEL, "model", "sglang", model_path)]
    status, info = plain.json("GET", "/get_model_info")
    assert (status, info) == (200, {"model_path": model_path, "tokenizer_path": model_path, "is_generation": True})


def test_chat_completion_usage_and_keep_alive(plain: Standin) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=10)
    try:
        for _attempt in range(2):  # the second request reuses the connection
            conn.request("POST", "/v1/chat/completions", body=json.dumps(dict(CHAT, max_tokens=6)))
            resp = conn.getresponse()
            raw = resp.read()
            assert resp.status == 200
            assert resp.getheader("Content-Length") == str(len(raw))
            assert resp.getheader("Connection") is None
            reply = json.loads(raw)
            assert reply["object"] == "chat.completion"
            assert reply["choices"][0]["message"] == {"role": "assistant", "content": "standin reply from null: five four"}
            assert reply["choices"][0]["finish_reason"] == "length"
            assert reply["usage"] == {"prompt_tokens": 7, "completion_tokens": 6, "total_tokens": 13}
    finally:
        conn.close()
    assert "POST /v1/chat/completions 200" in plain.log()


def test_streaming_chat_ends_with_usage_then_done(plain: Standin) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=10)
    try:
        body = dict(CHAT, stream=True, stream_options={"include_usage": True})
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body))
        resp = conn.getresponse()
        assert (resp.status, resp.getheader("Transfer-Encoding")) == (200, "chunked")
        payloads = sse_payloads(resp.read())
    finally:
        conn.close()
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text == "standin reply from null: five four three two one"


def test_native_generate_and_completions(plain: Standin) -> None:
    status, answer = plain.json("POST", "/generate", {"text": "a b c", "sampling_params": {"max_new_tokens": 5}})
    assert status == 200
    assert answer["text"] == "standin reply from null: c"
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    status, raw = plain.request("POST", "/generate", {"text": "a b", "stream": True})
    payloads = sse_payloads(raw)
    assert (status, payloads[-1]) == (200, "[DONE]")
    assert json.loads(payloads[-2])["text"] == "standin reply from null: b a"
    status, completion = plain.json("POST", "/v1/completions", {"prompt": "x y", "max_tokens": 50})
    assert status == 200
    assert completion["choices"][0]["text"] == "standin reply from null: y x"
    assert completion["usage"] == {"prompt_tokens": 2, "completion_tokens": 6, "total_tokens": 8}
    assert plain.request("POST", "/flush_cache")[0] == 200
    assert plain.json("POST", "/v1/completions", {"max_tokens": 5})[0] == 400


def test_prefill_bootstrap_server_answers(start: Callable[..., Standin]) -> None:
    # SGLang's bootstrap server (an HTTP app) on the bootstrap port; the prefill registered its 8 TP ranks.
    prefill = start("prefill")
    conn = http.client.HTTPConnection("127.0.0.1", prefill.bootstrap_port, timeout=10)
    conn.request("GET", "/health")
    health = conn.getresponse()
    assert (health.status, health.read()) == (200, b"OK")
    conn.request("GET", "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1")
    info = json.loads(conn.getresponse().read())
    conn.close()
    assert info == {"attn_tp_size": 8, "attn_cp_size": 1, "dp_size": 1, "pp_size": 1, "page_size": 1,
                    "kv_cache_dtype": "fp8_e4m3", "follow_bootstrap_room": False}
    assert prefill.json("GET", "/get_server_info")[1]["standin_bootstrap_connections"] == 8 + 2


def test_decode_receives_the_kv_from_prefill(start: Callable[..., Standin]) -> None:
    prefill, decode = start("prefill"), start("decode")
    pd_fields = {"bootstrap_host": "127.0.0.1", "bootstrap_port": prefill.bootstrap_port, "bootstrap_room": 42}
    assert prefill.json("POST", "/v1/chat/completions", dict(CHAT, **pd_fields))[0] == 200  # prefill gets room 42 first
    status, reply = decode.json("POST", "/v1/chat/completions", dict(CHAT, **pd_fields))
    assert status == 200, reply
    assert reply["choices"][0]["message"]["content"].startswith("standin reply from decode:")
    assert prefill.json("GET", "/get_server_info")[1]["standin_kv_transfers"] == 1
    assert decode.json("GET", "/get_server_info")[1]["standin_requests_served"] == 1
    # The KV of the prompt prefill computed: 7 tokens (whitespace words of the system and user messages).
    assert "received the KV cache of bootstrap_room 42 (7 tokens)" in decode.log()


def test_decode_fails_on_unreachable_bootstrap(start: Callable[..., Standin]) -> None:
    decode = start("decode")
    dead_port = free_port()
    pd_fields = {"bootstrap_host": "127.0.0.1", "bootstrap_port": dead_port, "bootstrap_room": 7}
    status, error = decode.json("POST", "/v1/chat/completions", dict(CHAT, **pd_fields))
    assert status == 500
    assert f"127.0.0.1:{dead_port}" in error["message"]
    assert decode.json("GET", "/get_server_info")[1]["standin_requests_served"] == 0
    assert decode.json("POST", "/v1/chat/completions", CHAT)[0] == 200  # no PD fields: served directly
    assert "POST /v1/chat/completions 500" in decode.log()


@pytest.mark.parametrize(
    ("mode", "extra", "message"),
    [
        pytest.param("decode", ("--kv-cache-dtype", "fp8"), "invalid choice: 'fp8'", id="kv-cache-dtype-fp8"),
        pytest.param("prefill", ("--disaggregation-transfer-backend", "fake"), "fake is not supported in prefill mode", id="fake-on-prefill"),
        pytest.param("both", (), "invalid choice: 'both'", id="bad-mode"),
    ],
)
def test_invalid_arguments_exit_2(mode: str, extra: tuple[str, ...], message: str, standin_model_dir: Path) -> None:
    result = subprocess.run(command(mode, free_port(), free_port(), *extra, model_path=standin_model_dir), env=standin_env(),
                            capture_output=True, text=True, timeout=20, check=False)
    assert result.returncode == 2, result
    assert message in result.stderr
    assert "started" not in result.stdout


@pytest.mark.parametrize("model", ["missing", "empty", "file"])
@pytest.mark.parametrize("mode", ["null", "prefill"])
def test_a_model_path_without_config_json_exits_1_before_listening(tmp_path: Path, model: str, mode: str) -> None:
    """Like SGLang (transformers' OSError): named path, exit 1, nothing listens, no Mooncake lines."""
    model_path = tmp_path / "models" / "glm"
    if model == "empty":
        model_path.mkdir(parents=True)
    elif model == "file":
        model_path.parent.mkdir(parents=True)
        model_path.write_text("{}", encoding="utf-8")
    with socket.socket() as taken:  # a server that got as far as binding would fail on this port instead
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = int(taken.getsockname()[1])
        result = subprocess.run(command(mode, port, free_port(), model_path=model_path), env=standin_env(),
                                capture_output=True, text=True, timeout=20, check=False)
    assert result.returncode == 1, result
    assert f"OSError: {model_path} does not appear to have a file named config.json." in result.stderr.splitlines()
    assert "cannot listen" not in result.stdout + result.stderr
    assert "started" not in result.stdout
    assert "transfer_engine_impl.cpp" not in result.stdout + result.stderr


def test_fake_transfer_backend_accepted_on_decode(start: Callable[..., Standin]) -> None:
    decode = start("decode", ("--disaggregation-transfer-backend", "fake"))
    assert decode.request("GET", "/health") == (200, b"")


def test_sigterm_finishes_in_flight_request_and_exits_0(start: Callable[..., Standin]) -> None:
    standin = start(token_delay=0.1)
    idle = http.client.HTTPConnection("127.0.0.1", standin.port, timeout=10)
    busy = http.client.HTTPConnection("127.0.0.1", standin.port, timeout=10)
    try:
        idle.request("GET", "/health")  # leaves an idle keep-alive connection open
        assert idle.getresponse().read() == b""
        busy.request("POST", "/generate", body=json.dumps({"text": "a b c d e f", "stream": True}))
        resp = busy.getresponse()
        assert resp.status == 200
        standin.proc.send_signal(signal.SIGTERM)
        # As SGLang: health answers 503 from the SIGTERM on, while the request in flight is served.
        wait_for(lambda: "received SIGTERM" in standin.log(), "the SIGTERM was taken")
        assert standin.request("GET", "/health")[0] == 503
        payloads = sse_payloads(resp.read())
        # The idle keep-alive connection is closed only after this wait: had it held up the
        # shutdown, the wait would run out.
        assert standin.proc.wait(30) == 0
    finally:
        idle.close()
        busy.close()
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[-2])["text"] == "standin reply from null: f e d c b a"
    assert "received SIGTERM" in standin.log()
    assert "stopped after serving 1 generation requests" in standin.log()


def test_a_stalled_scheduler_fails_the_health_check_while_http_answers(
    start: Callable[..., Standin], monkeypatch: pytest.MonkeyPatch
) -> None:
    # SGLang's health check pushes one token through the scheduler and answers 503 when none came
    # out within SGLANG_HEALTH_CHECK_TIMEOUT (20 s by default), whatever else still answers.
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "1")
    standin = start()
    assert standin.request("GET", "/health_generate")[0] == 200
    standin.proc.send_signal(signal.SIGUSR2)
    wait_for(lambda: "scheduler stalled" in standin.log(), "the stall began")
    assert standin.request("GET", "/health_generate")[0] == 503
    assert standin.request("GET", "/health")[0] == 503
    assert standin.json("GET", "/get_server_info")[0] == 200
    assert "Health check failed. Server couldn't get a response from detokenizer for last 1 seconds." in standin.log()
    standin.proc.send_signal(signal.SIGUSR2)
    wait_for(lambda: "scheduler resumed" in standin.log(), "the stall ended")
    assert standin.request("GET", "/health_generate")[0] == 200


def test_a_decode_health_check_never_reaches_a_prefill(start: Callable[..., Standin]) -> None:
    # SGLang 0.5.14 sends a PD server's health token with its fake bootstrap host: decode answers 200
    # with no prefill anywhere (a broken PD path shows in requests through the router, not here).
    decode = start("decode")
    assert decode.request("GET", "/health_generate")[0] == 200
    # A request with that fake host is served without a peer too (SGLang's _is_fake_transfer).
    fake = dict(CHAT, bootstrap_host="2.2.2.2", bootstrap_port=free_port(), bootstrap_room=3)
    assert decode.json("POST", "/v1/chat/completions", fake)[0] == 200
