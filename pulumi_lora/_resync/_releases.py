"""Taking CRs from LLMKube's LoRA controller (``release_llmkube_finalizer``): its finalizer off,
once per CR, and a word when it keeps coming back (the coexistence policy is missing)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from pulumi_lora._errors import ClusterError
from pulumi_lora._models import LLMKUBE_FINALIZER
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._views import Key, object_key

#: How often the loop removes LLMKube's finalizer from one CR before it calls the policy missing,
#: and the time between two looks (a policy just applied takes a moment to hold).
RELEASES = 3
RELEASE_SPACING = 5.0


class FinalizerRelease:
    """The CRs taken from LLMKube's LoRA controller, and those it contests."""

    def __init__(self, kube: Kube, enabled: bool) -> None:
        self.kube = kube
        self.enabled = enabled
        self.contested: set[Key] = set()  # CRs LLMKube's controller keeps its finalizer on
        self._released: set[str] = set()  # CR UIDs taken from LLMKube's controller
        self._tasks: set[asyncio.Task[None]] = set()

    def take_over(self, obj: Mapping[str, Any]) -> None:
        """Take a CR from LLMKube's LoRA controller (once).

        ``_release`` removes its finalizer; the coexistence policy keeps LLMKube from adding it
        back. A policy applied moments before may not hold yet, so a finalizer that returns is
        removed again, at most :data:`RELEASES` times :data:`RELEASE_SPACING` seconds apart;
        after that the policy is missing: say so once and leave it (never a write war).
        """
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if (
            not self.enabled
            or uid in self._released
            or LLMKUBE_FINALIZER not in (meta.get("finalizers") or [])
        ):
            return
        self._released.add(uid)
        namespace, name = object_key(obj)
        task = asyncio.create_task(self._release(namespace, name), name=f"release {uid}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel_all(self) -> None:
        """Stop every release under way."""
        for task in list(self._tasks):
            task.cancel()

    async def _release(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        try:
            for _ in range(RELEASES):
                if await self.kube.release_finalizer(namespace, name, LLMKUBE_FINALIZER):
                    logs.event("llmkube_finalizer_released", cr=key)
                await asyncio.sleep(RELEASE_SPACING)
                if not await self.kube.has_finalizer(namespace, name, LLMKUBE_FINALIZER):
                    return
        except ClusterError as exc:
            logs.event("llmkube_finalizer_kept", logging.WARNING, cr=key, error=str(exc))
            return
        self.contested.add((namespace, name))
        logs.event(
            "llmkube_finalizer_returned",
            logging.WARNING,
            cr=key,
            why="LLMKube's LoRA controller keeps adding its finalizer back: apply the coexistence "
            "policy (pulumi-lora coexistence-policy | kubectl apply -f -)",
        )
