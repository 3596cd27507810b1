"""Kubernetes Events about the CRs, merged per CR and sent off the hot path.

What the loop changed (loads, swaps, unloads) and what went wrong (failures, capacity) is recorded
as Events on the CR. The same message about one CR within ``EVENT_WINDOW`` seconds becomes one
Event naming every pod, as client-go's event correlator would merge them: 1,000 CRs re-loaded on
5 pods make 1,000 Events, not 5,000. Sending happens on a queue, so an Event never delays a load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._views import Key, object_key

#: Events waiting to be sent; beyond this they are dropped (and logged).
EVENT_QUEUE = 2000
#: Seconds during which Events of one kind about one CR are merged into one.
EVENT_WINDOW = 1.0
#: Stands for the pods in an Event's message until the Event is sent.
PODS = "{pods}"


@dataclasses.dataclass
class _Draft:
    """An Event being gathered: the pods it is about so far."""

    cr: Mapping[str, Any]
    warning: bool
    pods: list[str] = dataclasses.field(default_factory=list)


class EventRecorder:
    """Merges, queues and sends Events; run :meth:`run` in a task or two."""

    def __init__(self, kube: Kube, metrics: Metrics) -> None:
        self._kube = kube
        self._metrics = metrics
        self._queue: asyncio.Queue[tuple[Mapping[str, Any], str, str, bool]] = asyncio.Queue(
            EVENT_QUEUE
        )
        self._drafts: dict[tuple[Key, str, str], _Draft] = {}

    def record(
        self,
        cr: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        pod: str | None = None,
    ) -> None:
        """Queue an Event; the same message about the same CR within ``EVENT_WINDOW`` seconds
        becomes one Event naming every pod (``{pods}`` in ``message`` stands for them)."""
        if not cr:
            return
        key = (object_key(cr), reason, message)
        draft = self._drafts.get(key)
        if draft is None:
            draft = self._drafts[key] = _Draft(cr, warning)
            asyncio.get_running_loop().call_later(EVENT_WINDOW, self._send_draft, key)
        if pod is not None and pod not in draft.pods:
            draft.pods.append(pod)

    def _send_draft(self, key: tuple[Key, str, str]) -> None:
        draft = self._drafts.pop(key, None)
        if draft is None:
            return
        _, reason, message = key
        pods = draft.pods
        named = ", ".join(pods[:10]) + (f" and {len(pods) - 10} more" if len(pods) > 10 else "")
        text = message.replace(PODS, f"pod{'s' if len(pods) > 1 else ''} {named}")
        try:
            self._queue.put_nowait((draft.cr, reason, text, draft.warning))
        except asyncio.QueueFull:
            logs.event("event_dropped", logging.WARNING, reason=reason)

    async def flush(self) -> None:
        """Send every Event gathered so far and wait until they are all sent."""
        for key in list(self._drafts):
            self._send_draft(key)
        await self._queue.join()

    async def run(self) -> None:
        """Send queued Events, forever (best effort: a failure is a log line)."""
        while True:
            cr, reason, message, warning = await self._queue.get()
            try:
                await self._kube.emit_event(cr, reason, message, warning=warning)
                self._metrics.events.inc()
            except Exception as exc:  # an Event is never worth more than a log line
                logs.event("event_failed", logging.WARNING, reason=reason, error=str(exc)[:300])
            finally:
                self._queue.task_done()
