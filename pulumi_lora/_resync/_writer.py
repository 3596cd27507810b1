"""The CR status writer: recompute what changed, write only what differs.

Server-side applies as ``pulumi-lora-resync``. Skips a CR the provider holds (docs/protocol.md
rule 2) or whose serving pods have no outcome for its generation yet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from pulumi_lora._core._reconcile import extra_arg_value
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import Permission, capacity_message, permission
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._status import (
    adapter_status,
    rolled_back,
    same_status,
    stored_status,
)
from pulumi_lora._resync._views import Key
from pulumi_lora._resync._world import World

#: Seconds the writer waits after the first dirty mark, so a burst becomes one pass.
STATUS_COALESCE = 0.02
#: Seconds before a failed status write is tried again.
STATUS_RETRY = 1.0


class StatusWriter:
    """Writes the status of the CRs marked dirty; run :meth:`run` in a task."""

    def __init__(
        self,
        world: World,
        kube: Kube,
        metrics: Metrics,
        concurrency: int,
        settled: Callable[[Iterable[Key]], None] = lambda _: None,
        *,
        lease: tuple[str, str] | None = None,
    ) -> None:
        """``settled(crs)`` is told of every CR whose status was computed (written or not);
        ``lease`` (namespace, name: the leader's) is named in each CR's ``ResyncLoop`` condition."""
        self._world = world
        self._kube = kube
        self._metrics = metrics
        self._concurrency = concurrency
        self._settled = settled
        self._lease = lease
        self._dirty: set[Key] = set()
        self._dirty_event = asyncio.Event()

    def mark(self, keys: Iterable[Key]) -> None:
        """These CRs' inputs changed: recompute (and maybe write) their status soon."""
        before = len(self._dirty)
        self._dirty.update(keys)
        if len(self._dirty) != before:
            self._dirty_event.set()

    async def run(self) -> None:
        """Write statuses as CRs are marked, forever."""
        while True:
            await self._dirty_event.wait()
            await asyncio.sleep(STATUS_COALESCE)
            await self.flush()

    async def flush(self) -> None:
        """Write the status of every CR marked so far."""
        self._dirty_event.clear()
        keys, self._dirty = self._dirty, set()
        if not keys:
            return
        gate = asyncio.Semaphore(self._concurrency)
        await asyncio.gather(*(self._write_status(key, gate) for key in sorted(keys)))

    async def _write_status(self, key: Key, gate: asyncio.Semaphore) -> None:
        cr = self._world.crs.get(key)
        now = datetime.now(UTC)
        if cr is None or permission(cr.operation, now) is not Permission.ACT:
            return  # gone, or the provider's to report (docs/protocol.md rule 2)
        availability = self._world.availability(cr)
        outcomes = self._world.outcomes_for(cr) if availability.ok else None
        if availability.ok and outcomes is None:
            return  # a run for this generation is still to come: it marks the CR again
        notes = self._world.capacity_notes(cr.target)
        over = None
        if notes:
            target = self._world.targets.get(cr.target)
            limit = extra_arg_value(target.extra_args, "--max-loaded-loras") if target else None
            declared = [n for n, _ in self._world.declared_for(cr.target)]
            over = capacity_message("/".join(cr.target), limit, declared, notes)
        status = adapter_status(
            generation=cr.generation,
            policy=cr.policy,
            outcomes=outcomes,
            availability=availability,
            stored=stored_status(cr.status),
            path=self._world.reverts.path(cr),
            over_capacity=over,
            last_loaded=self._world.last_loaded.get(key),
            now=now,
            lease=self._lease,
        )
        revert = self._world.reverts.active(cr)
        if revert is not None and outcomes is not None:
            status = rolled_back(
                status,
                revert,
                adapter=cr.adapter_name,
                pods=outcomes,
                generation=cr.generation,
                now=now,
            )
        wire = status.wire()
        if same_status(wire, cr.status):
            self._settled([key])
            return
        async with gate:
            try:
                with self._metrics.write_seconds.labels("status").time():
                    stored = await self._kube.apply_status(cr.namespace, cr.name, wire)
            except Exception as exc:  # apiserver away, or the CR just went: try again soon
                logs.event(
                    "status_write_failed", logging.WARNING, cr="/".join(key), error=str(exc)[:300]
                )
                asyncio.get_running_loop().call_later(STATUS_RETRY, self.mark, [key])
                return
        self._metrics.status_writes.inc()
        current = self._world.crs.get(key)
        if current is not None and current.uid == cr.uid:
            self._world.put_cr(dataclasses.replace(current, status=stored.get("status") or {}))
        self._settled([key])
