"""Delegated adapters: the in-cluster re-sync loop loads them; the provider applies and reads.

Create and update await the loop's verdict; a refresh trusts it only while the loop's Lease is
renewed, else ``Ready`` and ``Loaded`` turn Unknown (docs/protocol.md). Never talks to SGLang.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._conditions import merge_conditions
from pulumi_lora._errors import AdapterNotLoaded, Forbidden, SwapRolledBack
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._lifecycle._config import ProviderConfig
from pulumi_lora._lifecycle._session import TARGET_GONE, Session, as_declared, now_utc
from pulumi_lora._lifecycle._state import AdapterState, state_from_cr
from pulumi_lora._models import (
    Condition,
    ConditionKind,
    ConditionStatus,
    parse_time,
    served_by,
    written_by_llmkube,
)

#: Seconds this machine's clock may differ from the loop's before a Lease counts as not renewed.
CLOCK_SKEW = 5.0
#: Reason of ``Ready`` and ``Loaded`` while the loop's verdict cannot be taken as current.
STALE_REASON = "ResyncLoopStale"
_DOUBTED = (ConditionKind.READY.value, ConditionKind.LOADED.value)


def observe_delegated(
    args: AdapterArgs, config: ProviderConfig, previous: Sequence[Condition]
) -> AdapterState | None:
    """A refresh: the CR read afresh (its status is the loop's verdict), None when it is gone."""
    session = Session(args, config)
    cr = k8s.get_adapter(session.kube, args.namespace, args.cr_name)
    if cr is None:
        return None
    return loop_verdict(Session(as_declared(args, cr), config), cr, previous)


def delete_delegated(session: Session) -> None:
    """Let the CR go: the loop unloads once it is gone (docs/protocol.md rule 6). A target that
    is gone is no reason to keep the CR; any other failure to read it is raised."""
    with contextlib.suppress(*TARGET_GONE):
        session.resolve_target()
    session.delete_cr()


def loop_verdict(
    session: Session, cr: Mapping[str, Any], previous: Sequence[Condition]
) -> AdapterState:
    """The loop's verdict from the CR, doubted when its loop is gone or stale."""
    state = state_from_cr(cr, ())
    kept = tuple(c for c in state.conditions if not written_by_llmkube(c))
    lease = served_by(kept)
    found: Mapping[str, Any] | None = None
    denied = None
    if lease is not None:
        try:
            found = k8s.get_lease(session.kube, *lease)
        except Forbidden as exc:
            denied = str(exc)
    doubt = loop_doubt(lease, found, now_utc(), denied=denied)
    conditions = kept if doubt is None else doubted(kept, doubt, previous, now_utc())
    return replace(state, conditions=conditions)


def loop_doubt(
    lease: tuple[str, str] | None,
    found: Mapping[str, Any] | None,
    now: datetime,
    *,
    denied: str | None = None,
) -> str | None:
    """Pure: why the loop's verdict cannot be taken as current, or None while its leader renews
    the Lease the CR names (``found``: that Lease as read; ``denied``: the 403 reading it)."""
    if lease is None:
        return (
            "no re-sync loop has reported on this CR (no ResyncLoop condition): the delegated "
            "transport needs `pulumi-lora resync` running in the cluster (ResyncDeployment)"
        )
    where = f"the re-sync loop's Lease {lease[0]}/{lease[1]}"
    if denied is not None:
        return (
            f"cannot read {where} to see whether the loop is alive ({denied}); grant `get` on "
            "leases there (`pulumi-lora rbac --transport delegated`)"
        )
    if found is None:
        return f"{where} is gone: no loop serves this CR, its last report may be out of date"
    spec = found.get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    if renewed is None:
        return f"{where} was never renewed: no loop serves this CR"
    age = (now - renewed).total_seconds()
    if age <= duration + CLOCK_SKEW:
        return None
    holder = spec.get("holderIdentity")
    who = f"its leader {holder}" if holder else "no replica (its last leader released it)"
    return (
        f"{where} is held by {who} and was last renewed {age:.0f}s ago, past its "
        f"{duration:.0f}s duration: the loop is down or cut off from the apiserver, its last "
        "report may be out of date"
    )


def doubted(
    conditions: Sequence[Condition],
    doubt: str,
    previous: Sequence[Condition],
    now: datetime,
) -> tuple[Condition, ...]:
    """Pure: ``Ready`` and ``Loaded`` as Unknown (:data:`STALE_REASON`, ``doubt`` and what the
    loop last said in the message), the others as the loop wrote them. An unchanged doubt keeps
    its ``since`` from ``previous`` (the conditions last reported)."""
    last = {c.type: c for c in conditions}
    fresh = [
        Condition(
            type=kind,
            status=ConditionStatus.UNKNOWN,
            reason=STALE_REASON,
            message=(
                doubt
                if kind not in last
                else f"{doubt}; it last reported {kind} {last[kind].status.value} "
                f"({last[kind].reason})"
            )[:32768],
            last_transition_time=now,
            observed_generation=last[kind].observed_generation if kind in last else None,
        )
        for kind in _DOUBTED
    ]
    before = [c for c in previous if c.type in _DOUBTED and c.reason == STALE_REASON]
    merged = merge_conditions(before, fresh)[: len(fresh)]
    return tuple(merged) + tuple(c for c in conditions if c.type not in _DOUBTED)


def await_delegated(session: Session, cr: Mapping[str, Any], poll: float = 0.5) -> AdapterState:
    """Wait for the in-cluster re-sync loop to report this generation (Loaded or Error)."""
    meta = cr["metadata"]
    generation = int(meta.get("generation", 1))
    deadline = time.monotonic() + session.args.ready_timeout_seconds
    while True:
        live = k8s.get_adapter(session.kube, meta["namespace"], meta["name"]) or cr
        state = state_from_cr(live, ())
        current = {  # the loop's verdict: LLMKube's controller may write the same types
            c.type: c
            for c in state.conditions
            if c.observed_generation == generation and not written_by_llmkube(c)
        }
        if (loaded := current.get(ConditionKind.LOADED.value)) and (
            loaded.status is ConditionStatus.TRUE
        ):
            return state
        if (error := current.get(ConditionKind.ERROR.value)) and (
            error.status is ConditionStatus.TRUE
        ):
            if error.reason == SwapRolledBack.reason:  # the loop put the old revision back
                args = session.args
                raise SwapRolledBack(
                    args.adapter_name,
                    error.message,
                    f"reported by the re-sync loop; LoRAAdapter {args.namespace}/{args.cr_name} "
                    "names the old revision again and the stack keeps it: fix the new revision, "
                    "then `pulumi up`",
                )
            raise AdapterNotLoaded(
                session.args.adapter_name,
                error.message,
                f"reported by the re-sync loop ({error.reason})",
            )
        if time.monotonic() >= deadline:
            raise AdapterNotLoaded(
                session.args.adapter_name,
                f"no re-sync loop reported generation {generation} within "
                f"{session.args.ready_timeout_seconds:.0f}s",
                "the delegated transport needs `pulumi-lora resync` running in the cluster",
            )
        time.sleep(poll)
