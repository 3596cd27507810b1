"""Looks at the cluster shared by the concurrent operations of one provider process.

To keep drift detection exact, a look lives at most ``max_age`` seconds from its start and this
process's own writes retire it. Standard library only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class _Look(Generic[V]):
    """One look: its value, when it started, the scope's generation it belongs to."""

    value: V
    started: float
    generation: int


class SharedViews(Generic[K, V]):
    """A process-wide, bounded-age, single-flight cache of looks, keyed by ``K``.

    Each key belongs to a *scope* (``scope_of(key)``, e.g. one InferenceService on one
    cluster); invalidation works per scope, so one write retires every look at that target
    whatever credentials or transport it was taken with. Thread-safe.
    """

    def __init__(
        self,
        max_age: float,
        scope_of: Callable[[K], Hashable],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_age = max_age
        self._scope_of = scope_of
        self._clock = clock
        self._lock = threading.Lock()
        self._looks: dict[K, _Look[V]] = {}
        self._pending: dict[tuple[K, int], Future[V]] = {}
        self._generations: dict[Hashable, int] = {}

    def get(self, key: K, take: Callable[[], V]) -> V:
        """A look at ``key`` no older than ``max_age`` and newer than the last invalidation.

        Reuses a stored look, joins one being taken, or takes one with ``take()`` (on this
        thread, outside the lock).
        """
        scope = self._scope_of(key)
        with self._lock:
            generation = self._generations.get(scope, 0)
            look = self._looks.get(key)
            if (
                look is not None
                and look.generation == generation
                and self._clock() - look.started < self.max_age
            ):
                return look.value
            pending = self._pending.get((key, generation))
            if pending is None:
                mine: Future[V] = Future()
                self._pending[(key, generation)] = mine
        if pending is not None:
            return pending.result()
        started = self._clock()
        try:
            value = take()
        except BaseException as exc:
            with self._lock:
                del self._pending[(key, generation)]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._pending[(key, generation)]
            if self._generations.get(scope, 0) == generation:
                self._looks[key] = _Look(value, started, generation)
        mine.set_result(value)
        return value

    def generation(self, scope: Hashable) -> int:
        """How many times ``scope`` was invalidated: unchanged means no own write since."""
        with self._lock:
            return self._generations.get(scope, 0)

    def invalidate(self, scope: Hashable) -> None:
        """Retire every look of ``scope``, stored or being taken (this process just wrote)."""
        with self._lock:
            self._generations[scope] = self._generations.get(scope, 0) + 1
            for key in [k for k in self._looks if self._scope_of(k) == scope]:
                del self._looks[key]


class OwnWrites(Generic[K, V]):
    """What this process itself wrote, and when: laid over a shared listing taken before it.

    A listing shared for its max age can predate this process's own writes; invalidating it on
    every write would make each of N concurrent creates list again. Instead, each write is
    recorded (``None``: deleted) and ``since(started)`` returns the writes a listing that
    started then may lack. Writes older than ``keep`` (the listing's max age) can't matter to a
    listing still in use and are forgotten. Thread-safe.
    """

    def __init__(self, keep: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.keep = keep
        self._clock = clock
        self._lock = threading.Lock()
        self._writes: dict[K, tuple[float, V | None]] = {}

    def record(self, key: K, value: V | None) -> None:
        """This process just wrote ``value`` at ``key`` (None: deleted it)."""
        now = self._clock()
        with self._lock:
            self._writes[key] = (now, value)
            for old in [k for k, (at, _) in self._writes.items() if now - at > self.keep]:
                del self._writes[old]

    def since(self, started: float) -> dict[K, V | None]:
        """The writes that finished at or after ``started`` (a listing's start), by key."""
        with self._lock:
            return {k: v for k, (at, v) in self._writes.items() if at >= started}
