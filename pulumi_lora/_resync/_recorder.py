"""Records what a pod run did: outcomes in the World, metrics, Events and statuses to write.

The controller runs the pods; :class:`RunRecorder` records what they did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pulumi_lora._core._reconcile import PodOutcome, extra_arg_value
from pulumi_lora._errors import EvictionImpossible
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import (
    RECOVERY_REASONS,
    CapacityNote,
    ReloadReason,
    backoff_delay,
    capacity_message,
)
from pulumi_lora._resync._events import PODS, EventRecorder
from pulumi_lora._resync._kube import jitter
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._podrun import PodRun
from pulumi_lora._resync._reverts import REASON as REVERT_REASON
from pulumi_lora._resync._settings import ResyncSettings
from pulumi_lora._resync._status import EVICTED_REASON
from pulumi_lora._resync._views import AdapterCR, Key
from pulumi_lora._resync._worker import PodWorker
from pulumi_lora._resync._world import AdapterTask, PodRecord, Unload, World
from pulumi_lora._resync._writer import StatusWriter

__all__ = ["RunRecorder"]


class RunRecorder:
    """Records pod runs: outcomes, metrics, Events, statuses to write, backoff, capacity."""

    def __init__(
        self,
        world: World,
        metrics: Metrics,
        events: EventRecorder,
        statuses: StatusWriter,
        settings: ResyncSettings,
        *,
        on_revert: Callable[[Key], object] = lambda _target: None,
    ) -> None:
        """``on_revert(target)`` is told when a swap on ``target`` is rolled back: its pods
        must run again (each is given the old revision)."""
        self.on_revert = on_revert
        self.world = world
        self.metrics = metrics
        self.events = events
        self.statuses = statuses
        self.settings = settings
        self._reported: dict[tuple[Key, str], str] = {}  # (CR, pod) → failure last reported

    def record(
        self,
        state: PodRecord,
        results: list[tuple[AdapterTask, PodOutcome]],
        unloaded: list[tuple[Unload, PodOutcome]],
        reason: ReloadReason,
        now: datetime,
    ) -> None:
        """What a run did that was not recorded as it happened: its adapters' outcomes (all of
        them, where evictions are possible) and its unloads."""
        self.record_results(state, results, reason, now)
        pod = state.facts.name
        for unload, outcome in unloaded:
            if outcome.error:
                self.metrics.failures.labels(outcome.reason).inc()
                continue
            state.unloaded(unload.name)
            if outcome.did_unload:
                self.metrics.unloads.labels(reason.value).inc()
                self.events.record(
                    unload.source,
                    "AdapterUnloaded",
                    f"unloaded {unload.name} from {PODS}: its LoRAAdapter was deleted",
                    pod=pod,
                )

    def record_results(
        self,
        state: PodRecord,
        results: list[tuple[AdapterTask, PodOutcome]],
        reason: ReloadReason,
        now: datetime,
    ) -> None:
        """Keep adapters' outcomes on a pod, count them, gather their Events, and mark the CRs
        whose status they change."""
        key, pod = state.facts.key, state.facts.name
        touched: set[Key] = set()
        for task, outcome in results:
            if self.world.record(key, task, outcome):
                touched.add(task.cr)
            cr = self.world.crs.get(task.cr)
            if outcome.did_load:
                self.metrics.loads.labels(reason.value).inc()
                if outcome.loaded:
                    self.world.note_loaded(task.cr, now)
                    touched.add(task.cr)
            if outcome.did_unload:
                self.metrics.unloads.labels(reason.value).inc()
            if cr is not None:
                self._report(
                    cr.raw, key=task.cr, pod=pod, outcome=outcome, reason=reason, path=task.path
                )
                if self._revert(cr, task, pod, outcome):
                    touched.add(task.cr)
        self.statuses.mark(touched)

    def _revert(self, cr: AdapterCR, task: AdapterTask, pod: str, outcome: PodOutcome) -> bool:
        """A swap's new revision failed for good on ``pod``: give every pod the old one again
        (``_reverts``); True when that starts now."""
        if not outcome.error or outcome.retryable or outcome.reason == EVICTED_REASON:
            return False
        if not self.world.reverts.failed(cr, task.path, f"pod {pod}: {outcome.error}"):
            return False
        revert = self.world.reverts.active(cr)
        old = revert.old_path if revert is not None else ""
        logs.event(
            "swap_rolled_back",
            logging.WARNING,
            cr="/".join(cr.key),
            pod=pod,
            failed=task.path,
            back_to=old,
            error=outcome.error[:300],
        )
        self.events.record(
            cr.raw,
            REVERT_REASON,
            f"{cr.adapter_name} from {task.path} failed on pod {pod} ({outcome.error}); every "
            f"pod is given {old} again",
            warning=True,
            pod=pod,
        )
        self.on_revert(cr.target)
        return True

    def _report(
        self,
        cr: Mapping[str, Any],
        *,
        key: Key,
        pod: str,
        outcome: PodOutcome,
        reason: ReloadReason,
        path: str,
    ) -> None:
        """Events for what changed on the pod, and failures once per distinct failure."""
        name = (cr.get("spec") or {}).get("name", "")
        if outcome.did_load and outcome.loaded:
            verb = "AdapterSwapped" if outcome.did_unload else "AdapterLoaded"
            self.events.record(
                cr, verb, f"loaded {name} from {path} on {PODS} ({reason.value})", pod=pod
            )
        if outcome.error:
            self.metrics.failures.labels(outcome.reason).inc()
            text = f"{outcome.reason}: {outcome.error}"
            if self._reported.get((key, pod)) != text:
                self._reported[(key, pod)] = text
                if outcome.reason != EVICTED_REASON:  # capacity has its own Event
                    self.events.record(
                        cr, "AdapterLoadFailed", f"{PODS}: {text}", warning=True, pod=pod
                    )
        else:
            self._reported.pop((key, pod), None)

    def after_run(
        self,
        worker: PodWorker,
        *,
        state: PodRecord,
        run: PodRun,
        reason: ReloadReason,
        started: float,
        declared: frozenset[tuple[str, str]],
    ) -> None:
        facts = state.facts
        self._note_capacity(state, run, declared)
        failed = [o for o in run.failed if o.reason != EVICTED_REASON]
        if failed:
            delay = backoff_delay(
                state.failures + 1,
                jitter(),
                base=self.settings.backoff_base,
                cap=self.settings.backoff_cap,
            )
            state.failed(time.monotonic() + delay)
            if any(o.retryable for o in failed):
                worker.retry_in(delay, reason)
        else:
            state.succeeded()
        if reason in RECOVERY_REASONS and state.ready_seen_at is not None:
            if run.first_load is not None:
                self.metrics.first_load.observe(run.first_load - state.ready_seen_at)
            if run.results and all(o.loaded for _, o in run.results):
                self.metrics.recovery.observe(time.monotonic() - state.ready_seen_at)
            state.recovered()
        loads = sum(1 for _, o in run.results if o.did_load)
        unloads = sum(1 for _, o in run.results + run.unloaded if o.did_unload)
        logs.event(
            "pod_synced",
            logging.INFO if loads or unloads or failed else logging.DEBUG,
            pod=f"{facts.namespace}/{facts.name}",
            reason=reason.value,
            adapters=len(run.results),
            loads=loads,
            unloads=unloads,
            failures=len(failed),
            first_failure=(f"{failed[0].reason}: {failed[0].error}"[:300] if failed else None),
            first_load_at=run.first_load_wall,
            finished_at=time.time(),
            seconds=round(time.monotonic() - started, 4),
            retry_in=round(state.not_before - time.monotonic(), 3) if failed else None,
        )

    def _note_capacity(
        self, state: PodRecord, run: PodRun, declared: frozenset[tuple[str, str]]
    ) -> None:
        """Evictions (or a server that can evict nothing) become an ``OverCapacity`` note."""
        names = {name for name, _ in declared}
        evicted = {n for n in run.ledger.evicted if n in names}
        evicted |= {t.name for t, o in run.results if o.reason == EvictionImpossible.reason}
        known = state.capacity.evicted if state.capacity is not None else frozenset()
        fresh = evicted - known
        if not fresh:
            return
        note = CapacityNote(state.facts.name, frozenset(known | evicted), declared)
        state.note_capacity(note)
        self.metrics.evictions.inc(len(fresh))
        target = self.world.targets.get(state.facts.target)
        limit = extra_arg_value(target.extra_args, "--max-loaded-loras") if target else None
        message = capacity_message("/".join(state.facts.target), limit, names, [note])
        logs.event(
            "over_capacity",
            logging.WARNING,
            pod="/".join(state.facts.key),
            evicted=sorted(fresh),
            limit=limit,
        )
        for cr in self.world.crs_of(state.facts.target):
            if cr.adapter_name in names:
                self.events.record(cr.raw, "OverCapacity", message, warning=True)
        self.statuses.mark(c.key for c in self.world.crs_of(state.facts.target))

    def forget_failures(self, which: Callable[[Key, str], bool]) -> None:
        """Forget the failures last reported for the (CR, pod) pairs ``which`` picks."""
        for entry in [e for e in self._reported if which(*e)]:
            del self._reported[entry]
