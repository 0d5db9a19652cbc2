"""Circuit breakers for what a web request asks of Redis: skip a call that just failed.

A broker or cache that is down answers at once; one that is frozen answers nothing, and
every request that asks waits for its timeout. After a failure a breaker is open for
``cooldown_s``: the calls are skipped at once (the caller does without: no early tick,
no throttle count). When the cooldown ends the next call tries again; its failure opens
the breaker for another cooldown. Per process (each web process finds out on its own),
thread-safe. docs/operations.md, "A dead broker", "A frozen broker".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Seconds the request path leaves the cache alone after one of its calls failed.
CACHE_BREAKER_S = 10.0


class CircuitBreaker:
    def __init__(self, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown_s = cooldown_s
        self.clock = clock
        self._lock = threading.Lock()
        self._open_until: float | None = None

    def allow(self) -> bool:
        """May the call be made now (closed, or the cooldown is over)?"""
        until = self._open_until
        return until is None or self.clock() >= until

    def record(self, *, ok: bool) -> None:
        """The call's outcome: a success closes the breaker, a failure opens it."""
        if ok and self._open_until is None:
            return  # the usual case, on every request: no lock
        with self._lock:
            self._open_until = None if ok else self.clock() + self.cooldown_s

    @property
    def is_open(self) -> bool:
        return self._open_until is not None


#: The Django cache as web requests use it: the API's throttles, the early-tick debounce.
cache_breaker = CircuitBreaker(CACHE_BREAKER_S)
