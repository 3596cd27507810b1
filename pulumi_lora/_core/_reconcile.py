"""The decision core: which pod needs what, what happened, and what the conditions say.

Shared by the Pulumi provider and the re-sync loop. Everything here is pure: the callers observe
(list pods, read ``/v1/models``), ask :func:`plan` for one action per pod, drive each pod's
:func:`pod_program` with a real client (sync or async, the program does not care), and hand the
outcomes to :func:`build_conditions`. No I/O, no clock (``now`` is a parameter), no HTTP or
Kubernetes library.

A pod program is a generator in the style of httpx2's auth flows: it yields a :data:`Call`
(load, unload or list), receives a :class:`Reply` for it, and returns a :class:`PodOutcome`.
That keeps the subtle part (already loaded with the same path is success, with another path it
is a swap: unload, then load) in one tested place for both drivers.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from pulumi_lora._models import (
    UNLOAD_FINALIZER,
    Condition,
    ConditionKind,
    ConditionStatus,
    Policy,
)


@dataclass(frozen=True)
class Desired:
    """The adapter one LoRAAdapter CR declares."""

    name: str
    path: str
    pinned: bool = False


@dataclass(frozen=True)
class PodView:
    """What was observed of one pod of the target InferenceService.

    ``adapters`` is the pod's name→path map from ``/v1/models``, or None when it could not be
    read (the pod is then acted on blindly and the replies tell the truth).
    """

    name: str
    ready: bool
    state: str = ""
    uid: str = ""
    adapters: Mapping[str, str] | None = None


class ActionKind(StrEnum):
    """What one pod needs."""

    KEEP = "keep"  # loaded with the desired path already
    LOAD = "load"  # not loaded (or unknown): load it
    SWAP = "swap"  # loaded with another path: unload, then load
    UNLOAD = "unload"  # loaded but no longer wanted (delete, rename, retarget)
    WAIT = "wait"  # not Ready: nothing to do until it is


@dataclass(frozen=True)
class PodAction:
    """One pod's action, with the path it was seen serving (if any)."""

    pod: str
    kind: ActionKind
    seen_path: str | None = None


def plan(desired: Desired | None, pods: Sequence[PodView], name: str) -> tuple[PodAction, ...]:
    """Decide one action per pod.

    ``desired`` None means the adapter ``name`` must be gone from every pod (delete). Pods that
    are not Ready wait, except for unloads, which are attempted on any pod that is listed as
    serving the adapter (a pod on its way out may still serve it).
    """
    actions = []
    for pod in pods:
        seen = None if pod.adapters is None else pod.adapters.get(name)
        if desired is None:
            if pod.adapters is not None and seen is None:
                kind = ActionKind.KEEP
            elif pod.ready or seen is not None:
                kind = ActionKind.UNLOAD
            else:
                kind = ActionKind.WAIT
        elif not pod.ready:
            kind = ActionKind.WAIT
        elif seen == desired.path:
            kind = ActionKind.KEEP
        elif seen is not None:
            kind = ActionKind.SWAP
        else:
            kind = ActionKind.LOAD
        actions.append(PodAction(pod.name, kind, seen))
    return tuple(actions)


# --- the per-pod program ------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadCall:
    """Ask the pod to load ``name`` from ``path``."""

    name: str
    path: str
    pinned: bool = False


@dataclass(frozen=True)
class UnloadCall:
    """Ask the pod to unload ``name``."""

    name: str


@dataclass(frozen=True)
class ListCall:
    """Ask the pod for its adapters (``/v1/models``)."""


Call = LoadCall | UnloadCall | ListCall


class ReplyKind(StrEnum):
    """How a pod answered a call."""

    LOADED = "loaded"
    ALREADY_LOADED = "already_loaded"
    UNLOADED = "unloaded"
    NOT_LOADED = "not_loaded"  # unload of a name the server does not have
    LISTED = "listed"
    FAILED = "failed"


@dataclass(frozen=True)
class Reply:
    """A driver's translation of the server's answer (or failure) to one call."""

    kind: ReplyKind
    path: str | None = None  # ALREADY_LOADED: the path it is loaded with, when known
    adapters: Mapping[str, str] = field(default_factory=dict)  # LISTED
    reason: str = ""  # FAILED: CamelCase reason
    message: str = ""  # FAILED: readable message (never a secret)
    retryable: bool = False  # FAILED: worth retrying later
    unknown: bool = False  # FAILED: sent, but no answer seen: the server may have acted on it


