"""Finishes the deletes a failed ``pulumi destroy`` left: held CRs (docs/protocol.md rule 4).

Past the ``delete@`` lease, unload the adapter from every pod that may serve it, Ready or not,
unless another CR claims the name; only then remove the finalizer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._models import UNLOAD_FINALIZER
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import ReloadReason, backoff_delay, lease_left
from pulumi_lora._resync._kube import Kube, jitter
from pulumi_lora._resync._podrun import run_pod
from pulumi_lora._resync._views import AdapterCR, Key, SecretRef
from pulumi_lora._resync._world import PodRecord, PodWork, Unload, World
from pulumi_lora._settings import ClientTimeouts

__all__ = ["HeldDeletes", "is_held", "may_serve"]

#: How often a finishing delete looks whether the pods' unloads are done, in seconds.
POLL_SECONDS = 0.2
#: The loop's backoff (``ResyncSettings`` defaults) for direct unloads and finalizer releases.
BACKOFF_BASE, BACKOFF_CAP = 1.0, 300.0
#: Pod phases in which a pod's server may still run: ``Unknown`` is a node out of touch.
ALIVE_PHASES = frozenset({"Running", "Unknown"})


def is_held(obj: Mapping[str, Any]) -> bool:
    """Pure: whether a LoRAAdapter is being deleted and held by pulumi-lora's finalizer."""
    meta = obj.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and UNLOAD_FINALIZER in (
        meta.get("finalizers") or []
    )


