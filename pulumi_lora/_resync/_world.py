"""The loop's picture of the cluster: CRs, InferenceServices, pods and what each pod reported.

Indexed bookkeeping, fed by the watches and the pod runs, answering the controller's questions.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pulumi_lora._core import _ownership
from pulumi_lora._core._conditions import Availability
from pulumi_lora._core._llmkube import PodEndpoint, Target
from pulumi_lora._core._ownership import Owned, controller_chain, untrusted_message
from pulumi_lora._core._reconcile import PodOutcome, extra_arg_value, startup_adapters
from pulumi_lora._core._topology import refusal
from pulumi_lora._errors import NameCollision
from pulumi_lora._models import DEFAULT_DRAIN_SECONDS, DEFAULT_MAX_UNAVAILABLE
from pulumi_lora._resync._decide import (
    RECOVERY_REASONS,
    CapacityNote,
    Permission,
    PodVerdict,
    ReloadReason,
    classify_pod,
    permission,
)
from pulumi_lora._resync._reverts import Reverts
from pulumi_lora._resync._views import AdapterCR, Key, SecretRef


@dataclass(frozen=True)
class Recorded:
    """One pod's outcome for one CR, valid for that CR generation on that pod incarnation."""

    generation: int
    outcome: PodOutcome
    path: str = ""  # the path the task gave (a rolled-back generation gives the old one)


@dataclass(frozen=True)
class Unload:
    """An adapter name to remove from a pod because the CR that declared it is gone."""

    name: str
    api_key: SecretRef | None = None
    source: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The deleted CR's last copy (Events about the unload refer to it)."""


#: What a clean run left on a pod: its tasks and the name→path map the server then served.
Settled = tuple[tuple[tuple[Key, int, str, str, bool], ...], frozenset[tuple[str, str]]]


@dataclass
class PodRecord:
    """A pod plus what the loop knows about its server (written through the methods below)."""

    facts: PodEndpoint
    pending: ReloadReason | None = None
    ready_seen_at: float | None = None  # monotonic, when the loop saw it start serving
    outcomes: dict[Key, Recorded] = field(default_factory=dict)
    unloads: dict[str, Unload] = field(default_factory=dict)
    capacity: CapacityNote | None = None
    failures: int = 0
    not_before: float = 0.0  # monotonic; backoff after failures
    settled: Settled | None = None  # see PodWork.settled_by

    def settle(self, settled: Settled | None) -> None:
        """Keep what a run left on the pod (None: the run was not clean)."""
        self.settled = settled

    def unloaded(self, name: str) -> None:
        """A queued unload of ``name`` is done."""
        self.unloads.pop(name, None)

    def note_capacity(self, note: CapacityNote) -> None:
        """The server evicted (or could not evict) managed adapters: see ``CapacityNote``."""
        self.capacity = note

    def failed(self, not_before: float) -> None:
        """A run failed: one more consecutive failure; no run before ``not_before``."""
        self.failures += 1
        self.not_before = not_before

    def succeeded(self) -> None:
        """A run did not fail: the backoff is over."""
        self.failures, self.not_before = 0, 0.0

    def recovered(self) -> None:
        """The recovery after the pod turned Ready is measured: forget when it did."""
        self.ready_seen_at = None


@dataclass(frozen=True)
class AdapterTask:
    """One CR's adapter, to apply on one pod."""

    cr: Key
    generation: int
    name: str
    path: str
    pinned: bool
    api_key: SecretRef | None
    smoke: bool = True  # a smoke generation after each load (``pulumi-lora.dev/smoke-test``)
    #: A swap's pace on a gated pod in rotation (``_resync._drain``).
    max_unavailable: int = DEFAULT_MAX_UNAVAILABLE
    drain_seconds: float = DEFAULT_DRAIN_SECONDS


