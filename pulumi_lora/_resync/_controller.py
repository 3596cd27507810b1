"""The leader's work: follow the watches, run pods, write statuses and Events.

Observe, decide (``_decide``, ``_world``), act (one ``PodWorker`` per pod, a global bound on pods
in flight), record (``RunRecorder``, ``StatusWriter``, ``EventRecorder``). A new, restarted or
newly Ready pod runs at once; a changed CR runs every pod of its target; a sweep verifies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pulumi_lora._core._llmkube import SERVICE_LABEL, PodEndpoint, target_from_object
from pulumi_lora._core._ownership import owned_from_object
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import (
    Permission,
    ReloadReason,
    backoff_delay,
    permission,
)
from pulumi_lora._resync._drain import Drainer
from pulumi_lora._resync._events import EVENT_SENDERS, EventRecorder
from pulumi_lora._resync._gate import GateKeeper
from pulumi_lora._resync._held import HeldDeletes, is_held
from pulumi_lora._resync._kube import Kube, Objects, jitter, labelled_pod
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._podrun import run_pod
from pulumi_lora._resync._recorder import RunRecorder
from pulumi_lora._resync._releases import FinalizerRelease
from pulumi_lora._resync._served import FleetState, NotServedClock, fleet_state
from pulumi_lora._resync._settings import ResyncSettings
from pulumi_lora._resync._trust import UNTRUSTED_EVENT, TrustReview
from pulumi_lora._resync._views import AdapterCR, Key, SecretRef, adapter_from_object, object_key
from pulumi_lora._resync._worker import PodWorker
from pulumi_lora._resync._world import AdapterTask, World
from pulumi_lora._resync._writer import StatusWriter

#: Kinds the loop lists and watches, in the order of the first listing: the links of the pods'
#: controller chain before the pods, so a pod listed is judged with its owners known.
KINDS = ("inferenceservices", "deployments", "replicasets", "loraadapters", "pods")


class Controller:
    """Everything the leader does; :meth:`run` until cancelled or :meth:`drain`-ed."""

    def __init__(self, settings: ResyncSettings, kube: Kube, metrics: Metrics) -> None:
        self.settings = settings
        self.kube = kube
        self.metrics = metrics
        self.world = World(settings.namespace)
        self.synced = False
        self.stopping = False
        self.pods_in_flight = asyncio.Semaphore(settings.concurrency)
        self._workers: dict[Key, PodWorker] = {}
        self.events = EventRecorder(kube, metrics, self._under_way)
        self.statuses = StatusWriter(
            self.world,
            kube,
            metrics,
            settings.status_concurrency,
            self.events.settled,
            lease=(settings.lease.namespace, settings.lease.name),
        )
        self.trust = TrustReview(self.world, self.events, self.statuses, lambda: self.stopping)
        self.recorder = RunRecorder(
            self.world,
            metrics,
            self.events,
            self.statuses,
            settings,
            on_revert=lambda target: self._request(
                self.world.serving_pods([target]), ReloadReason.CR_CHANGE
            ),
        )
        self.gate = GateKeeper(self.world, kube, metrics)  # the readiness gate's condition
        self.swaps = Drainer(  # swaps on gated pods in rotation: out of rotation, in turns
            kube.endpoint_slices, kube.patch_pod_status, self._facts
        )
        self.held = HeldDeletes(self.world, kube, self._request, lambda: self.synced)
        self._secrets: dict[SecretRef, tuple[str, float]] = {}
        self._watchers: list[asyncio.Task[None]] = []
        self._background: list[asyncio.Task[None]] = []
        self.releases = FinalizerRelease(kube, settings.release_llmkube_finalizer)
        self._not_served = NotServedClock()
        self.contested = self.releases.contested

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self) -> None:
        """List everything, start the watches, sweeps and writers; run until cancelled."""
        try:
            versions = await self._initial_lists()
            self.synced = True
            for kind, on_snapshot, on_event in (
                ("inferenceservices", self.on_isvc_snapshot, self.on_isvc_event),
                (
                    "deployments",
                    self._owner_snapshot("deployments"),
                    self._owner_event("deployments"),
                ),
                (
                    "replicasets",
                    self._owner_snapshot("replicasets"),
                    self._owner_event("replicasets"),
                ),
                ("loraadapters", self.on_cr_snapshot, self.on_cr_event),
                ("pods", self.on_pod_snapshot, self.on_pod_event),
            ):
                self._watchers.append(
                    asyncio.create_task(
                        self.kube.follow(kind, versions[kind], on_snapshot, on_event, self.metrics),
                        name=f"watch {kind}",
                    )
                )
            self._watchers.append(asyncio.create_task(self._sweep_forever(), name="sweep"))
            self._background.append(asyncio.create_task(self.statuses.run(), name="status"))
            self._background += [
                asyncio.create_task(self.events.run(), name=f"events {i}")
                for i in range(EVENT_SENDERS)
            ]
            children = self._watchers + self._background
            done, _ = await asyncio.wait(children, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:  # a child ends only by being cancelled, or by a bug
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            self._cancel_all()

    async def _initial_lists(self) -> dict[str, str | None]:
        versions: dict[str, str | None] = {}
        for kind in KINDS:
            failures = 0
            while True:
                try:
                    items, versions[kind] = await self.kube.list(kind)
                    break
                except Exception as exc:  # the apiserver may be restarting
                    failures += 1
                    delay = backoff_delay(failures, jitter(), base=0.2, cap=5.0)
                    logs.event(
                        "initial_list_failed", logging.WARNING, resource=kind, error=str(exc)[:300]
                    )
                    await asyncio.sleep(delay)
            self._seed(kind, items)
        logs.event(
            "caches_synced",
            crs=len(self.world.crs),
            inference_services=len(self.world.targets),
            pods=len(self.world.pods),
        )
        for target in sorted({s.facts.target for s in self.world.pods.values()}):
            self.trust.review(target)
        self.statuses.mark(self.world.crs)
        return versions

    def _seed(self, kind: str, items: Objects) -> None:
        for obj in items:
            if kind == "inferenceservices":
                self.world.put_target(target_from_object(obj))
            elif kind == "loraadapters":
                self.releases.take_over(obj)
                if (cr := adapter_from_object(obj)) is not None:
                    if is_held(obj):
                        self.held.hold(cr)
                    else:
                        self.world.put_cr(cr)
            elif kind in ("deployments", "replicasets"):
                self.world.put_owner(kind, owned_from_object(obj))
            elif (facts := labelled_pod(obj)) is not None:
                self.world.seed_pod(facts)
                self._worker(facts.key)

    async def drain(self, timeout: float) -> None:
        """Graceful stop: no new work; let in-flight runs and status writes finish, then stop."""
        deadline = time.monotonic() + timeout
        self.stopping = True
        for task in self._watchers:
            task.cancel()
        running = [w.task for w in self._workers.values() if w.running]
        for worker in self._workers.values():
            worker.close()
        if running:
            await asyncio.wait(running, timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                await self.statuses.flush()
                await self.events.flush()
        logs.event("drained", in_flight_left=sum(1 for t in running if not t.done()))
        self._cancel_all()

    def _cancel_all(self) -> None:
        self.held.cancel_all()
        self.releases.cancel_all()
        self.gate.cancel_all()
        self.stopping = True
        for worker in self._workers.values():
            worker.task.cancel()
        for task in self._watchers + self._background:
            task.cancel()

    def fleet_state(self) -> FleetState | None:
        """What ``/metrics`` shows of the fleet now (None until the caches are synced)."""
        if not self.synced:
            return None
        return fleet_state(self.world, self._not_served, time.time(), self.contested)

    def _under_way(self, key: Key) -> bool:
        """Whether a CR's pass is still running: a serving pod of its target has no outcome
        for its generation yet (its Events then wait for the rest, see ``_events``)."""
        cr = self.world.crs.get(key)
        return (
            cr is not None
            and self.world.availability(cr).ok
            and self.world.outcomes_for(cr) is None
        )

    # --- watch handlers ---------------------------------------------------------------------

    def on_isvc_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """An InferenceService was added, changed or deleted."""
        key = object_key(obj)
        if event_type == "DELETED":
            self.world.remove_target(key)
        elif not self.world.put_target(target_from_object(obj)):
            return
        self.trust.review(key)
        self.statuses.mark(c.key for c in self.world.crs_of(key))
        self._request(self.world.serving_pods([key]), ReloadReason.CR_CHANGE)

    def on_isvc_snapshot(self, items: Objects) -> None:
        """A relist of InferenceServices: apply it as the events it stands for."""
        seen = {object_key(obj) for obj in items}
        for key in [k for k in self.world.targets if k not in seen]:
            self.on_isvc_event("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})
        for obj in items:
            self.on_isvc_event("MODIFIED", obj)

    def on_cr_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """A LoRAAdapter was added, changed or deleted."""
        if event_type == "DELETED":
            self._cr_deleted(object_key(obj), obj)
            return
        self.releases.take_over(obj)
        cr = adapter_from_object(obj)
        if cr is None:
            logs.event(
                "cr_ignored", logging.WARNING, cr="/".join(object_key(obj)), why="incomplete spec"
            )
            return
        if is_held(obj):  # a failed destroy left it: finish the delete (docs/protocol.md rule 4)
            self.held.hold(cr)
            return
        old = self.world.put_cr(cr)
        self.gate.target_changed(cr.target)  # a first status.loadedPath makes it required
        if old is not None and old.declaration() == cr.declaration():
            return  # a status write (ours, or the provider's): nothing to act on
        if old is not None and (old.target, old.adapter_name) != (cr.target, cr.adapter_name):
            self._unload_leftover(old)
        if (old is None or old.target != cr.target) and (
            note := self.world.untrusted_note(cr.target)
        ):
            self.events.record(cr.raw, UNTRUSTED_EVENT, note, warning=True)  # news to this CR
        self.statuses.mark(c.key for c in self.world.crs_of(cr.target))
        self._request(self.world.serving_pods([cr.target]), ReloadReason.CR_CHANGE)

    def on_cr_snapshot(self, items: Objects) -> None:
        """A relist of LoRAAdapters: CRs missing from it were deleted while the watch was down."""
        seen = {object_key(obj) for obj in items}
        for key in [k for k in self.world.crs if k not in seen]:
            self._cr_deleted(key, None)
        for obj in items:
            self.on_cr_event("MODIFIED", obj)

    def _cr_deleted(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        """docs/protocol.md rule 4: unload from the watch's last copy, no finalizer needed."""
        self.held.forget(key)
        last = self.world.remove_cr(key) or (adapter_from_object(obj) if obj else None)
        if last is None:
            return
        logs.event(
            "cr_deleted", cr="/".join(key), adapter=last.adapter_name, target="/".join(last.target)
        )
        self._unload_leftover(last)
        self.recorder.forget_failures(lambda cr, pod: cr == key)
        self.swaps.forget(key)
        self.contested.discard(key)
        self.statuses.mark(c.key for c in self.world.crs_of(last.target))

    def _unload_leftover(self, cr: AdapterCR) -> None:
        """The name ``cr`` declared is no longer wanted on its target (deleted or renamed)."""
        pods = self.world.queue_unloads(cr)
        owner_pods = self.world.serving_pods([cr.target])  # a new owner of the name, if any
        self._request(sorted(set(pods) | set(owner_pods)), ReloadReason.CR_CHANGE)

    def on_pod_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """A pod of an InferenceService was added, changed or deleted."""
        key = object_key(obj)
        if event_type == "DELETED":
            self._pod_gone(key)
            return
        facts = labelled_pod(obj)
        if facts is None:
            return
        verdict = self.world.put_pod(facts, time.monotonic())
        self._worker(key)
        self.gate.decide(key)  # a stopped or new container: False at once, before any run
        self.trust.review(facts.target)
        if verdict.act is not None:
            self._request([key], verdict.act)
        if verdict.readiness_changed or verdict.invalidate:
            self.statuses.mark(c.key for c in self.world.crs_of(facts.target))

    def on_pod_snapshot(self, items: Objects) -> None:
        """A relist of pods: restarts and replacements missed meanwhile show up as differences."""
        seen = {object_key(obj) for obj in items}
        for key in [k for k in self.world.pods if k not in seen]:
            self._pod_gone(key)
        for obj in items:
            self.on_pod_event("MODIFIED", obj)

    def _pod_gone(self, key: Key) -> None:
        state = self.world.remove_pod(key)
        worker = self._workers.pop(key, None)
        if worker is not None:
            worker.close()
        self.trust.forget(key)
        self.gate.forget(key)
        if state is not None:
            self.recorder.forget_failures(lambda cr, pod: pod == state.facts.name)
            self.statuses.mark(c.key for c in self.world.crs_of(state.facts.target))

    # --- the pods' controller chain ----------------------------------------------------------

    def _owner_event(self, kind: str) -> Callable[[str, dict[str, Any]], None]:
        def on_event(event_type: str, obj: dict[str, Any]) -> None:
            """A ReplicaSet or Deployment was added, changed or deleted."""
            owned = owned_from_object(obj)
            if event_type == "DELETED":
                changed = self.world.remove_owner(kind, owned.uid)
            else:
                changed = self.world.put_owner(kind, owned)
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if changed and labels.get(SERVICE_LABEL):
                self._chain_changed((owned.namespace, str(labels[SERVICE_LABEL])))

        return on_event

    def _owner_snapshot(self, kind: str) -> Callable[[Objects], None]:
        def on_snapshot(items: Objects) -> None:
            """A relist of ReplicaSets or Deployments: replaces what was known of them."""
            if self.world.replace_owners(kind, [owned_from_object(obj) for obj in items]):
                for target in sorted({s.facts.target for s in self.world.pods.values()}):
                    self._chain_changed(target)

        return on_snapshot

    def _chain_changed(self, target: Key) -> None:
        """A link of ``target``'s pods' chains changed: judge them again, and run the serving
        ones (a pod trusted now gets its adapters; settled pods cost one ``/v1/models``)."""
        self.trust.review(target)
        self.statuses.mark(c.key for c in self.world.crs_of(target))
        self._request(self.world.serving_pods([target]), ReloadReason.CR_CHANGE)

    # --- pod runs ---------------------------------------------------------------------------

    def _worker(self, key: Key) -> PodWorker:
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = PodWorker(key, self)
        return worker

    def _request(self, keys: Iterable[Key], reason: ReloadReason) -> list[asyncio.Future[None]]:
        if self.stopping:
            return []
        return [self._worker(key).request(reason) for key in keys if key in self.world.pods]

    def _facts(self, key: Key) -> PodEndpoint | None:
        """The pod as the watch last showed it."""
        state = self.world.pods.get(key)
        return None if state is None else state.facts

    def _permitted(self, task: AdapterTask) -> bool:
        cr = self.world.crs.get(task.cr)
        return (
            cr is not None
            and cr.generation == task.generation
            and self.world.reverts.path(cr) == task.path  # not superseded by a rollback
            and (
                cr.operation is None
                or permission(cr.operation, datetime.now(UTC)) is Permission.ACT
            )
        )

    async def _read_key(self, ref: SecretRef) -> str:
        cached = self._secrets.get(ref)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        value = await self.kube.read_secret(ref)
        self._secrets[ref] = (value, time.monotonic() + self.settings.secret_ttl)
        return value

    async def run_pod(self, worker: PodWorker, reason: ReloadReason) -> None:
        """One run on one pod, then record what it did."""
        state = self.world.pods.get(worker.key)
        if state is None or not state.facts.serving or self.world.trust(state.facts) is not None:
            return  # gone, not serving, or not the target's: no request, no key
        now = datetime.now(UTC)
        work = self.world.pod_work(worker.key, now)
        self.metrics.pod_runs.labels(reason.value).inc()
        if work.empty:
            self.gate.decide(worker.key)
            return
        started = time.monotonic()
        streamed: dict[int, PodOutcome] = {}

        def as_it_happens(task: AdapterTask, outcome: PodOutcome) -> None:
            """Record each outcome when it comes, so statuses (and their Events) are written
            while the rest of the run goes on; not where a later load may evict this one."""
            if self.world.pods.get(worker.key) is state:
                streamed[len(streamed)] = outcome
                self.recorder.record_results(state, [(task, outcome)], reason, datetime.now(UTC))

        run = await run_pod(
            state.facts,
            work,
            read_key=self._read_key,
            timeouts=self.settings.timeouts,
            still_permitted=self._permitted,
            settled=state.settled,
            on_result=None if self.world.may_evict(state.facts.target) else as_it_happens,
            drain=self.swaps,
        )
        if self.world.pods.get(worker.key) is not state:
            logs.event(
                "pod_run_discarded",
                pod="/".join(worker.key),
                why="the pod restarted or was replaced meanwhile",
            )
            return
        state.settle(run.settled)
        self.gate.ran(state, run.ledger.served if run.listed else None)
        if run.untouched:
            return  # exactly as the last clean run left it: every outcome stands
        late = [r for i, r in enumerate(run.results) if streamed.get(i) is not r[1]]
        self.recorder.record(state, late, run.unloaded, reason, datetime.now(UTC))
        for ref in run.unauthorized:  # a key the server refused: read it again next time
            self._secrets.pop(ref, None)
        self.recorder.after_run(
            worker, state=state, run=run, reason=reason, started=started, declared=work.declared
        )

    async def _sweep_forever(self) -> None:
        """Verification: every Ready pod's ``/v1/models`` against the CRs, forever."""
        first = True
        while True:
            started = time.monotonic()
            pods = self.world.serving_pods()
            await asyncio.gather(*self._request(pods, ReloadReason.VERIFY))
            seconds = time.monotonic() - started
            self.metrics.sweep.observe(seconds)
            logs.event(
                "verify_sweep",
                logging.INFO if first else logging.DEBUG,
                pods=len(pods),
                crs=len(self.world.crs),
                seconds=round(seconds, 4),
            )
            first = False
            await asyncio.sleep(self.settings.verify_interval)

    # --- status and Events ------------------------------------------------------------------