@dataclass(frozen=True)
class PodOutcome:
    """What one pod ended up with after its program ran."""

    pod: str
    loaded: bool
    path: str | None = None
    did_load: bool = False  # this run sent a successful load (lastLoadedAt moves)
    did_unload: bool = False
    waiting: bool = False  # pod not Ready, nothing attempted
    reason: str = ""  # on failure
    error: str = ""  # on failure
    retryable: bool = False
    maybe_loaded: bool = False  # a load got no answer: SGLang may have loaded it (or still may)


PodProgram = Generator[Call, Reply, PodOutcome]


def pod_program(action: PodAction, desired: Desired | None, name: str) -> PodProgram:
    """The calls one pod needs for ``action``, reacting to each reply (see module docstring)."""
    pod = action.pod
    if action.kind is ActionKind.WAIT:
        return PodOutcome(pod, loaded=False, waiting=True)
    if action.kind is ActionKind.KEEP:
        if desired is None:
            return PodOutcome(pod, loaded=False)
        return PodOutcome(pod, loaded=True, path=desired.path)
    if action.kind is ActionKind.UNLOAD or desired is None:
        reply = yield UnloadCall(name)
        if reply.kind is ReplyKind.FAILED:
            return _failed(pod, reply, loaded=action.seen_path is not None, path=action.seen_path)
        return PodOutcome(pod, loaded=False, did_unload=reply.kind is ReplyKind.UNLOADED)
    if action.kind is ActionKind.SWAP:
        return (yield from _swap(pod, desired, action.seen_path))
    return (yield from _load(pod, desired))


def _load(pod: str, desired: Desired) -> PodProgram:
    reply = yield LoadCall(desired.name, desired.path, desired.pinned)
    if reply.kind is ReplyKind.LOADED:
        return PodOutcome(pod, loaded=True, path=desired.path, did_load=True)
    if reply.kind is ReplyKind.FAILED:
        return _failed(pod, reply, loaded=False, maybe_loaded=reply.unknown)
    # Already loaded: success with the same path, a swap with another one.
    current = reply.path
    if current is None:
        listed = yield ListCall()
        if listed.kind is ReplyKind.FAILED:
            return _failed(pod, listed, loaded=False)
        current = listed.adapters.get(desired.name)
    if current == desired.path:
        return PodOutcome(pod, loaded=True, path=desired.path)
    return (yield from _swap(pod, desired, current))


def _swap(pod: str, desired: Desired, old_path: str | None) -> PodProgram:
    reply = yield UnloadCall(desired.name)
    if reply.kind is ReplyKind.FAILED:
        # Not loaded *as declared*: the pod serves the old path (or, after a timed-out unload,
        # maybe nothing), so it must not count towards the readiness policy.
        return _failed(
            pod,
            reply,
            loaded=False,
            path=old_path,
            context=f"unloading the old path {old_path!r} before the swap failed",
        )
    reply = yield LoadCall(desired.name, desired.path, desired.pinned)
    if reply.kind is ReplyKind.LOADED:
        return PodOutcome(pod, loaded=True, path=desired.path, did_load=True, did_unload=True)
    if reply.kind is ReplyKind.ALREADY_LOADED and reply.path == desired.path:
        # Someone else (the re-sync loop, an implicit reload) won the race with the same path.
        return PodOutcome(pod, loaded=True, path=desired.path, did_unload=True)
    if reply.kind is ReplyKind.FAILED:
        return _failed(
            pod,
            reply,
            loaded=False,
            context=f"unloaded {old_path!r}, then loading {desired.path!r} failed",
            maybe_loaded=reply.unknown,
        )
    return PodOutcome(
        pod,
        loaded=False,
        reason="SwapConflict",
        retryable=True,
        error=f"{desired.name!r} reappeared with path {reply.path!r} during a swap",
    )


def _failed(
    pod: str,
    reply: Reply,
    *,
    loaded: bool,
    path: str | None = None,
    context: str = "",
    maybe_loaded: bool = False,
) -> PodOutcome:
    message = f"{context}: {reply.message}" if context else reply.message
    return PodOutcome(
        pod,
        loaded=loaded,
        path=path,
        reason=reply.reason or "LoadUnsuccessful",
        error=message,
        retryable=reply.retryable,
        maybe_loaded=maybe_loaded,
    )


def rollback_plan(outcomes: Sequence[PodOutcome]) -> tuple[PodAction, ...]:
    """After a failed create: unload from exactly the pods this run loaded or may have loaded
    (a load sent but never answered: SGLang keeps loading when the client gives up), nothing
    else."""
    return tuple(
        PodAction(o.pod, ActionKind.UNLOAD, o.path)
        for o in outcomes
        if o.did_load or o.maybe_loaded
    )


