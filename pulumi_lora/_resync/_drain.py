"""The loop's rolling swap (issue 54, item 3): a swap on a gated pod in rotation happens only out
of rotation, at most ``max_unavailable`` pods of one CR's generation at a time.

As the provider's (``_lifecycle._rolling``), for the swaps the loop makes (``delegated``
adapters, kubectl edits, a rollback's swap back): the gate False (``Swapping``), a wait until
the pod's endpoint is not ready in any EndpointSlice of its Service, ``drain_seconds``, the
swap, then, if it served the adapter after it and the container is the one it ran on, the gate
True again with the condition it had, and a wait until the endpoint is ready again. A swap that
waited for its turn while the declaration moved on (a rollback began) is not made. The pace is
the CR's (``pulumi-lora.dev/max-unavailable`` and ``drain-seconds``, from the resource's
``max_unavailable`` and ``drain_seconds``; 1 pod and 2 s when absent).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pulumi_lora._core._gate import SWAPPING, GateVerdict, condition_patch
from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._core._rollout import Rotation, rotation
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._views import Key
from pulumi_lora._resync._world import AdapterTask

#: How long an endpoint may take to leave (or rejoin) the EndpointSlices before the swap goes
#: on without it (logged): a loop never waits forever on another controller.
ENDPOINT_PATIENCE = 60.0
ENDPOINT_POLL = 0.1

Slices = Callable[[str, str], Awaitable[list[dict[str, Any]]]]
WriteStatus = Callable[[str, str, Mapping[str, Any]], Awaitable[bool]]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Drainer:
    """Turns: one semaphore per (CR, generation); the gate's writes and the slices' reads."""

    def __init__(
        self,
        slices: Slices,
        write_status: WriteStatus,
        current: Callable[[Key], PodEndpoint | None],
    ) -> None:
        self._slices = slices
        self._write = write_status
        self._current = current
        self._turns: dict[tuple[Key, int], asyncio.Semaphore] = {}

    async def swap(
        self,
        facts: PodEndpoint,
        task: AdapterTask,
        run: Callable[[], Awaitable[PodOutcome]],
        still_wanted: Callable[[], bool],
    ) -> PodOutcome:
        """Run the swap ``run`` of ``task`` on ``facts``' pod out of rotation, in its turn (its
        CR's generation: ``task.max_unavailable`` pods at a time, each drained
        ``task.drain_seconds``); a swap no longer ``still_wanted`` once its turn comes is not
        made."""
        name = task.name
        turn = (task.cr, task.generation)
        slot = self._turns.setdefault(turn, asyncio.Semaphore(max(1, task.max_unavailable)))
        async with slot:
            if not still_wanted():
                return PodOutcome(facts.name, loaded=False, waiting=True)
            pod = self._current(facts.key) or facts
            prior = dict(pod.gate or {})
            found = GateVerdict(False, SWAPPING, f"swapping {name}")
            await self._write(pod.namespace, pod.name, condition_patch(found, _now(), pod.gate))
            started = time.monotonic()
            listed = await self._await(pod, leaving=True)
            out = time.monotonic() - started
            await asyncio.sleep(task.drain_seconds)
            outcome = await run()
            back = outcome.loaded and await self._release(pod, prior)
            if back and listed:
                await self._await(pod, leaving=False)
            logs.event(
                "swapped_out_of_rotation",
                pod="/".join(pod.key),
                adapter=name,
                loaded=outcome.loaded,
                in_slices=listed,
                left_slices_seconds=round(out, 3),
                seconds=round(time.monotonic() - started, 3),
            )
            return outcome

    def forget(self, cr: Key) -> None:
        """The CR is gone: its turns with it."""
        for turn in [t for t in self._turns if t[0] == cr]:
            del self._turns[turn]

    async def _release(self, before: PodEndpoint, prior: Mapping[str, Any]) -> bool:
        """The gate True again, as it was, on the container the swap ran on (a restarted one has
        lost its adapters: the gate keeper decides); whether it was written."""
        for _ in range(5):
            now = self._current(before.key)
            if now is None or not now.ready or now.container_id != before.container_id:
                return False
            found = GateVerdict(
                True, str(prior.get("reason") or ""), str(prior.get("message") or "")
            )
            body = condition_patch(found, _now(), now.gate, now.resource_version)
            if await self._write(now.namespace, now.name, body):
                return True
            await asyncio.sleep(0.2)  # 409: the watch brings the pod's new version
        return False

    async def _await(self, pod: PodEndpoint, *, leaving: bool) -> bool:
        """Wait until the pod's endpoint is out of (``leaving``) or back in rotation; returns
        whether the slices list it at all (a pod in none has nothing to wait for)."""
        deadline = time.monotonic() + ENDPOINT_PATIENCE
        listed: bool | None = None
        while True:
            stand = rotation(await self._slices(pod.namespace, pod.service), pod)
            if listed is None:
                listed = stand is not Rotation.ABSENT
            if not listed or (stand is Rotation.IN) != leaving:
                return listed
            if time.monotonic() > deadline:
                logs.event(
                    "endpoint_wait_gave_up",
                    logging.WARNING,
                    pod="/".join(pod.key),
                    waited_for="out of rotation" if leaving else "back in rotation",
                    seconds=ENDPOINT_PATIENCE,
                )
                return listed
            await asyncio.sleep(ENDPOINT_POLL)
