"""Requests in flight, as SGLang reports them: ``GET /get_load`` and the ``/metrics`` gauges.

Tests only. Scale-in and rolling upgrades drain a worker (wait until nothing is in
flight) before stopping it; these numbers let the tests see that wait happen.
"""

from __future__ import annotations

import threading
from types import TracebackType


class InFlight:
    """Count of generation requests being answered; ``with counter:`` around each one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def __enter__(self) -> InFlight:
        with self._lock:
            self._count += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._lock:
            self._count -= 1

    @property
    def value(self) -> int:
        """Requests in flight now."""
        with self._lock:
            return self._count


def load_body(in_flight: int) -> list[dict[str, int]]:
    """Body of ``GET /get_load``: one entry per data-parallel rank (the stand-in has one)."""
    return [{"dp_rank": 0, "num_reqs": in_flight, "num_waiting_reqs": 0, "num_tokens": 0}]