def may_serve(facts: PodEndpoint) -> bool:
    """Pure: whether the pod's server may still serve what was loaded into it: Ready, or not
    Ready with its container running or its phase ``Running``/``Unknown`` (a failing probe, a
    terminating pod, a node out of touch). Pending, Succeeded or Failed (evicted) pods run no
    server; a server that restarted is a new record with nothing queued (``World.put_pod``)."""
    phase = facts.state.partition(",")[0].strip()
    return facts.serving or facts.started_at is not None or phase in ALIVE_PHASES


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
        self._releasing: set[Key] = set()  # its finalizer patch is in flight: let the task end

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
        """The CR is gone: stop finishing it (unless that is this task's own patch landing)."""
        task = self._tasks.pop(key, None)
        if task is not None and key not in self._releasing:
            task.cancel()

    def cancel_all(self) -> None:
        """The loop stops (or loses the lead): a new leader picks the held CRs up again."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    async def _finish(self, cr: AdapterCR, delay: float) -> None:
        await asyncio.sleep(delay)
        while not self._synced():  # the pods are listed after the CRs: know them all first
            await asyncio.sleep(self._poll)
        pods = self._world.queue_unloads(cr)
        self._request(pods, ReloadReason.CR_CHANGE)
        await self._unload_everywhere(cr)
        released = await self._release(cr)
        logs.event(
            "held_delete_finished",
            cr="/".join(cr.key),
            adapter=cr.adapter_name,
            pods=len(pods),
            released=released,  # False: the CR was gone, or someone else let it go
        )

    def _holders(self, cr: AdapterCR) -> list[PodRecord]:
        """The target's pods that still have the adapter's unload to do and may serve it."""
        return [
            state
            for state in self._world.pods_of(cr.target)
            if cr.adapter_name in state.unloads and may_serve(state.facts)
        ]

    async def _unload_everywhere(self, cr: AdapterCR) -> None:
        """Wait until no pod holds the adapter; unload the pods that are not Ready directly
        (Ready ones are their workers'), each retried with the loop's backoff."""
        failures: dict[str, int] = {}  # pod UID → consecutive direct failures
        not_before: dict[str, float] = {}  # pod UID → monotonic time of its next attempt
        waiting: list[str] = []
        while holders := self._holders(cr):
            now = time.monotonic()
            due = [
                s
                for s in holders
                if not s.facts.serving and s.facts.ip and not_before.get(s.facts.uid, 0.0) <= now
            ]
            for state, outcome in zip(
                due, await asyncio.gather(*(self._unload_one(cr, s) for s in due)), strict=True
            ):
                uid = state.facts.uid
                if not outcome.error:
                    if self._world.pods.get(state.facts.key) is state:
                        state.unloaded(cr.adapter_name)
                    continue
                failures[uid] = failures.get(uid, 0) + 1
                not_before[uid] = time.monotonic() + backoff_delay(
                    failures[uid], jitter(), base=BACKOFF_BASE, cap=BACKOFF_CAP
                )
            names = sorted(s.facts.name for s in self._holders(cr) if not s.facts.serving)
            if names and names != waiting:
                where = "/".join(cr.key)
                logs.event(
                    "held_delete_waiting",
                    logging.WARNING,
                    cr=where,
                    adapter=cr.adapter_name,
                    pods=names,
                    why="not Ready but may still serve the adapter; the finalizer stays until "
                    "each unloads it, restarts, stops running or is gone",
                    fix=f"delete the pod, or `pulumi-lora finish-delete --force {where}`",
                )
            waiting = names
            await asyncio.sleep(self._poll)

    async def _unload_one(self, cr: AdapterCR, state: PodRecord) -> PodOutcome:
        """One direct unload from a pod that is not Ready; a failure is an outcome."""
        unload = state.unloads.get(cr.adapter_name) or Unload(cr.adapter_name, cr.api_key, cr.raw)
        try:
            outcome = await self._unload_directly(state.facts, unload)
        except Exception as exc:  # an unexpected failure: retried like any other
            outcome = PodOutcome(state.facts.name, loaded=True, error=f"{type(exc).__name__}")
        pod = "/".join(state.facts.key)
        if outcome.error:
            logs.event(
                "held_delete_unload_failed",
                logging.WARNING,
                cr="/".join(cr.key),
                pod=pod,
                error=f"{outcome.reason}: {outcome.error}"[:300],
            )
        else:
            logs.event("held_delete_unloaded", cr="/".join(cr.key), pod=pod, ready=False)
        return outcome

    async def _unload_directly(self, facts: PodEndpoint, unload: Unload) -> PodOutcome:
        """The core's unload program on one pod (``run_pod`` with that one unload)."""
        run = await run_pod(
            facts,
            PodWork((), (unload,), frozenset(), frozenset()),
            read_key=self._read_key,
            timeouts=ClientTimeouts(),
            still_permitted=lambda _task: False,
        )
        return run.unloaded[0][1]

    async def _read_key(self, ref: SecretRef) -> str:
        return await self._kube.read_secret(ref)

    async def _release(self, cr: AdapterCR) -> bool:
        """Remove the finalizer until it is off, backing off after each failure (an error, or
        a release that did not happen while the CR still carries it); whether this task removed
        it (False: the CR is gone, or someone else let it go)."""
        namespace, name = cr.key
        where = f"{namespace}/{name}"
        failures = 0
        while True:
            self._releasing.add(cr.key)
            try:
                if await self._kube.release_finalizer(namespace, name, UNLOAD_FINALIZER):
                    return True
                if not await self._kube.has_finalizer(namespace, name, UNLOAD_FINALIZER):
                    return False
                error = (
                    "the release did not happen and the CR still carries the finalizer (each "
                    "patch conflicted: the CR kept changing, or a webhook refuses updates)"
                )
                fix = (
                    "look for an admission webhook or policy that refuses updates of "
                    "LoRAAdapters; the loop keeps trying"
                )
            except Exception as exc:  # forbidden, or the apiserver is away: say what to do
                error = str(exc)[:300]
                fix = (
                    "grant the loop get and patch on loraadapters (resync_manifests does with "
                    f"llmkube_coexistence=True), or run `pulumi-lora finish-delete {where}`"
                )
            finally:
                self._releasing.discard(cr.key)
            failures += 1
            delay = backoff_delay(failures, jitter(), base=BACKOFF_BASE, cap=BACKOFF_CAP)
            logs.event(
                "held_delete_stuck",
                logging.WARNING,
                cr=where,
                error=error,
                fix=fix,
                failures=failures,
                retry_in=round(delay, 3),
            )
            await asyncio.sleep(delay)
