"""The re-sync loop's decisions as pure functions: pod events, permission, backoff, Leases.

No I/O, no clock and no randomness: time and a random fraction are parameters. Imports neither
httpx2 nor lightkube, even transitively.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._models import parse_time

#: docs/protocol.md rule 2: an operation annotation younger than this means hands off.
OPERATION_LEASE = timedelta(minutes=5)


# --- pod events ---------------------------------------------------------------------------------


class ReloadReason(StrEnum):
    """Why a pod's adapters are (re)applied; also the ``reason`` label of the metrics."""

    NEW_POD = "new_pod"  # a pod UID never seen before
    RESTART = "restart"  # restartCount went up: the server lost its dynamic adapters
    BECAME_READY = "became_ready"  # Ready again without a restart (a probe flapped)
    CR_CHANGE = "cr_change"  # a LoRAAdapter was created, changed or deleted
    VERIFY = "verify"  # the periodic (or start-up) check of /v1/models


#: When several causes are pending for one pod, the run is labelled with the strongest one.
_STRENGTH = {
    ReloadReason.NEW_POD: 5,
    ReloadReason.RESTART: 4,
    ReloadReason.BECAME_READY: 3,
    ReloadReason.CR_CHANGE: 2,
    ReloadReason.VERIFY: 1,
}

#: Reasons that start a "pod Ready → all adapters loaded" measurement.
RECOVERY_REASONS = frozenset(
    {ReloadReason.NEW_POD, ReloadReason.RESTART, ReloadReason.BECAME_READY}
)


def strongest(reasons: Iterable[ReloadReason]) -> ReloadReason:
    """The reason a coalesced run is counted under (VERIFY when there is none)."""
    return max(reasons, key=_STRENGTH.__getitem__, default=ReloadReason.VERIFY)


@dataclass(frozen=True)
class PodVerdict:
    """What one pod update means.

    ``act``: sync the pod now, for this reason. ``pending``: a cause seen while the pod is not
    Ready, kept until it is. ``invalidate``: the server lost its state (new UID or restart), so
    what was recorded about it is void. ``readiness_changed``: the set of serving servers of
    its target changed, so the CRs there must recompute their status.
    """

    act: ReloadReason | None
    pending: ReloadReason | None
    invalidate: bool
    readiness_changed: bool


def classify_pod(
    old: PodEndpoint | None, new: PodEndpoint, pending: ReloadReason | None
) -> PodVerdict:
    """Pure: the meaning of a pod going from ``old`` (None: never seen) to ``new``.

    A new UID or a restartCount increase is remembered until the pod serves (Ready with an IP)
    and then acted on at once; a plain transition to serving is ``became_ready``.
    """
    cause: ReloadReason | None = None
    if old is None or old.uid != new.uid:
        cause, pending = ReloadReason.NEW_POD, None
    elif new.restart_count > old.restart_count:
        cause = ReloadReason.RESTART
    if cause is not None:
        pending = cause if pending is None else strongest((pending, cause))
    was_serving = old is not None and old.uid == new.uid and old.serving
    act: ReloadReason | None = None
    if new.serving and (pending is not None or not was_serving):
        act, pending = pending or ReloadReason.BECAME_READY, None
    if old is not None and old.uid != new.uid:  # another server: a change if either served
        serving_changed = old.serving or new.serving
    else:
        serving_changed = was_serving != new.serving
    return PodVerdict(
        act=act, pending=pending, invalidate=cause is not None, readiness_changed=serving_changed
    )


# --- the provider's operation annotation (docs/protocol.md rules 2 and 3) ----------------------


class Permission(StrEnum):
    """What the loop may do with one CR's adapter right now."""

    ACT = "act"  # load, swap, report
    HANDS_OFF = "hands_off"  # the provider is mid-operation: neither act nor write status
    DELETING = "deleting"  # ``delete@``: never load again; the deletion itself unloads


def permission(
    operation: str | None, now: datetime, lease: timedelta = OPERATION_LEASE
) -> Permission:
    """Pure: ``pulumi-lora.dev/operation`` (``update@<RFC3339>``/``delete@<RFC3339>``) → a rule.

    ``delete@`` forbids loads whatever its age. ``update@`` younger than ``lease`` (or dated in
    the future, a skewed clock) means hands off; older is an abandoned ``pulumi up`` and ignored,
    as is an annotation the loop can't read (it can't be proven young).
    """
    if not operation:
        return Permission.ACT
    kind, _, stamp = operation.partition("@")
    if kind == "delete":
        return Permission.DELETING
    try:
        started = parse_time(stamp)
    except ValueError:
        return Permission.ACT
    if kind == "update" and started is not None and now - started < lease:
        return Permission.HANDS_OFF
    return Permission.ACT


def lease_left(operation: str | None, now: datetime, lease: timedelta = OPERATION_LEASE) -> float:
    """Pure: seconds until the provider's operation (``update@``/``delete@<RFC3339>``) is past
    its lease and the loop may act for it (docs/protocol.md rule 2); 0 when it already is, or
    when there is none or it can't be read (it can't be proven young). A stamp in the future (a
    skewed clock) counts as made now."""
    if not operation:
        return 0.0
    _, _, stamp = operation.partition("@")
    try:
        started = parse_time(stamp)
    except ValueError:
        return 0.0
    if started is None:
        return 0.0
    left = (min(started, now) + lease - now).total_seconds()
    return max(0.0, left)


