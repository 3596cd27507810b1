"""Readiness and conditions, pure: what the pods' outcomes say about an adapter, in conditions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._models import (
    UNLOAD_FINALIZER,
    Condition,
    ConditionKind,
    ConditionStatus,
    Policy,
)


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
