"""Kubernetes Events about the CRs, merged per CR and sent off the hot path.

One message about one CR becomes one Event naming every pod, held until the CR's pass settles
(at most ``EVENT_HOLD``). Sent from a queue, so an Event never delays a load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._views import Key, object_key

#: Events waiting to be sent; beyond this they are dropped (and logged).
EVENT_QUEUE = 2000

#: Events sent at once. An initial sync settles CRs about as fast as the apiserver takes Events
#: (1,000 CRs in about 20 s here, 40 to 100 ms an Event): with 2 in flight the Events ended 2 s
#: after the last load, with 4 they keep up.
EVENT_SENDERS = 4

#: Seconds during which Events of one kind about one CR are merged into one.
EVENT_WINDOW = 1.0
#: Longest an Event about a CR whose pass is under way is held back (a pod stuck in a slow run
#: must not hold back what the others did). Longer than an initial sync of 1,000 CRs on a busy
#: machine (about a minute, measured), where pods waiting for a slot keep passes open.
EVENT_HOLD = 120.0
#: Stands for the pods in an Event's message until the Event is sent.
PODS = "{pods}"


@dataclasses.dataclass
class _Draft:
    """An Event being gathered: the pods it is about so far."""

    cr: Mapping[str, Any]
    warning: bool
    since: float
    pods: list[str] = dataclasses.field(default_factory=list)


class EventRecorder:
    """Merges, queues and sends Events; run :meth:`run` in `EVENT_SENDERS` tasks."""

    def __init__(
        self, kube: Kube, metrics: Metrics, under_way: Callable[[Key], bool] = lambda _: False
    ) -> None:
        """``under_way(cr)``: whether that CR's pass is still running (its Events wait)."""
        self._kube = kube
        self._metrics = metrics
        self._under_way = under_way
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
        """Gather an Event; the same message about the same CR in one pass becomes one Event
        naming every pod (``{pods}`` in ``message`` stands for them)."""
        if not cr:
            return
        key = (object_key(cr), reason, message)
        draft = self._drafts.get(key)
        if draft is None:
            loop = asyncio.get_running_loop()
            draft = self._drafts[key] = _Draft(cr, warning, loop.time())
            loop.call_later(EVENT_WINDOW, self._due, key)
        if pod is not None and pod not in draft.pods:
            draft.pods.append(pod)

    def settled(self, crs: Iterable[Key]) -> None:
        """These CRs' passes settled (their status is computed): send what was gathered."""
        done = set(crs)
        for key in [k for k in self._drafts if k[0] in done]:
            self._send_draft(key)

    def _due(self, key: tuple[Key, str, str]) -> None:
        """The window ended: send, unless the CR's pass is under way (then look again later)."""
        draft = self._drafts.get(key)
        if draft is None:
            return
        loop = asyncio.get_running_loop()
        if self._under_way(key[0]) and loop.time() - draft.since < EVENT_HOLD:
            loop.call_later(EVENT_WINDOW, self._due, key)
            return
        self._send_draft(key)

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
                with self._metrics.write_seconds.labels("event").time():
                    await self._kube.emit_event(cr, reason, message, warning=warning)
                self._metrics.events.inc()
            except Exception as exc:  # an Event is never worth more than a log line
                logs.event("event_failed", logging.WARNING, reason=reason, error=str(exc)[:300])
            finally:
                self._queue.task_done()