# --- backoff ------------------------------------------------------------------------------------


def backoff_delay(failures: int, random_fraction: float, *, base: float, cap: float) -> float:
    """Pure: seconds to wait after ``failures`` consecutive failed runs on one pod.

    Exponential (``base·2^(failures-1)``, at most ``cap``) with "equal jitter": the delay is
    drawn from the upper half of that window by ``random_fraction`` ∈ [0, 1), so pods that failed
    together (an outage) don't retry in lockstep, yet none retries sooner than half the window.
    """
    if failures <= 0:
        return 0.0
    window = min(cap, base * 2.0 ** min(failures - 1, 62))
    return window / 2 + window / 2 * min(max(random_fraction, 0.0), 1.0)


# --- watches ------------------------------------------------------------------------------------


class WatchAction(StrEnum):
    """How to resume a broken watch."""

    REWATCH = "rewatch"  # watch again from the last resourceVersion seen
    RELIST = "relist"  # list again (and diff against the cache), then watch from the list's


def after_watch_error(
    status_code: int | None, failures: int, random_fraction: float
) -> tuple[WatchAction, float]:
    """Pure: 410 Gone (the resourceVersion expired) → relist now; anything else → re-watch from
    the last version after a jittered backoff of at most 5 s (the apiserver may be restarting,
    and pods that restart meanwhile are only seen once the watch is back).
    """
    if status_code == 410:
        return WatchAction.RELIST, 0.0
    return WatchAction.REWATCH, backoff_delay(failures, random_fraction, base=0.2, cap=5.0)


# --- leader election ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a ``coordination.k8s.io/v1`` Lease that election reads."""

    holder: str | None
    duration: float
    renew_time: str | None
    transitions: int = 0


class LeaseMove(StrEnum):
    """What a candidate does with the Lease on one round."""

    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # we hold it
    TAKE_OVER = "take_over"  # free (released) or expired
    WAIT = "wait"  # someone else holds it


def lease_move(record: LeaseRecord | None, me: str, unchanged_for: float) -> LeaseMove:
    """Pure: client-go's rule. ``unchanged_for`` is how long (on *our* monotonic clock) the
    record has looked the same; expiry is judged on it, never on the holder's wall clock, so a
    skewed clock can't make two leaders.
    """
    if record is None:
        return LeaseMove.CREATE
    if record.holder == me:
        return LeaseMove.RENEW
    if not record.holder or unchanged_for >= record.duration:
        return LeaseMove.TAKE_OVER
    return LeaseMove.WAIT


# --- capacity (--max-loaded-loras) --------------------------------------------------------------


@dataclass
class LoadLedger:
    """What one pod was seen serving during one run, to spot evictions as they happen.

    SGLang answers every successful load with the full name→path map. An adapter that was
    served (listed, or loaded by this run) and is missing from the map a *later load* returned,
    without this run unloading it, was evicted by that load: the server holds fewer adapters
    than are declared for it. Out-of-band unloads never show up this way (no load of ours
    coincides with them), so they are healed rather than mistaken for capacity.
    Pure bookkeeping; the caller feeds it the replies.
    """

    served: dict[str, str] = field(default_factory=dict)
    evicted: dict[str, str] = field(default_factory=dict)
    loads: int = 0

    def listed(self, adapters: Mapping[str, str] | None) -> None:
        """``/v1/models`` answered (None: it could not be read)."""
        if adapters is not None:
            self.served = dict(adapters)

    def loaded(self, name: str, path: str, after: Mapping[str, str] | None) -> None:
        """A load of ``name`` succeeded; ``after`` is the map the server returned with it."""
        self.loads += 1
        if after is None:
            self.served[name] = path
            return
        for gone, gone_path in self.served.items():
            if gone != name and gone not in after:
                self.evicted[gone] = gone_path
        self.served = dict(after)
        self.evicted.pop(name, None)

    def unloaded(self, name: str) -> None:
        """This run unloaded ``name`` (a swap's first half, or a deletion)."""
        self.served.pop(name, None)


@dataclass(frozen=True)
class CapacityNote:
    """A pod whose server evicted adapters the loop manages: reported, not reloaded."""

    pod: str
    evicted: frozenset[str]
    declared: frozenset[tuple[str, str]]  # (name, path) declared for the pod when detected

    def still_applies(self, declared: frozenset[tuple[str, str]]) -> bool:
        """Pure: a change of what is declared for the pod (a CR added, removed or re-pathed)
        frees or reshapes the capacity, so the note is dropped and loads are tried again."""
        return declared == self.declared


def capacity_message(
    target: str, limit: str | None, declared: Iterable[str], notes: Iterable[CapacityNote]
) -> str:
    """The ``OverCapacity`` condition's message: the server limit and the adapters involved."""
    names = sorted(set(declared))
    server = f"--max-loaded-loras {limit}" if limit else "its --max-loaded-loras limit"
    parts = [
        f"InferenceService {target} serves with {server} but {len(names)} adapters are "
        f"declared for it ({', '.join(names)})"
    ]
    parts += [f"pod {n.pod} evicted {', '.join(sorted(n.evicted))}" for n in notes]
    parts.append("raise --max-loaded-loras, pin the adapters that must stay, or declare fewer")
    return "; ".join(parts)