def unsettled(outcomes: Sequence[PodOutcome], rolled_back: Sequence[PodOutcome]) -> tuple[str, ...]:
    """The pods where a rolled-back load may still land: it was sent but no answer came (a
    timeout, or a connection dropped after the request went out) and the rollback's unload
    removed nothing (or failed).

    A load that was already applied is removed by that unload (SGLang serializes loads and
    unloads, so an unload sent after a load still running waits for it); one held back before
    the server started it (a stalled proxy, a busy HTTP layer, a proxy that dropped the client's
    connection but still forwards the request) lands later, so the caller must keep watching
    these pods for a while. A dropped connection is no proof that the server is done with the
    request, so it is watched like a timeout.
    """
    late = {o.pod for o in outcomes if o.maybe_loaded}
    return tuple(r.pod for r in rolled_back if r.pod in late and not r.did_unload)


# --- readiness policy, summaries and conditions -------------------------------------------------


#: The readiness policy is ``_models.Policy`` (the resource's ``readiness_policy``); this name
#: stays for the operations module until it names ``Policy`` itself.
ReadinessPolicy = Policy


@dataclass(frozen=True)
class Availability:
    """Whether the target exists and can take adapters (the ``Available`` condition)."""

    ok: bool
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Summary:
    """The outcomes of one reconcile, counted."""

    ready_pods: int
    loaded_pods: int
    waiting_pods: int
    failures: tuple[PodOutcome, ...]

    @property
    def any_failed(self) -> bool:
        """Whether any pod ended in an error."""
        return bool(self.failures)


def summarize(outcomes: Sequence[PodOutcome]) -> Summary:
    """Count ready, loaded, waiting and failed pods."""
    active = [o for o in outcomes if not o.waiting]
    return Summary(
        ready_pods=len(active),
        loaded_pods=sum(1 for o in active if o.loaded),
        waiting_pods=len(outcomes) - len(active),
        failures=tuple(o for o in active if o.error),
    )


def is_loaded(summary: Summary, policy: Policy) -> bool:
    """Apply the readiness policy."""
    if summary.ready_pods == 0:
        return False
    if policy is Policy.ANY_READY_POD:
        return summary.loaded_pods >= 1
    return summary.loaded_pods == summary.ready_pods


def loaded_message(summary: Summary) -> str:
    """``loaded on 3/4 pods; pod x: ...`` — the per-pod detail the closed schema leaves room for."""
    parts = [f"loaded on {summary.loaded_pods}/{summary.ready_pods} Ready pods"]
    if summary.waiting_pods:
        parts.append(f"{summary.waiting_pods} pod(s) not Ready")
    parts += [f"pod {o.pod}: {o.error}" for o in summary.failures]
    return "; ".join(parts)


def build_conditions(
    *,
    availability: Availability,
    summary: Summary | None,
    policy: Policy,
    generation: int,
    previous: Sequence[Condition],
    now: datetime,
) -> list[Condition]:
    """Available, Loaded, Error and Ready for one reconcile.

    ``summary`` is None when nothing could be attempted (target missing or not sglang).
    ``lastTransitionTime`` is carried over from ``previous`` for every condition whose status did
    not flip.
    """
    fresh: list[tuple[ConditionKind, ConditionStatus, str, str]] = []
    fresh.append(
        (
            ConditionKind.AVAILABLE,
            _status(availability.ok),
            availability.reason,
            availability.message,
        )
    )
    if summary is None:
        fresh.append(
            (ConditionKind.LOADED, ConditionStatus.FALSE, availability.reason, availability.message)
        )
        fresh.append(
            (ConditionKind.ERROR, ConditionStatus.TRUE, availability.reason, availability.message)
        )
        loaded = False
    else:
        loaded = is_loaded(summary, policy)
        message = loaded_message(summary)
        if loaded:
            loaded_reason = "AdapterLoaded"
        elif summary.ready_pods == 0:
            loaded_reason = "NoReadyPods"
        elif summary.failures:
            loaded_reason = summary.failures[0].reason or "LoadUnsuccessful"
        else:
            loaded_reason = "PartiallyLoaded"
        fresh.append((ConditionKind.LOADED, _status(loaded), loaded_reason, message))
        if summary.failures:
            first = summary.failures[0]
            fresh.append(
                (
                    ConditionKind.ERROR,
                    ConditionStatus.TRUE,
                    first.reason or "LoadUnsuccessful",
                    message,
                )
            )
        else:
            fresh.append((ConditionKind.ERROR, ConditionStatus.FALSE, "NoError", ""))
    ready = availability.ok and loaded
    fresh.append(
        (
            ConditionKind.READY,
            _status(ready),
            "AdapterReady" if ready else "AdapterNotReady",
            "" if ready else _first_problem(fresh),
        )
    )
    return merge_conditions(previous, _conditions(fresh, generation, now))


