"""Shared state of one stand-in server, and its one-line stdout log."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sglang import __version__
from sglang._standin.pd import PREFILL_ROOMS, RoomRegistry
from sglang._standin.receiver import DecodeSettings

_LOG_LOCK = threading.Lock()


def log(line: str) -> None:
    """Write one line to stdout and flush it at once (docker logs reads it live)."""
    with _LOG_LOCK:
        sys.stdout.write(f"[sglang-standin] {line}\n")
        sys.stdout.flush()


@dataclass
class ServerState:
    """Parsed arguments, warm-up deadline and counters, shared by all handler threads."""

    args: argparse.Namespace
    warmup_secs: float
    token_delay_secs: float
    # SGLang's SGLANG_HEALTH_CHECK_TIMEOUT (http_server.py, 0.5.14): how long a health check waits
    # for its one token before it answers 503.
    health_timeout_secs: float = 20.0
    # SIGTERM: SGLang's gracefully_exit. Health answers 503; requests are still served until none is left.
    exiting: bool = False
    ready_at: float = 0.0
    requests_served: int = 0
    # Requests to the prefill's bootstrap server (its own registration included).
    bootstrap_connections: int = 0
    # KV caches sent (prefill) or received (decode).
    kv_transfers: int = 0
    # Decode: how it waits for a prefill (SGLANG_DISAGGREGATION_WAITING_TIMEOUT, the bootstrap retry interval).
    decode_settings: DecodeSettings = field(default_factory=DecodeSettings)
    # Prefill: the bootstrap rooms of the requests received, shared with the bootstrap listener.
    rooms: RoomRegistry = field(default=PREFILL_ROOMS, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Set while the scheduler generates; cleared by the stall fault (SIGUSR2): HTTP still answers,
    # no token comes out.
    scheduler: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        """Not ready until the server listens and its warm-up has passed (start_warmup)."""
        self.ready_at = float("inf")
        self.scheduler.set()

    def toggle_stall(self) -> bool:
        """Stall the scheduler, or resume it; True when it is stalled now."""
        if self.scheduler.is_set():
            self.scheduler.clear()
            return True
        self.scheduler.set()
        return False

    def one_token(self, timeout: float | None) -> bool:
        """Push one token through the scheduler: False when none came within timeout (stalled)."""
        return self.scheduler.wait(timeout)

    def start_warmup(self) -> None:
        """Start the warm-up clock: the server listens now, and answers 503 until it has passed."""
        self.ready_at = time.monotonic() + self.warmup_secs

    def end_warmup(self) -> None:
        """End the warm-up now (SIGUSR1: tests wait on this event, not on a clock)."""
        self.ready_at = min(self.ready_at, time.monotonic())

    @property
    def mode(self) -> str:
        """Disaggregation mode: null, prefill or decode."""
        return str(self.args.disaggregation_mode)

    def ready(self) -> bool:
        """True once the warm-up has passed."""
        return time.monotonic() >= self.ready_at

    def count_request(self) -> None:
        """Count one generation request answered successfully."""
        with self._lock:
            self.requests_served += 1

    def count_bootstrap_connection(self) -> None:
        """Count one request to the prefill bootstrap server."""
        with self._lock:
            self.bootstrap_connections += 1

    def count_kv_transfer(self) -> None:
        """Count one KV cache sent (prefill) or received (decode)."""
        with self._lock:
            self.kv_transfers += 1

    def server_info(self) -> dict[str, Any]:
        """Body of GET /get_server_info: the parsed server args (keys left out), the version and the counters."""
        info: dict[str, Any] = {k: v for k, v in vars(self.args).items() if k not in ("api_key", "admin_api_key")}
        with self._lock:
            info.update(
                version=__version__,
                standin=True,
                standin_requests_served=self.requests_served,
                standin_bootstrap_connections=self.bootstrap_connections,
                standin_kv_transfers=self.kv_transfers,
            )
        return info
