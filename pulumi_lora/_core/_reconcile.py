"""The decision core: which pod needs what, and each pod's program (load, swap, unload).

Pure and shared by the provider and the re-sync loop: callers observe, ask :func:`plan` for one
action per pod and drive each :func:`pod_program` (a generator yielding a :data:`Call` and taking
a :class:`Reply`) with a sync or async client, so both decide alike. No I/O, no clock.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum


@dataclass(frozen=True)
class Desired:
    """The adapter one LoRAAdapter CR declares; ``smoke``: each load is followed by one
    generation through it (``smoke_test``), and counts only if that answers a finite logprob."""

    name: str
    path: str
    pinned: bool = False
    smoke: bool = True


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


#: The failure reason of a load whose smoke generation failed (:class:`SmokeCall`).
SMOKE_FAILED = "SmokeFailed"


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


@dataclass(frozen=True)
class SmokeCall:
    """Ask the pod for one greedy token through ``name``, with its logprob (``/generate``)."""

    name: str


Call = LoadCall | UnloadCall | ListCall | SmokeCall


class ReplyKind(StrEnum):
    """How a pod answered a call."""

    LOADED = "loaded"
    ALREADY_LOADED = "already_loaded"
    UNLOADED = "unloaded"
    NOT_LOADED = "not_loaded"  # unload of a name the server does not have
    LISTED = "listed"
    SMOKED = "smoked"  # the generation through the adapter gave a finite logprob
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
    unsettled: bool = False  # a call got no answer: the server may still act on it


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
        loaded = PodOutcome(pod, loaded=True, path=desired.path, did_load=True)
        return (yield from _smoke(desired, loaded))
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
        loaded = PodOutcome(pod, loaded=True, path=desired.path, did_load=True, did_unload=True)
        return (yield from _smoke(desired, loaded))
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


def _smoke(desired: Desired, loaded: PodOutcome) -> PodProgram:
    """After a successful load (``loaded``), when ``desired.smoke``: one generation through the
    adapter. A failed one is a failed load: the adapter is unloaded again, so the pod is left
    without it (the outcome counts a load only if that unload failed: a rollback retries it)."""
    if not desired.smoke:
        return loaded
    reply = yield SmokeCall(desired.name)
    if reply.kind is not ReplyKind.FAILED:
        return loaded
    error = f"smoke generation after the load: {reply.message}"
    unload = yield UnloadCall(desired.name)
    stuck = unload.kind is ReplyKind.FAILED
    if stuck:
        error += f"; unloading it again failed: {unload.message}"
    return replace(
        loaded,
        loaded=False,
        path=None,
        did_load=stuck,
        reason=SMOKE_FAILED,
        error=error,
        retryable=reply.retryable,
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
        unsettled=reply.unknown,
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
