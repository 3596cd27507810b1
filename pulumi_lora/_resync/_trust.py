"""The loop's trust review: which labelled pods their target's controller chain vouches for.

Pods outside the chain (``_core._ownership``) get no adapters and are reported, after
:data:`TRUST_GRACE` seconds if the watches may not have delivered the chain yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from pulumi_lora._core._ownership import UNTRUSTED_EVENT, awaits_owner, untrusted_message
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._events import EventRecorder
from pulumi_lora._resync._views import Key
from pulumi_lora._resync._world import World
from pulumi_lora._resync._writer import StatusWriter

__all__ = ["TRUST_GRACE", "UNTRUSTED_EVENT", "TrustReview"]

#: Seconds a pod whose ReplicaSet or Deployment the watches have not delivered yet waits before
#: it is reported as outside the chain (a rollout creates them moments before the pods; the
#: watches are separate streams). Until then it gets nothing either.
TRUST_GRACE = 5.0


class TrustReview:
    """Judges the pods of a target by their controller chain and reports those outside it."""

    def __init__(
        self,
        world: World,
        events: EventRecorder,
        statuses: StatusWriter,
        stopping: Callable[[], bool],
    ) -> None:
        self.world = world
        self.events = events
        self.statuses = statuses
        self._stopping = stopping
        self._awaiting: dict[Key, float] = {}  # pod → when it was first seen missing an owner
        self._rechecks: set[Key] = set()  # targets with a review scheduled

    def forget(self, pod: Key) -> None:
        """The pod is gone: nothing about it is reported any more."""
        self.world.clear_untrusted(pod)
        self._awaiting.pop(pod, None)

    def review(self, target: Key) -> None:
        """Judge every pod labelled as ``target``'s by its controller chain; report the pods
        outside it (an Event on each CR of the target naming them, and ``Available``'s message).

        A pod whose ReplicaSet or Deployment is not known yet gets nothing, but is reported only
        once that lasts ``TRUST_GRACE`` seconds (the watches may just not have delivered it).
        """
        self._rechecks.discard(target)
        now = time.monotonic()
        fresh: dict[str, str] = {}
        changed = False
        recheck = False
        known = target in self.world.targets  # else its CRs report InferenceServiceNotFound
        for state in self.world.labelled_pods_of(target):
            key = state.facts.key
            why = self.world.trust(state.facts)
            if why is None or not known:
                self._awaiting.pop(key, None)
                changed |= self.world.clear_untrusted(key)
                continue
            if awaits_owner(why):
                first = self._awaiting.setdefault(key, now)
                if now - first < TRUST_GRACE:
                    recheck = True
                    continue
            else:
                self._awaiting.pop(key, None)
            if self.world.mark_untrusted(key, why):
                fresh[key[1]] = why
                changed = True
        if recheck and target not in self._rechecks and not self._stopping():
            self._rechecks.add(target)
            asyncio.get_running_loop().call_later(TRUST_GRACE, self.review, target)
        if fresh:
            message = untrusted_message(target[1], fresh)
            logs.event(
                "untrusted_pods",
                logging.WARNING,
                target="/".join(target),
                pods=sorted(fresh),
                why=[fresh[p] for p in sorted(fresh)],
            )
            for cr in self.world.crs_of(target):
                self.events.record(cr.raw, UNTRUSTED_EVENT, message, warning=True)
        if changed:
            self.statuses.mark(c.key for c in self.world.crs_of(target))