@dataclass(frozen=True)
class PodWork:
    """Everything one pod run does: apply ``tasks`` (in order), remove ``unloads``, and report
    ``capacity_skips`` (adapters the server evicted for lack of room) without reloading them."""

    tasks: tuple[AdapterTask, ...]
    unloads: tuple[Unload, ...]
    capacity_skips: frozenset[str]
    declared: frozenset[tuple[str, str]]

    @property
    def empty(self) -> bool:
        """Nothing to do on the pod."""
        return not self.tasks and not self.unloads

    def settled_by(self, served: Mapping[str, str]) -> Settled | None:
        """Pure: the fingerprint of this work on a server serving ``served``, when every task is
        already served with its path (the core's plan is then ``keep`` for each); else None.

        A pod whose fingerprint matches its last clean run's needs nothing, so a verification
        sweep over unchanged pods costs one ``/v1/models`` each, not one program per adapter.
        """
        if self.unloads or self.capacity_skips:
            return None
        if any(served.get(t.name) != t.path for t in self.tasks):
            return None
        return (
            tuple((t.cr, t.generation, t.name, t.path, t.pinned) for t in self.tasks),
            frozenset(served.items()),
        )


class World:
    """The cache. Keys are ``(namespace, name)``; targets are InferenceService keys."""

    def __init__(self, namespace: str | None = None) -> None:
        self.namespace = namespace
        self.crs: dict[Key, AdapterCR] = {}
        self.targets: dict[Key, Target] = {}
        self.pods: dict[Key, PodRecord] = {}
        self.replicasets: dict[str, Owned] = {}  # by UID: the links of the pods' chain
        self.deployments: dict[str, Owned] = {}
        #: Labelled pods outside their target's controller chain, as reported (the trust review
        #: decides when: see ``_trust.TrustReview``), with why.
        self.untrusted: dict[Key, str] = {}
        self.last_loaded: dict[Key, datetime] = {}
        self._crs_by_target: dict[Key, set[Key]] = defaultdict(set)
        self._pods_by_target: dict[Key, set[Key]] = defaultdict(set)
        self._claims: dict[tuple[Key, str], set[Key]] = defaultdict(set)
        #: Swaps whose new revision failed, given the old path again (``_reverts``).
        self.reverts = Reverts()

    # --- CRs --------------------------------------------------------------------------------

    def put_cr(self, cr: AdapterCR) -> AdapterCR | None:
        """Store ``cr`` (recorded outcomes stay: they carry the generation they are for);
        return the copy it replaces."""
        old = self.crs.get(cr.key)
        if old is not None:
            self._unindex(old)
        self.crs[cr.key] = cr
        self.reverts.declared(old, cr)
        self._crs_by_target[cr.target].add(cr.key)
        self._claims[(cr.target, cr.adapter_name)].add(cr.key)
        return old

    def remove_cr(self, key: Key) -> AdapterCR | None:
        """Forget a deleted CR and everything recorded for it; return its last copy."""
        old = self.crs.pop(key, None)
        if old is not None:
            self._unindex(old)
            self.reverts.forget(key)
            self.last_loaded.pop(key, None)
            for pod in self.pods.values():
                pod.outcomes.pop(key, None)
        return old

    def _unindex(self, cr: AdapterCR) -> None:
        self._crs_by_target[cr.target].discard(cr.key)
        self._claims[(cr.target, cr.adapter_name)].discard(cr.key)

    def crs_of(self, target: Key) -> list[AdapterCR]:
        """The CRs declaring an adapter on ``target``."""
        return [self.crs[k] for k in sorted(self._crs_by_target.get(target, ()))]

    def owner(self, target: Key, adapter_name: str) -> Key | None:
        """docs/protocol.md rule 5: the oldest CR claiming a name on a target owns it."""
        keys = self._claims.get((target, adapter_name))
        if not keys:
            return None
        if len(keys) == 1:
            return next(iter(keys))
        claimants = [self.crs[k] for k in keys]
        return min(claimants, key=lambda c: (c.created, c.namespace, c.name)).key

    def in_scope(self, target: Key) -> bool:
        """Whether the loop watches the target's namespace."""
        return self.namespace is None or target[0] == self.namespace

    def availability(self, cr: AdapterCR) -> Availability:
        """The ``Available`` verdict for one CR: target watched, present, sglang, name owned."""
        tns, tname = cr.target
        if not self.in_scope(cr.target):
            return Availability(
                False,
                "TargetNotWatched",
                f"the re-sync loop watches namespace {self.namespace} only, not {tns}",
            )
        target = self.targets.get(cr.target)
        if target is None:
            return Availability(
                False, "InferenceServiceNotFound", f"InferenceService {tns}/{tname} not found"
            )
        if target.runtime != "sglang":
            return Availability(
                False, "RuntimeMismatch", f'runtime="{target.runtime}", expected sglang'
            )
        why = refusal(target.extra_args, {"dataParallelSize": target.data_parallel_size})
        if why:  # one load cannot reach every request of a pod (``_core._topology``)
            return Availability(False, "PartialReach", why)
        owner = self.owner(cr.target, cr.adapter_name)
        if owner is not None and owner != cr.key:
            collision = NameCollision(
                cr.adapter_name, tns, tname, f"LoRAAdapter {owner[0]}/{owner[1]}"
            )
            return Availability(False, collision.reason, str(collision))
        served = self.startup_of(target)
        if served.get(cr.adapter_name, cr.path) != cr.path:
            source = f"the server's startup --lora-paths ({served[cr.adapter_name]})"
            collision = NameCollision(cr.adapter_name, tns, tname, source)
            return Availability(False, collision.reason, str(collision))
        return Availability(True, "InferenceServiceReady", self.untrusted_note(cr.target))

    def untrusted_note(self, target: Key) -> str:
        """The labelled pods of ``target`` reported as outside its chain, in one sentence."""
        ignored = {
            key[1]: self.untrusted[key]
            for key in sorted(self._pods_by_target.get(target, ()))
            if key in self.untrusted
        }
        return untrusted_message(target[1], ignored)

    @staticmethod
    def startup_of(target: Target) -> dict[str, str]:
        """Adapters the target's servers load at start (their ``--lora-paths``)."""
        return startup_adapters(target.extra_args, target.sglang_adapters)

    def may_evict(self, target: Key) -> bool:
        """Whether the target's servers may evict adapters when others load: only with
        ``--max-loaded-loras`` (or an unknown target). Elsewhere an outcome a load returned
        stands for the rest of the run, so it can be reported at once."""
        known = self.targets.get(target)
        return known is None or extra_arg_value(known.extra_args, "--max-loaded-loras") is not None

    # --- targets and pods -------------------------------------------------------------------

    def put_target(self, target: Target) -> bool:
        """Store an InferenceService; return whether anything the loop uses changed."""
        key = (target.namespace, target.name)
        old, self.targets[key] = self.targets.get(key), target
        return old != target

    def remove_target(self, key: Key) -> None:
        """Forget an InferenceService."""
        self.targets.pop(key, None)

    def owners(self, kind: str) -> dict[str, Owned]:
        """The ReplicaSets (``kind`` "replicasets") or Deployments ("deployments") by UID."""
        return self.replicasets if kind == "replicasets" else self.deployments

    def put_owner(self, kind: str, owned: Owned) -> bool:
        """Store a ReplicaSet or Deployment; return whether its identity or controller changed
        (its status changing often, that alone is nothing to the chain)."""
        known = self.owners(kind)
        old, known[owned.uid] = known.get(owned.uid), owned
        return old != owned

    def remove_owner(self, kind: str, uid: str) -> bool:
        """Forget a ReplicaSet or Deployment; return whether it was known."""
        return self.owners(kind).pop(uid, None) is not None

    def replace_owners(self, kind: str, owners: Iterable[Owned]) -> bool:
        """Replace every known ReplicaSet or Deployment (a relist); return whether that changed
        anything."""
        known = self.owners(kind)
        before = dict(known)
        known.clear()
        for owned in owners:
            known[owned.uid] = owned
        return known != before

    def mark_untrusted(self, pod: Key, why: str) -> bool:
        """Report a labelled pod as outside its target's chain; return whether that is news."""
        if self.untrusted.get(pod) == why:
            return False
        self.untrusted[pod] = why
        return True

    def clear_untrusted(self, pod: Key) -> bool:
        """The pod is trusted again (or gone); return whether it was reported."""
        return self.untrusted.pop(pod, None) is not None

    def note_loaded(self, cr: Key, when: datetime) -> None:
        """The adapter of ``cr`` was loaded somewhere at ``when`` (its ``lastLoadedAt``)."""
        self.last_loaded[cr] = when

    def trust(self, facts: PodEndpoint) -> str | None:
        """None when the pod's controller chain ends at its target InferenceService (or the
        chain is not required); else why not (``_core._ownership.controller_chain``)."""
        if not _ownership.REQUIRE_CONTROLLER_CHAIN:
            return None
        target = self.targets.get(facts.target)
        return controller_chain(
            facts.namespace,
            facts.controller,
            self.replicasets,
            self.deployments,
            target.uid if target is not None else "",
        )

    def labelled_pods_of(self, target: Key) -> list[PodRecord]:
        """Every pod labelled as ``target``'s, trusted or not, by name."""
        return [self.pods[k] for k in sorted(self._pods_by_target.get(target, ()))]

    def put_pod(self, facts: PodEndpoint, now: float) -> PodVerdict:
        """Store a pod update and say what it means (see :func:`classify_pod`)."""
        state = self.pods.get(facts.key)
        old = state.facts if state is not None else None
        verdict = classify_pod(old, facts, state.pending if state is not None else None)
        if state is None or verdict.invalidate:
            # The server lost its state: outcomes, pending unloads, capacity notes and backoff
            # were about a process that is gone.
            state = PodRecord(facts)
            self.pods[facts.key] = state
            self._pods_by_target[facts.target].add(facts.key)
        state.facts = facts
        state.pending = verdict.pending
        if verdict.act in RECOVERY_REASONS:
            state.ready_seen_at = now
        if verdict.act is not None:
            state.failures, state.not_before = 0, 0.0
        return verdict

    def seed_pod(self, facts: PodEndpoint) -> None:
        """Store a pod from the first listing: nothing is inferred about its past."""
        self.pods[facts.key] = PodRecord(facts)
        self._pods_by_target[facts.target].add(facts.key)

    def remove_pod(self, key: Key) -> PodRecord | None:
        """Forget a pod that is gone."""
        state = self.pods.pop(key, None)
        if state is not None:
            self._pods_by_target[state.facts.target].discard(key)
        return state

    def pods_of(self, target: Key) -> list[PodRecord]:
        """The pods of ``target`` (those its controller chain vouches for), by name."""
        return [s for s in self.labelled_pods_of(target) if self.trust(s.facts) is None]

    # --- what a pod should be given ---------------------------------------------------------

    def declared_for(self, target: Key) -> frozenset[tuple[str, str]]:
        """``(name, path)`` of every adapter owned on ``target`` by a CR the loop may act on."""
        return frozenset(
            (cr.adapter_name, cr.path)
            for cr in self.crs_of(target)
            if self.owner(target, cr.adapter_name) == cr.key
        )

    def pod_work(self, key: Key, now: datetime) -> PodWork:
        """What one pod run must do now.

        Every CR of the pod's target that owns its name, whose target is usable and whose
        operation annotation allows it (docs/protocol.md), pinned ones first; plus the names
        left by deleted CRs that nobody claims again. Adapters the server evicted for lack of
        room stay reported, not reloaded, until what is declared for the target changes.
        """
        state = self.pods[key]
        target = state.facts.target
        owned = [c for c in self.crs_of(target) if self.owner(target, c.adapter_name) == c.key]
        declared = frozenset((cr.adapter_name, cr.path) for cr in owned)
        if state.capacity is not None and not state.capacity.still_applies(declared):
            state.capacity = None
        known = self.targets.get(target)
        usable = known is not None and known.runtime == "sglang" and self.in_scope(target)
        startup = self.startup_of(known) if known is not None and usable else {}
        # The per-target half of ``availability`` once, the per-CR half inline: one pod run
        # asks this of every CR of a target, every sweep.
        tasks = [
            AdapterTask(
                cr.key,
                cr.generation,
                cr.adapter_name,
                self.reverts.path(cr),
                cr.pinned,
                cr.api_key,
                cr.smoke,
                cr.max_unavailable,
                cr.drain_seconds,
            )
            for cr in owned
            if usable
            and startup.get(cr.adapter_name, cr.path) == cr.path
            and (cr.operation is None or permission(cr.operation, now) is Permission.ACT)
        ]
        tasks.sort(key=lambda t: (not t.pinned, t.name))
        for name in [n for n in state.unloads if self.owner(target, n) is not None]:
            del state.unloads[name]  # claimed again: the new owner's task decides
        skips = state.capacity.evicted if state.capacity is not None else frozenset()
        return PodWork(tuple(tasks), tuple(state.unloads.values()), skips, declared)

    def record(self, key: Key, task: AdapterTask, outcome: PodOutcome) -> bool:
        """Keep a pod's outcome for a task; return whether it differs from the last one."""
        state = self.pods.get(key)
        cr = self.crs.get(task.cr)
        if state is None or cr is None or cr.generation != task.generation:
            return False  # the pod or the declaration moved on while the run was in flight
        fresh = Recorded(task.generation, outcome, task.path)
        changed = state.outcomes.get(task.cr) != fresh
        state.outcomes[task.cr] = fresh
        return changed

    def outcomes_for(self, cr: AdapterCR) -> list[PodOutcome] | None:
        """Every pod's outcome for ``cr`` at its generation; None while a serving pod has none
        yet (its run is still to come, and a status now would report a half-done reconcile),
        or, while the generation is rolled back, serves the failed path still."""
        revert = self.reverts.active(cr)
        found = []
        for state in self.pods_of(cr.target):
            if not state.facts.serving:
                found.append(PodOutcome(state.facts.name, loaded=False, waiting=True))
                continue
            recorded = state.outcomes.get(cr.key)
            if recorded is None or recorded.generation != cr.generation:
                return None
            if revert is not None and recorded.path != revert.old_path:
                return None
            found.append(recorded.outcome)
        return found

    def capacity_notes(self, target: Key) -> list[CapacityNote]:
        """Pods of ``target`` whose server evicted managed adapters."""
        return [s.capacity for s in self.pods_of(target) if s.capacity is not None]

    def queue_unloads(self, cr: AdapterCR) -> list[Key]:
        """A CR is gone: unload its name from every pod of its old target unless another CR
        claims it there (rule 4 and 5). Returns the pods that now have work."""
        if self.owner(cr.target, cr.adapter_name) is not None:
            return []
        pods = []
        for state in self.pods_of(cr.target):
            state.unloads[cr.adapter_name] = Unload(cr.adapter_name, cr.api_key, cr.raw)
            pods.append(state.facts.key)
        return pods

    def serving_pods(self, targets: Iterable[Key] | None = None) -> list[Key]:
        """Keys of the serving pods (of ``targets``, or all)."""
        keys = (
            self.pods
            if targets is None
            else [k for t in targets for k in self._pods_by_target.get(t, ())]
        )
        return sorted(
            k for k in keys if self.pods[k].facts.serving and self.trust(self.pods[k].facts) is None
        )
