"""controller-runtime's work queue as LLMKube's controller runs it, played: one key at a time,
events queued at once, errors requeued by the default rate limiter, ``RequeueAfter`` delays.

The default limiter (``workqueue.DefaultTypedControllerRateLimiter``; LLMKube's
``SetupWithManager`` sets no other) is the larger of a per-key exponential back-off (5 ms
doubling per failure, up to 1000 s) and one bucket shared by every key (10 per second, a burst
of 100). ``time_scale`` shrinks every delay, for tests that need many of the controller's cycles.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

__all__ = ["BACKOFF_BASE_SECONDS", "BACKOFF_MAX_SECONDS", "Bucket", "Key", "WorkQueue"]

BACKOFF_BASE_SECONDS = 0.005
BACKOFF_MAX_SECONDS = 1000.0
BUCKET_RATE = 10.0
BUCKET_BURST = 100

Key = tuple[str, str]
"""A namespace and a name."""


class Bucket:
    """``golang.org/x/time/rate``'s limiter as workqueue's ``BucketRateLimiter`` uses it: every
    rate-limited requeue reserves a token, and waits until the bucket would have held it."""

    def __init__(self, rate: float = BUCKET_RATE, burst: int = BUCKET_BURST) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._at: float | None = None

    def reserve(self, now: float) -> float:
        """Take a token at ``now`` (seconds); how long to wait for it."""
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= 1
        return max(0.0, -self._tokens / self.rate)


class WorkQueue:
    """Keys ready now (each once, in order) and keys due later; one consumer thread."""

    def __init__(
        self, time_scale: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.time_scale = time_scale
        self._clock = clock
        self._ready: list[Key] = []
        self._waiting: list[tuple[float, Key]] = []  # heap of (due, key)
        self._failures: dict[Key, int] = {}
        self._bucket = Bucket()

    def add(self, key: Key) -> None:
        """Queue ``key`` now (a watch event), unless it is already waiting to be taken."""
        if key not in self._ready:
            self._ready.append(key)

    def add_after(self, key: Key, seconds: float) -> None:
        """Queue ``key`` after ``seconds`` of the controller's time (``RequeueAfter``)."""
        heapq.heappush(self._waiting, (self._clock() + seconds * self.time_scale, key))

    def add_rate_limited(self, key: Key) -> float:
        """Queue ``key`` after a failure, as the default limiter says; returns the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = max(
            min(BACKOFF_BASE_SECONDS * 2.0**failures, BACKOFF_MAX_SECONDS),
            self._bucket.reserve(self._clock() / self.time_scale),
        )
        self.add_after(key, delay)
        return delay

    def holds(self, key: Key) -> bool:
        """Whether ``key`` waits to be taken, now or later."""
        return key in self._ready or any(k == key for _, k in self._waiting)

    def forget(self, key: Key) -> None:
        """Reset ``key``'s back-off (a reconcile that succeeded or asked for ``RequeueAfter``)."""
        self._failures.pop(key, None)

    def get(self) -> Key | None:
        """The next key to reconcile, or None when none is ready."""
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            _, key = heapq.heappop(self._waiting)
            self.add(key)
        return self._ready.pop(0) if self._ready else None

    def idle_for(self, longest: float) -> float:
        """How long to sleep before the next delayed key is due (at most ``longest``)."""
        if not self._waiting:
            return longest
        return max(0.0, min(self._waiting[0][0] - self._clock(), longest))
