"""Load generator for the scale tests: chat completions through the router, every answer recorded.

Tests only, standard library only, and bounded: it talks to loopback or private test
addresses only, stops after --max-requests or --max-seconds (hard caps below), and stops
early when --stop-file appears or on SIGTERM/SIGINT (in-flight requests finish first).

  loadgen.py run --url http://172.30.57.101:30000 --model glm-5.2-fp8 --out records.jsonl \\
      --stop-file stop --max-seconds 900
  loadgen.py phase --file phases.jsonl --name scale_out --event start     # ... --event end
  loadgen.py summary --records records.jsonl --phases phases.jsonl [--json]

Every request is one JSON line in --out: seq, start/end (epoch seconds), latency, stream,
ok, status, error, connect_retries, ttft. Requests alternate between streaming (with
stream_options.include_usage) and not. A request counts as failed unless the answer is a
complete, well-formed completion: HTTP 200, content, and for streams the usage chunk and
data: [DONE]; with --expect-standin, the content must be the SGLang stand-in's deterministic
reply to that request (a wrong server, or a mangled answer, fails).

A request the router never accepted (TCP connection refused, or reset before the request
was sent because the listening socket closed with the connection still queued, both as while
the router restarts) is sent again for up to --connect-retry-secs, as a load balancer in
front of it would; each retry is counted in connect_retries and the summary reports the
longest refused window.
A request that was accepted and then failed is never retried.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

MAX_SECONDS_CAP = 3600.0
MAX_REQUESTS_CAP = 1_000_000
MAX_CONCURRENCY = 64


class Refused(Exception):
    """The request never reached a server: the connection was refused, or closed before the request was sent.

    A connection the kernel queued for a listening socket that closes (a router restarting)
    is reset before the server accepts it: sending the request on it fails, and the server
    has read nothing. An error after the request was sent is a failed request, not this.
    """


# ----------------------------------------------------------------- safety
def check_test_address(url: str) -> tuple[str, int]:
    """``(host, port)`` of an http URL on a loopback or private test address; ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"expected an http:// URL, got {url!r}")
    host = parts.hostname
    if host == "localhost":
        return host, parts.port or 80
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ValueError(f"{host!r}: give a loopback or private IP address (test hosts only), not a name") from exc
    if not (address.is_loopback or address.is_private) or address.is_multicast or address.is_unspecified:
        raise ValueError(f"{host} is not a loopback or private test address: refusing to send load there")
    return host, parts.port or 80