def unload_conditions(
    still_serving: Sequence[PodOutcome],
    *,
    generation: int,
    previous: Sequence[Condition],
    now: datetime,
) -> list[Condition]:
    """Pure: the conditions of a CR whose deletion is held because the Ready pods
    ``still_serving`` failed to unload its adapter (their errors say why).

    ``Loaded`` stays True (the adapter is still served), ``Error`` names every pod, ``Ready`` is
    False while the deletion waits; ``Available`` is kept from ``previous``.
    """
    pods = "; ".join(f"pod {o.pod}: {o.error}" for o in still_serving)
    message = (
        f"still served by {len(still_serving)} Ready pod(s) after a failed unload ({pods}); "
        f"finalizer {UNLOAD_FINALIZER} holds the CR until every pod has unloaded it"
    )
    fresh = [
        (ConditionKind.LOADED, ConditionStatus.TRUE, "UnloadUnsuccessful", message),
        (ConditionKind.ERROR, ConditionStatus.TRUE, "UnloadUnsuccessful", message),
        (ConditionKind.READY, ConditionStatus.FALSE, "Deleting", message),
    ]
    return merge_conditions(previous, _conditions(fresh, generation, now))


def _conditions(
    fresh: Sequence[tuple[ConditionKind, ConditionStatus, str, str]],
    generation: int,
    now: datetime,
) -> list[Condition]:
    """Conditions from ``(kind, status, reason, message)``, stamped ``now`` at ``generation``."""
    return [
        Condition(
            type=kind.value,
            status=status,
            reason=reason,
            message=message[:32768],
            last_transition_time=now,
            observed_generation=generation,
        )
        for kind, status, reason, message in fresh
    ]


def merge_conditions(previous: Sequence[Condition], fresh: Sequence[Condition]) -> list[Condition]:
    """Keep ``lastTransitionTime`` where a condition's status is unchanged; keep other types."""
    old = {c.type: c for c in previous}
    merged = []
    for cond in fresh:
        before = old.pop(cond.type, None)
        if before is not None and before.status == cond.status:
            merged.append(cond.replace(last_transition_time=before.last_transition_time))
        else:
            merged.append(cond)
    merged += old.values()
    return merged


def _status(flag: bool) -> ConditionStatus:
    return ConditionStatus.TRUE if flag else ConditionStatus.FALSE


def _first_problem(fresh: Sequence[tuple[ConditionKind, ConditionStatus, str, str]]) -> str:
    for kind, status, reason, message in fresh:
        bad = (
            status is ConditionStatus.TRUE
            if kind is ConditionKind.ERROR
            else (status is not ConditionStatus.TRUE)
        )
        if bad:
            return f"{kind.value}: {reason}" + (f" ({message})" if message else "")
    return ""


# --- InferenceService facts ---------------------------------------------------------------------


def startup_adapters(
    extra_args: Sequence[str], sglang_adapters: Sequence[Mapping[str, str]]
) -> dict[str, str]:
    """Adapters a server loads at start (``--lora-paths`` and ``sglangConfig.loraAdapters``).

    Understands SGLang's three ``--lora-paths`` item formats: ``PATH`` (SGLang names it by the
    whole path),
    ``NAME=PATH`` and a JSON object with ``lora_name``/``lora_path``. Used to detect a declared
    adapter whose name a server already serves from its command line with another path.
    """
    found = {a["name"]: a["path"] for a in sglang_adapters if "name" in a and "path" in a}
    args = list(extra_args)
    if len(args) == 1 and " " in args[0]:
        args = shlex.split(args[0])
    collecting = False
    for raw in args:
        arg = raw
        if raw.startswith("--lora-paths="):
            arg, collecting = raw.split("=", 1)[1], True
        elif raw == "--lora-paths":
            collecting = True
            continue
        elif arg.startswith("--"):
            collecting = False
            continue
        if not collecting:
            continue
        if arg.startswith("{"):
            item = json.loads(arg)
            found[str(item["lora_name"])] = str(item["lora_path"])
        elif "=" in arg:
            key, value = arg.split("=", 1)
            found[key] = value
        else:
            found[arg] = arg
    return found


def extra_arg_value(extra_args: Sequence[str], flag: str) -> str | None:
    """The value given to ``flag`` in an args list (``--flag v`` or ``--flag=v``), if any."""
    args = list(extra_args)
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
