"""One worker per pod: runs on that pod never overlap, and requests that arrive meanwhile coalesce.

It decides nothing; it calls its host's ``run_pod`` within the global bound on pods in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Protocol

from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import ReloadReason, strongest
from pulumi_lora._resync._views import Key
from pulumi_lora._resync._world import World


class Host(Protocol):
    """What a worker needs of the controller."""

    world: World
    stopping: bool
    pods_in_flight: asyncio.Semaphore

    async def run_pod(self, worker: PodWorker, reason: ReloadReason) -> None:
        """One run on the worker's pod."""


class PodWorker:
    """Serializes the runs of one pod: requests coalesce, one run at a time."""

    def __init__(self, key: Key, controller: Host) -> None:
        self.key = key
        self.reasons: set[ReloadReason] = set()
        self.running = False
        self.closed = False
        self._controller = controller
        self._wake = asyncio.Event()
        self._waiters: list[asyncio.Future[None]] = []
        self._retry: asyncio.TimerHandle | None = None
        self.task = asyncio.create_task(self._loop(), name=f"pod {key[0]}/{key[1]}")

    def request(self, reason: ReloadReason) -> asyncio.Future[None]:
        """Ask for a run; the future completes when a run that covers this request ends."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reasons.add(reason)
        self._waiters.append(future)
        self._wake.set()
        return future

    def retry_in(self, delay: float, reason: ReloadReason) -> None:
        """Schedule a retry (after a retryable failure), replacing any scheduled one."""
        if self._retry is not None:
            self._retry.cancel()
        self._retry = asyncio.get_running_loop().call_later(delay, self.request, reason)

    def close(self) -> None:
        """Stop, letting a run in flight finish (the pod is gone, or the loop stops)."""
        self.closed = True
        if self._retry is not None:
            self._retry.cancel()
        if self.running:
            self._wake.set()
        else:
            self.task.cancel()
        self._resolve(self._waiters)
        self._waiters = []

    async def _loop(self) -> None:
        controller = self._controller
        while not (self.closed or controller.stopping):
            await self._wake.wait()
            self._wake.clear()
            if not self.reasons or self.closed or controller.stopping:
                self._resolve(self._waiters)
                self._waiters = []
                continue
            state = controller.world.pods.get(self.key)
            reasons, self.reasons = self.reasons, set()
            waiters, self._waiters = self._waiters, []
            if state is None:
                self._resolve(waiters)
                return
            if reasons == {ReloadReason.VERIFY} and state.not_before > time.monotonic():
                self._resolve(waiters)  # backing off: the scheduled retry comes first
                continue
            try:
                async with controller.pods_in_flight:
                    self.running = True
                    await controller.run_pod(self, strongest(reasons))
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one run must not end the pod's worker
                logs.failure("pod_run_crashed", pod=f"{self.key[0]}/{self.key[1]}")
            finally:
                self.running = False
                self._resolve(waiters)

    @staticmethod
    def _resolve(waiters: Iterable[asyncio.Future[None]]) -> None:
        for future in waiters:
            if not future.done():
                future.set_result(None)