# ----------------------------------------------------------------- one request
def chat_body(seq: int, model: str, stream: bool, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": f"request {seq}: count one two three four"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def standin_reply(seq: int, mode: str, max_tokens: int) -> str:
    """The answer the SGLang stand-in gives request SEQ from a MODE server (tests/standin: its
    prefix, then the words of the message reversed, cut to MAX_TOKENS words)."""
    words = ["standin", "reply", "from", f"{mode}:", *reversed(f"request {seq}: count one two three four".split())]
    return " ".join(words[:max_tokens])


def _content_problem(content: str, expected: str | None) -> str | None:
    if not content:
        return "empty content"
    if expected is not None and content != expected:
        return f"the answer is {content[:200]!r}, not {expected!r}"
    return None


def check_plain(status: int, raw: bytes, expected: str | None = None) -> str | None:
    """Problem with a non-streaming answer (its content, when EXPECTED is given), or None."""
    if status != 200:
        return f"HTTP {status}: {raw[:200]!r}"
    try:
        data = json.loads(raw)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return f"malformed completion ({exc}): {raw[:200]!r}"
    if _content_problem(content, expected):
        return _content_problem(content, expected)
    if not data.get("usage"):
        return "no usage"
    return None


def check_stream(status: int, raw: bytes, expected: str | None = None) -> str | None:
    """Problem with a streamed answer (its content, when EXPECTED is given), or None."""
    if status != 200:
        return f"HTTP {status}: {raw[:200]!r}"
    events = [block[len("data: "):] for block in raw.decode("utf-8", "replace").split("\n\n")
              if block.startswith("data: ")]
    if not events or events[-1].strip() != "[DONE]":
        return f"stream ended without data: [DONE] after {len(events)} event(s)"
    try:
        chunks = [json.loads(e) for e in events[:-1]]
    except ValueError as exc:
        return f"a chunk is not JSON: {exc}"
    if not chunks or not chunks[-1].get("usage") or chunks[-1].get("choices"):
        return "the last chunk before [DONE] carries no usage"
    content = "".join((c.get("choices") or [{}])[0].get("delta", {}).get("content") or "" for c in chunks[:-1])
    if not content:
        return "no content in the stream"
    return _content_problem(content, expected)


def send(host: str, port: int, body: dict[str, Any], timeout: float,
         api_key: str | None = None) -> tuple[int, bytes, float | None]:
    """POST one chat completion on a fresh connection: ``(status, body, ttft)``; Refused if the server read nothing."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        try:
            conn.connect()
        except ConnectionRefusedError as exc:
            raise Refused(str(exc)) from exc
        start = time.monotonic()
        payload = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Connection": "close"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        try:
            conn.request("POST", "/v1/chat/completions", body=payload, headers=headers)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Refused(f"closed before the request was sent: {exc}") from exc
        resp = conn.getresponse()
        ttft = None
        if body["stream"] and resp.status == 200:
            first = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
            ttft = time.monotonic() - start
            raw = first + resp.read()
        else:
            raw = resp.read()
        return resp.status, raw, ttft
    finally:
        conn.close()


# ----------------------------------------------------------------- run
class Recorder:
    """Appends one JSON line per request; thread safe."""

    def __init__(self, path: Path) -> None:
        self.lock = threading.Lock()
        self.handle = path.open("a", encoding="utf-8")
        self.count = 0
        self.failed = 0

    def write(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.handle.write(json.dumps(record, sort_keys=True) + "\n")
            self.handle.flush()
            self.count += 1
            self.failed += 0 if record["ok"] else 1

    def close(self) -> None:
        self.handle.close()


class Generator:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.host, self.port = check_test_address(args.url)
        # The router's key, read from a file (never an argument: argv is visible to every user).
        self.api_key = Path(args.api_key_file).read_text(encoding="utf-8").strip() if args.api_key_file else None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.next_seq = 0
        self.started = time.monotonic()
        self.recorder = Recorder(Path(args.out))

    def _take(self) -> int | None:
        """Next sequence number when it is its turn (paced by --rate), or None to stop."""
        with self.lock:
            seq = self.next_seq
            if seq >= self.args.max_requests:
                return None
            self.next_seq += 1
        due = self.started + seq / self.args.rate if self.args.rate > 0 else 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now - self.started >= self.args.max_seconds:
                return None
            if self.args.stop_file and Path(self.args.stop_file).exists():
                self.stop.set()
                return None
            if now >= due:
                return seq
            time.sleep(min(0.05, due - now))
        return None

    def one(self, seq: int) -> dict[str, Any]:
        stream = seq % 2 == 1
        body = chat_body(seq, self.args.model, stream, self.args.max_tokens)
        start_wall, start = time.time(), time.monotonic()
        retries = 0
        refused_until = None
        status, error, ttft = None, None, None
        while True:
            try:
                status, raw, ttft = send(self.host, self.port, body, self.args.timeout, self.api_key)
                expected = (standin_reply(seq, self.args.expect_standin, self.args.max_tokens)
                            if self.args.expect_standin else None)
                error = check_stream(status, raw, expected) if stream else check_plain(status, raw, expected)
                break
            except Refused as exc:
                if time.monotonic() - start >= self.args.connect_retry_secs:
                    error = f"connection refused for {self.args.connect_retry_secs} s: {exc}"
                    break
                retries += 1
                refused_until = time.monotonic()
                time.sleep(0.05)
            except (OSError, http.client.HTTPException) as exc:
                error = f"{type(exc).__name__}: {exc}"
                break
        end = time.monotonic()
        return {
            "seq": seq,
            "start": round(start_wall, 4),
            "end": round(start_wall + (end - start), 4),
            "latency": round(end - start, 4),
            "refused_secs": round(refused_until - start, 4) if refused_until else 0.0,
            "stream": stream,
            "ok": error is None,
            "status": status,
            "error": error,
            "connect_retries": retries,
            "ttft": round(ttft, 4) if ttft is not None else None,
        }

    def worker(self) -> None:
        while True:
            seq = self._take()
            if seq is None:
                return
            self.recorder.write(self.one(seq))

    def run(self) -> int:
        threads = [threading.Thread(target=self.worker, name=f"load-{i}", daemon=True)
                   for i in range(self.args.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
        self.recorder.close()
        print(json.dumps({"requests": self.recorder.count, "failed": self.recorder.failed,
                          "seconds": round(time.monotonic() - self.started, 1)}))
        return 0


# ----------------------------------------------------------------- phases and summary
def append_phase(path: Path, name: str, event: str, when: float | None = None) -> dict[str, Any]:
    record = {"name": name, "event": event, "time": round(time.time() if when is None else when, 4)}
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return record


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def phase_windows(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """``(name, start, end)`` per phase, in the order the phases started; an open phase ends now."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for event in events:
        (starts if event["event"] == "start" else ends)[event["name"]] = float(event["time"])
    return [(name, start, ends.get(name, time.time())) for name, start in sorted(starts.items(), key=lambda kv: kv[1])]


def quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile (q in 0..1) of values, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarise(records: list[dict[str, Any]], windows: list[tuple[str, float, float]]) -> list[dict[str, Any]]:
    """Per phase and overall: counts and latency quantiles of the requests that ended in its window.

    By the end, not the start: a request in flight when a fault is injected fails during the
    fault, and counts there, even when it was sent just before the fault's phase began.
    """
    rows = []
    for name, start, end in windows + [("all", float("-inf"), float("inf"))]:
        chosen = [r for r in records if start <= r["end"] < end]
        latencies = [r["latency"] for r in chosen if r["ok"]]
        p50, p99 = quantile(latencies, 0.50), quantile(latencies, 0.99)
        by_kind = {}
        for kind, streamed in (("plain", False), ("stream", True)):
            kind_latencies = [r["latency"] for r in chosen if r["ok"] and r["stream"] is streamed]
            for q in (50, 99):
                value = quantile(kind_latencies, q / 100)
                by_kind[f"{kind}_p{q}_ms"] = None if value is None else round(value * 1000, 1)
        rows.append({
            "phase": name,
            "requests": len(chosen),
            "ok": sum(1 for r in chosen if r["ok"]),
            "failed": sum(1 for r in chosen if not r["ok"]),
            "streamed": sum(1 for r in chosen if r["stream"]),
            "connect_retries": sum(r.get("connect_retries", 0) for r in chosen),
            "max_refused_secs": max([r.get("refused_secs", 0.0) for r in chosen] or [0.0]),
            "p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "p99_ms": None if p99 is None else round(p99 * 1000, 1),
            "errors": sorted({r["error"] for r in chosen if r["error"]})[:5],
            **by_kind,
        })
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """Requests, failures, connect retries, the longest refused window and latency (all, plain, streamed) per phase."""
    def ms(row: dict[str, Any], key: str) -> str:
        return "-" if row[key] is None else f"{row[key]:.0f}"

    head = (f"{'phase':<22}{'requests':>9}{'failed':>7}{'retried':>8}{'gap s':>7}{'p50 ms':>8}{'p99 ms':>8}"
            f"{'plain p50/p99':>15}{'stream p50/p99':>16}")
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(f"{row['phase']:<22}{row['requests']:>9}{row['failed']:>7}{row['connect_retries']:>8}"
                     f"{row['max_refused_secs']:>7.1f}"
                     f"{ms(row, 'p50_ms'):>8}{ms(row, 'p99_ms'):>8}"
                     f"{ms(row, 'plain_p50_ms') + '/' + ms(row, 'plain_p99_ms'):>15}"
                     f"{ms(row, 'stream_p50_ms') + '/' + ms(row, 'stream_p99_ms'):>16}")
        for error in row["errors"]:
            lines.append(f"    error: {error}")
    return "\n".join(lines)


# ----------------------------------------------------------------- command line
def positive(kind: type, cap: float) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0 or value > cap:
            raise argparse.ArgumentTypeError(f"must be > 0 and <= {cap}, got {text}")
        return value
    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="send load until a bound or the stop file")
    run.add_argument("--url", required=True, help="router base URL (loopback or private address)")
    run.add_argument("--model", required=True, help="served model name")
    run.add_argument("--api-key-file", help="file holding the router's API key (sent as a Bearer token)")
    run.add_argument("--out", required=True, help="JSON lines file, appended")
    run.add_argument("--concurrency", type=positive(int, MAX_CONCURRENCY), default=4)
    run.add_argument("--rate", type=float, default=8.0, help="requests per second in total (0: as fast as possible)")
    run.add_argument("--max-requests", type=positive(int, MAX_REQUESTS_CAP), default=100_000)
    run.add_argument("--max-seconds", type=positive(float, MAX_SECONDS_CAP), default=900.0)
    run.add_argument("--stop-file", help="stop (after in-flight requests) once this file exists")
    run.add_argument("--max-tokens", type=positive(int, 4096), default=8)
    run.add_argument("--timeout", type=positive(float, 600), default=30.0, help="seconds per request")
    run.add_argument("--expect-standin", choices=["decode", "prefill", "null"],
                     help="check each answer's text: the SGLang stand-in's reply from a server of this mode")
    run.add_argument("--connect-retry-secs", type=float, default=30.0,
                     help="resend a request refused at connect for this long (0: never)")
    phase = sub.add_parser("phase", help="record the start or end of a test phase")
    phase.add_argument("--file", required=True)
    phase.add_argument("--name", required=True)
    phase.add_argument("--event", choices=["start", "end"], required=True)
    summary = sub.add_parser("summary", help="requests, failures and p50/p99 latency per phase")
    summary.add_argument("--records", required=True)
    summary.add_argument("--phases", required=True)
    summary.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "phase":
        print(json.dumps(append_phase(Path(args.file), args.name, args.event)))
        return 0
    if args.command == "summary":
        rows = summarise(read_jsonl(Path(args.records)), phase_windows(read_jsonl(Path(args.phases))))
        print(json.dumps(rows) if args.json else format_table(rows))
        return 0
    try:
        generator = Generator(args)
    except ValueError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2

    def _stop(signum: int, _frame: Any) -> None:
        generator.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return generator.run()


if __name__ == "__main__":
    sys.exit(main())
