"""The stand-in reports requests in flight (GET /get_load, /metrics), so drains can be tested."""

from __future__ import annotations

import http.client
import json
import re
import sys
import time
from collections.abc import Callable

import pytest

from test_standin import Standin, fixture_start  # noqa: F401  pylint: disable=unused-import

# SGLang serves /metrics only when started with --enable-metrics.
METRICS = ("--enable-metrics",)

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason="the stand-in needs Python 3.10 or later")


def in_flight(standin: Standin) -> tuple[int, int]:
    """(num_reqs of /get_load, num_running_reqs of /metrics)."""
    status, load = standin.json("GET", "/get_load")
    assert status == 200
    status, raw = standin.request("GET", "/metrics")
    assert status == 200
    match = re.search(r"^sglang:num_running_reqs\{[^}]*\} (\d+)$", raw.decode(), re.M)
    assert match, raw
    return sum(rank["num_reqs"] + rank["num_waiting_reqs"] for rank in load), int(match.group(1))


def test_idle_server_reports_nothing_in_flight(start: Callable[..., Standin]) -> None:
    standin = start(extra=METRICS)
    status, load = standin.json("GET", "/get_load")
    assert status == 200
    assert load == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]
    assert in_flight(standin) == (0, 0)


def test_streaming_request_counts_until_it_ends(start: Callable[..., Standin]) -> None:
    standin = start(extra=METRICS, token_delay=0.2)
    conns = [http.client.HTTPConnection("127.0.0.1", standin.port, timeout=10) for _conn in range(2)]
    try:
        for conn in conns:
            conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                         body=json.dumps({"messages": [{"role": "user", "content": "a b c d"}], "stream": True}))
        responses = [conn.getresponse() for conn in conns]
        assert [r.status for r in responses] == [200, 200]
        assert in_flight(standin) == (2, 2)
        for resp in responses:
            resp.read()
    finally:
        for conn in conns:
            conn.close()
    deadline = time.monotonic() + 5
    while in_flight(standin) != (0, 0):
        assert time.monotonic() < deadline, "the finished requests are still counted"
        time.sleep(0.05)


def test_failed_request_is_not_left_in_flight(start: Callable[..., Standin]) -> None:
    standin = start(extra=METRICS)
    status = standin.request("POST", "/v1/chat/completions", {"messages": "not a list"})[0]
    assert status == 400
    assert in_flight(standin) == (0, 0)
