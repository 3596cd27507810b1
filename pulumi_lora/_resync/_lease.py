"""Leader election with a ``coordination.k8s.io/v1`` Lease, so replicas never act at once.

client-go's algorithm: writes carry the resourceVersion read, and a leader that could not renew
for ``renew_deadline`` stops acting before anyone may take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import LeaseMove, LeaseRecord, lease_move
from pulumi_lora._resync._kube import jitter
from pulumi_lora._resync._settings import LeaseSettings

#: Seconds the release may take on shutdown: within the pod's 30 s grace after the 20 s drain,
#: whatever the renew deadline (a Lease not released simply expires).
RELEASE_TIMEOUT = 5.0


def _micro_now() -> datetime:
    """Now, as a ``MicroTime``. lightkube's encoder drops a zero fraction ("…:05Z"), which the
    apiserver's MicroTime parser rejects, so the fraction is never zero."""
    now = datetime.now(UTC)
    return now if now.microsecond else now.replace(microsecond=1)


def _record(lease: Any) -> LeaseRecord | None:
    if lease is None:
        return None
    spec = lease.spec or LeaseSpec()
    renew = spec.renewTime
    return LeaseRecord(
        holder=spec.holderIdentity or None,
        duration=float(spec.leaseDurationSeconds or 0),
        renew_time=renew.isoformat() if isinstance(renew, datetime) else renew,
        transitions=int(spec.leaseTransitions or 0),
    )


class LeaderElector:
    """Holds (or waits for) the Lease; ``is_leader`` says whether this replica may act."""

    def __init__(self, client: AsyncClient, settings: LeaseSettings) -> None:
        self.settings = settings
        self.is_leader = False
        self.contacted = False  # at least one round reached the apiserver
        self.changed = asyncio.Event()  # set whenever ``is_leader`` flips
        self._client = client
        self._seen: tuple[object, ...] | None = None
        self._seen_at = time.monotonic()
        self._renewed_at = 0.0
        self._written: Lease | None = None  # the Lease as our last write left it

    async def run(self, stop: asyncio.Event) -> None:
        """Take part in the election until ``stop`` is set (then the caller releases)."""
        settings = self.settings
        # One round's budget: short enough to retry well within the renew deadline, never so
        # short that a busy apiserver (a second or so) makes every round fail.
        attempt = min(
            settings.renew_deadline,
            max(1.5, min(settings.renew_deadline / 2, settings.retry_period * 2)),
        )
        while not stop.is_set():
            held: bool | None
            try:
                async with asyncio.timeout(attempt):
                    held = await self._round()
                self.contacted = True
            except Exception as exc:  # apiserver away: keep the lease until the deadline
                held = None
                error = f"{type(exc).__name__}: {exc}"[:300]
                logs.event("lease_round_failed", 30, lease=settings.name, error=error)
            now = time.monotonic()
            if held:
                self._renewed_at = now
                self._set(True)
            elif held is False or (
                self.is_leader and now - self._renewed_at > settings.renew_deadline
            ):
                self._set(False)
            pause = settings.retry_period * (0.9 + 0.2 * jitter())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)

    async def _round(self) -> bool:
        """One read and, if the rule says so, one write; True while we hold the Lease.

        The leader first renews the copy it last wrote, without reading (client-go's fast path:
        one request a round instead of two); a conflict or any error falls back to the read.
        """
        if self.is_leader and self._written is not None:
            try:
                return await self._write(self._claimed(self._written, None, LeaseMove.RENEW))
            except Exception as exc:  # a conflict, or the apiserver away: the slow path decides
                self._written = None
                logs.event("lease_fast_renew_failed", logging.DEBUG, error=f"{exc}"[:300])
        settings = self.settings
        try:
            lease = await self._client.get(Lease, settings.name, namespace=settings.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            lease = None
        record = _record(lease)
        now = time.monotonic()
        seen = (
            None
            if lease is None or lease.metadata is None
            else (lease.metadata.resourceVersion, record)
        )
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        move = lease_move(record, settings.identity, now - self._seen_at)
        if move is LeaseMove.WAIT:
            return False
        try:
            if lease is None or move is LeaseMove.CREATE:
                return await self._write(self._fresh_lease(), create=True)
            return await self._write(self._claimed(lease, record, move))
        except ApiError as exc:
            if exc.status.code in (404, 409):  # someone else wrote first: not ours this round
                return False
            raise

    async def _write(self, lease: Lease, *, create: bool = False) -> bool:
        """Create or conditionally replace the Lease; remember what was written (the fast
        path renews it next round) and count it as seen now (standby expiry starts here)."""
        if create:
            written = await self._client.create(lease)
        else:
            written = await self._client.replace(lease)
        self._written = written
        if written.metadata is not None:
            self._seen = (written.metadata.resourceVersion, _record(written))
            self._seen_at = time.monotonic()
        return True

    def _fresh_lease(self) -> Lease:
        settings, stamp = self.settings, _micro_now()
        return Lease(
            metadata=ObjectMeta(name=settings.name, namespace=settings.namespace),
            spec=LeaseSpec(
                holderIdentity=settings.identity,
                leaseDurationSeconds=round(settings.duration),
                acquireTime=stamp,
                renewTime=stamp,
                leaseTransitions=0,
            ),
        )

    def _claimed(self, lease: Lease, record: LeaseRecord | None, move: LeaseMove) -> Lease:
        """``lease`` renewed by us, or taken over (its resourceVersion kept: a conditional PUT)."""
        settings, stamp = self.settings, _micro_now()
        spec = lease.spec or LeaseSpec()
        if move is LeaseMove.TAKE_OVER:
            spec.acquireTime = stamp
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
            logs.event("lease_taken_over", lease=settings.name, previous=record and record.holder)
        spec.holderIdentity = settings.identity
        spec.leaseDurationSeconds = round(settings.duration)
        spec.renewTime = stamp
        lease.spec = spec
        if lease.metadata is not None:
            lease.metadata.managedFields = None
        return lease

    def _set(self, leader: bool, *, released: bool = False) -> None:
        if leader != self.is_leader:
            self.is_leader = leader
            self.changed.set()
            if not leader:
                self._written = None  # the next round reads before it writes
            if leader:
                name, level = "leadership_acquired", logging.INFO
            else:
                name, level = (
                    ("leadership_released", logging.INFO)
                    if released
                    else (
                        "leadership_lost",
                        logging.WARNING,
                    )
                )
            logs.event(name, level, lease=self.settings.name, identity=self.settings.identity)

    async def release(self) -> None:
        """Give the Lease up (holder cleared) so a standby takes over at once; best effort."""
        if not self.is_leader:
            return
        self._set(False, released=True)
        settings = self.settings
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT):
                lease = await self._client.get(Lease, settings.name, namespace=settings.namespace)
                if lease.spec is None or lease.spec.holderIdentity != settings.identity:
                    return
                lease.spec.holderIdentity = None
                lease.spec.leaseDurationSeconds = 1
                lease.spec.renewTime = _micro_now()
                if lease.metadata is not None:
                    lease.metadata.managedFields = None
                await self._client.replace(lease)
            logs.event("lease_released", lease=settings.name)
        except Exception as exc:  # the Lease then simply expires
            error = f"{type(exc).__name__}: {exc}"[:300]
            logs.event("lease_release_failed", 30, lease=settings.name, error=error)
