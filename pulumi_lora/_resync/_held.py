"""The loop finishes the deletes a failed ``pulumi destroy`` left (docs/protocol.md rule 4).

The provider's delete holds its CR with pulumi-lora's finalizer (``pulumi-lora.dev/unload``)
until every Ready pod has unloaded the adapter; a pod that refuses leaves the CR being deleted,
held. A retried ``pulumi destroy`` or ``pulumi-lora finish-delete`` finishes it; where the loop
runs, the loop does too, so an abandoned stack's held CR (its namespace being deleted, say) never
waits for a person:

1. once the provider's ``delete@`` operation is past its lease (rule 2: the provider may still
   be unloading before then), queue the unload of the adapter on every pod of the target, unless
   another CR claims the name there (rule 5), through the pods' own workers (their backoff, API
   key and Events);
2. once no serving pod has that unload pending, remove the finalizer: the apiserver then deletes
   the CR (or LLMKube's finalizer, which its controller drops by itself, does).

The CR is out of the world meanwhile (a CR being deleted declares nothing: no loads, no status).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pulumi_lora._models import UNLOAD_FINALIZER
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import ReloadReason, backoff_delay, lease_left
from pulumi_lora._resync._kube import Kube, jitter
from pulumi_lora._resync._views import AdapterCR, Key
from pulumi_lora._resync._world import World

__all__ = ["HeldDeletes", "is_held"]

#: How often a finishing delete looks whether the pods' unloads are done, in seconds.
POLL_SECONDS = 0.2


def is_held(obj: Mapping[str, Any]) -> bool:
    """Pure: whether a LoRAAdapter is being deleted and held by pulumi-lora's finalizer."""
    meta = obj.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and UNLOAD_FINALIZER in (
        meta.get("finalizers") or []
    )


class HeldDeletes:
    """One task per held CR: wait out the provider's lease, unload everywhere, let the CR go."""

    def __init__(
        self,
        world: World,
        kube: Kube,
        request: Callable[[list[Key], ReloadReason], object],
        synced: Callable[[], bool],
        poll: float = POLL_SECONDS,
    ) -> None:
        self._world = world
        self._synced = synced
        self._kube = kube
        self._request = request
        self._poll = poll
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        self._releasing: set[Key] = set()  # its finalizer is coming off: let the task end

    def hold(self, cr: AdapterCR) -> None:
        """A held CR was seen: finish its delete (once per CR; it leaves the world now)."""
        self._world.remove_cr(cr.key)
        running = self._tasks.get(cr.key)
        if running is not None and not running.done():
            return
        delay = lease_left(cr.operation, datetime.now(UTC))
        logs.event("held_delete_seen", cr="/".join(cr.key), acts_in_seconds=round(delay, 1))
        self._tasks[cr.key] = asyncio.create_task(
            self._finish(cr, delay), name=f"finish {'/'.join(cr.key)}"
        )

    def forget(self, key: Key) -> None:
        """The CR is gone: stop finishing it (unless that is this task's own doing)."""
        task = self._tasks.pop(key, None)
        if task is not None and key not in self._releasing:
            task.cancel()

    def cancel_all(self) -> None:
        """The loop stops (or loses the lead): a new leader picks the held CRs up again."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    async def _finish(self, cr: AdapterCR, delay: float) -> None:
        where = "/".join(cr.key)
        await asyncio.sleep(delay)
        while not self._synced():  # the pods are listed after the CRs: know them all first
            await asyncio.sleep(self._poll)
        pods = self._world.queue_unloads(cr)
        self._request(pods, ReloadReason.CR_CHANGE)
        while self._pending(cr):
            await asyncio.sleep(self._poll)
        self._releasing.add(cr.key)
        try:
            await self._release(cr)
        finally:
            self._releasing.discard(cr.key)
        logs.event("held_delete_finished", cr=where, adapter=cr.adapter_name, pods=len(pods))

    async def _release(self, cr: AdapterCR) -> None:
        """Remove the finalizer; on failure say what to do and try again, backing off."""
        namespace, name = cr.key
        failures = 0
        while True:
            try:
                await self._kube.release_finalizer(namespace, name, UNLOAD_FINALIZER)
                return
            except Exception as exc:  # forbidden, or the apiserver is away: say what to do
                failures += 1
                where = f"{namespace}/{name}"
                logs.event(
                    "held_delete_stuck",
                    logging.WARNING,
                    cr=where,
                    error=str(exc)[:300],
                    fix="grant the loop get and patch on loraadapters (resync_manifests does "
                    f"with llmkube_coexistence=True), or run `pulumi-lora finish-delete {where}`",
                )
                await asyncio.sleep(backoff_delay(failures, jitter(), base=1.0, cap=300.0))

    def _pending(self, cr: AdapterCR) -> bool:
        """Whether a serving pod of the target still has the adapter's unload to do."""
        return any(
            cr.adapter_name in self._world.pods[key].unloads
            for key in self._world.serving_pods([cr.target])
        )
