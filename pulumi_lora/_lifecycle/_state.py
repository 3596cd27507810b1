"""What an operation returns: each pod's report and the adapter's state (the resource's outputs).

Built from the stored CR. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pulumi_lora._core._reconcile import (
    PodOutcome,
)
from pulumi_lora._models import (
    Condition,
    ConditionKind,
    ConditionStatus,
    LoRAAdapterStatus,
    format_time,
)


@dataclass(frozen=True)
class PodReport:
    """One pod's line in the outputs: what it serves, or why not."""

    pod: str
    ready: bool
    loaded: bool
    path: str | None = None
    reason: str = ""
    error: str = ""
    since: str | None = None  # when this project last loaded it there


@dataclass(frozen=True)
class AdapterState:
    """The live truth about one adapter, as outputs need it."""

    uid: str
    generation: int
    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    conditions: tuple[Condition, ...] = ()
    pods: tuple[PodReport, ...] = ()
    loaded_path: str | None = None
    last_loaded_at: str | None = None

    def condition(self, kind: ConditionKind) -> bool:
        """Whether condition ``kind`` is True."""
        return any(
            c.type == kind.value and c.status is ConditionStatus.TRUE for c in self.conditions
        )


def state_from_cr(cr: Mapping[str, Any], pods: Iterable[PodReport]) -> AdapterState:
    """Pure: an AdapterState from a stored CR plus per-pod reports."""
    meta = cr.get("metadata") or {}
    status = LoRAAdapterStatus.parse(cr.get("status") or {})
    return AdapterState(
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation", 1)),
        spec=dict(cr.get("spec") or {}),
        annotations=dict(meta.get("annotations") or {}),
        conditions=tuple(status.conditions or ()),
        pods=tuple(pods),
        loaded_path=status.loaded_path,
        last_loaded_at=format_time(status.last_loaded_at) if status.last_loaded_at else None,
    )


def reports(outcomes: Sequence[PodOutcome], now: datetime) -> tuple[PodReport, ...]:
    """Pure: per-pod lines from the outcomes of one run."""
    return tuple(
        PodReport(
            o.pod,
            ready=not o.waiting,
            loaded=o.loaded,
            path=o.path,
            reason=o.reason,
            error=o.error,
            since=format_time(now) if o.did_load else None,
        )
        for o in outcomes
    )


#: Per-pod ``reason`` of a labelled pod outside the target's controller chain.
UNTRUSTED_REASON = "NotControlledByTarget"


def untrusted_reports(untrusted: Mapping[str, str]) -> tuple[PodReport, ...]:
    """Pure: per-pod lines for the labelled pods that got nothing (not Ready, for drift)."""
    return tuple(
        PodReport(name, ready=False, loaded=False, reason=UNTRUSTED_REASON, error=f"pod {why}")
        for name, why in sorted(untrusted.items())
    )
