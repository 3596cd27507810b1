"""One CR's status from its pods' outcomes: the core's conditions, ``OverCapacity``, ``ResyncLoop``.

Pure. ``OverCapacity`` keeps being written (``False`` once resolved) so it never goes stale.
Nothing outside LLMKube's closed status schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from msgspec import ValidationError

from pulumi_lora._core._conditions import (
    Availability,
    build_conditions,
    merge_conditions,
    summarize,
)
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._core._rollout import rollback_message
from pulumi_lora._errors import EvictionImpossible
from pulumi_lora._models import (
    Condition,
    ConditionKind,
    ConditionStatus,
    LoRAAdapterStatus,
    Policy,
    served_by_message,
)
from pulumi_lora._resync._reverts import REASON as REVERT_REASON
from pulumi_lora._resync._reverts import Revert

#: ``OverCapacity`` reason when LRU eviction pushed managed adapters out.
EVICTED_REASON = "MaxLoadedLorasExceeded"
#: ``OverCapacity`` reason when nothing could be evicted (every loaded adapter is pinned).
EXHAUSTED_REASON = EvictionImpossible.reason


def stored_status(status: Mapping[str, Any]) -> LoRAAdapterStatus:
    """The CR's status as models (an unreadable one counts as empty: it is rewritten whole)."""
    try:
        return LoRAAdapterStatus.parse(dict(status))
    except ValidationError:
        return LoRAAdapterStatus()


def adapter_status(
    *,
    generation: int,
    policy: Policy,
    outcomes: Sequence[PodOutcome] | None,
    availability: Availability,
    stored: LoRAAdapterStatus,
    path: str,
    over_capacity: str | None,
    last_loaded: datetime | None,
    now: datetime,
    lease: tuple[str, str] | None = None,
) -> LoRAAdapterStatus:
    """Pure: the status to write.

    ``outcomes`` holds every pod's outcome (waiting ones included; None when the target is not
    usable and nothing was attempted); ``over_capacity`` is the ``OverCapacity`` message when a
    server of the target is over its limit, else None. ``lastLoadedAt`` moves to ``last_loaded``
    (the loop's last successful load) when that is newer than what is stored. ``lease``
    (namespace, name) of the Lease the loop's leader holds goes into the ``ResyncLoop``
    condition, which a delegated refresh reads to see whether the loop is still alive.
    """
    summary = summarize(outcomes) if availability.ok and outcomes is not None else None
    previous = stored.conditions or []
    conditions = build_conditions(
        availability=availability,
        summary=summary,
        policy=policy,
        generation=generation,
        previous=previous,
        now=now,
    )
    exhausted = any(o.reason == EXHAUSTED_REASON for o in outcomes or ())
    had_it = any(c.type == ConditionKind.OVER_CAPACITY.value for c in previous)
    conditions = [c for c in conditions if c.type != ConditionKind.OVER_CAPACITY.value]
    if over_capacity is not None or exhausted or had_it:
        conditions.append(
            _over_capacity(
                previous,
                message=over_capacity,
                exhausted=exhausted,
                outcomes=outcomes or (),
                generation=generation,
                now=now,
            )
        )
    if lease is not None:
        conditions = [c for c in conditions if c.type != ConditionKind.RESYNC_LOOP.value]
        fresh = Condition(
            type=ConditionKind.RESYNC_LOOP.value,
            status=ConditionStatus.TRUE,
            reason="LeaderHoldsLease",
            message=served_by_message(*lease),
            last_transition_time=now,
            observed_generation=generation,
        )
        old = [c for c in previous if c.type == fresh.type and c.message == fresh.message]
        conditions.append(merge_conditions(old, [fresh])[0])
    loaded = any(o.loaded for o in outcomes or ())
    last = stored.last_loaded_at
    if last_loaded is not None and (last is None or last_loaded > last):
        last = last_loaded
    return LoRAAdapterStatus(
        conditions=conditions,
        loaded_path=path if loaded else stored.loaded_path,
        last_loaded_at=last,
    )


def _over_capacity(
    previous: Sequence[Condition],
    *,
    message: str | None,
    exhausted: bool,
    outcomes: Sequence[PodOutcome],
    generation: int,
    now: datetime,
) -> Condition:
    if message is not None:
        status, reason, text = ConditionStatus.TRUE, EVICTED_REASON, message
    elif exhausted:
        failed = next(o for o in outcomes if o.reason == EXHAUSTED_REASON)
        status, reason, text = (
            ConditionStatus.TRUE,
            EXHAUSTED_REASON,
            f"pod {failed.pod}: {failed.error}",
        )
    else:
        status, reason, text = ConditionStatus.FALSE, "WithinCapacity", ""
    fresh = Condition(
        type=ConditionKind.OVER_CAPACITY.value,
        status=status,
        reason=reason,
        message=text[:32768],
        last_transition_time=now,
        observed_generation=generation,
    )
    old = [c for c in previous if c.type == fresh.type]
    return merge_conditions(old, [fresh])[0]


def same_status(new: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """Pure: whether writing ``new`` would change nothing (conditions compared by type, since
    the list is a map keyed by type and another writer may have ordered it differently)."""

    def normal(status: Mapping[str, Any]) -> dict[str, Any]:
        data = {k: v for k, v in status.items() if k in ("loadedPath", "lastLoadedAt")}
        data["conditions"] = {c.get("type"): c for c in status.get("conditions") or ()}
        return data

    return normal(new) == normal(stored)


def rolled_back(
    status: LoRAAdapterStatus,
    revert: Revert,
    *,
    adapter: str,
    pods: Sequence[PodOutcome],
    generation: int,
    now: datetime,
) -> LoRAAdapterStatus:
    """Pure: ``status`` of a generation rolled back (``_reverts``): ``Error`` True and ``Loaded``
    and ``Ready`` False, reason ``SwapRolledBack``, saying where the new path failed in SGLang's
    words and which pods serve the old one again. A ``delegated`` provider raises it and applies
    the CR's old spec; ``loadedPath`` stays the old path."""
    text = rollback_message(adapter, revert.new_path, revert.old_path, revert.failure, pods)
    verdicts = {
        ConditionKind.ERROR.value: ConditionStatus.TRUE,
        ConditionKind.LOADED.value: ConditionStatus.FALSE,
        ConditionKind.READY.value: ConditionStatus.FALSE,
    }
    previous = status.conditions or []
    fresh = [
        Condition(
            type=kind,
            status=verdict,
            reason=REVERT_REASON,
            message=text[:32768],
            last_transition_time=now,
            observed_generation=generation,
        )
        for kind, verdict in verdicts.items()
    ]
    merged = merge_conditions([c for c in previous if c.type in verdicts], fresh)[: len(fresh)]
    kept = [c for c in previous if c.type not in verdicts]
    return status.replace(conditions=[*kept, *merged], loaded_path=revert.old_path)
