"""A delegated refresh trusts the loop's verdict only while the loop is alive (issue 41)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pulumi_lora._core._conditions import Availability
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._lifecycle._delegated import CLOCK_SKEW, STALE_REASON, doubted, loop_doubt
from pulumi_lora._models import (
    Condition,
    ConditionStatus,
    LoRAAdapterStatus,
    Policy,
    served_by,
    served_by_message,
)
from pulumi_lora._pulumi._drift import drift_words
from pulumi_lora._resync._status import adapter_status

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LEASE = ("pulumi-lora-system", "pulumi-lora-resync")


def lease(
    age: float, duration: int = 40, holder: str | None = "loop-7c9-1-abc"
) -> dict[str, object]:
    renewed = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec: dict[str, object] = {"renewTime": renewed, "leaseDurationSeconds": duration}
    if holder:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": LEASE[1]}, "spec": spec}


def condition(kind: str, status: str, reason: str, since: datetime = NOW) -> Condition:
    return Condition.parse(
        {"type": kind, "status": status, "reason": reason, "lastTransitionTime": since}
    )


def test_the_loop_names_its_lease_and_keeps_the_condition_quiet() -> None:
    def status(
        stored: LoRAAdapterStatus, now: datetime, lease: tuple[str, str] = LEASE
    ) -> LoRAAdapterStatus:
        return adapter_status(
            generation=2,
            policy=Policy.ALL_READY_PODS,
            outcomes=[PodOutcome("a", loaded=True)],
            availability=Availability(True, "InferenceServiceReady"),
            stored=stored,
            path="/adapters/sql",
            over_capacity=None,
            last_loaded=None,
            now=now,
            lease=lease,
        )

    first = status(LoRAAdapterStatus(), NOW)
    again = status(first, NOW + timedelta(minutes=5))
    assert served_by(first.conditions or []) == LEASE
    assert first.wire() == again.wire()  # nothing to write while the same leader serves it
    moved = status(first, NOW, ("other", "lease"))
    assert served_by(moved.conditions or []) == ("other", "lease")
    assert [c.type for c in moved.conditions or []].count("ResyncLoop") == 1


def test_a_lease_renewed_within_its_duration_is_a_live_loop() -> None:
    assert loop_doubt(LEASE, lease(age=39), NOW) is None
    assert loop_doubt(LEASE, lease(age=40 + CLOCK_SKEW), NOW) is None  # clocks differ a little


def test_each_way_a_loop_can_be_gone_is_said() -> None:
    where = "the re-sync loop's Lease pulumi-lora-system/pulumi-lora-resync"
    stale = loop_doubt(LEASE, lease(age=120), NOW)
    assert stale is not None
    assert stale.startswith(f"{where} is held by its leader loop-7c9-1-abc")
    assert "last renewed 120s ago, past its 40s duration" in stale
    released = loop_doubt(LEASE, lease(age=30, duration=1, holder=None), NOW)
    assert released is not None and "no replica (its last leader released it)" in released
    gone = loop_doubt(LEASE, None, NOW)
    assert gone == f"{where} is gone: no loop serves this CR, its last report may be out of date"
    never = loop_doubt(None, None, NOW)
    assert never is not None and "no ResyncLoop condition" in never
    denied = loop_doubt(LEASE, None, NOW, denied="reading Lease ...: HTTP 403 Forbidden")
    assert denied is not None and "HTTP 403" in denied
    assert "`pulumi-lora rbac --transport delegated`" in denied


def test_a_doubt_makes_ready_and_loaded_unknown_and_keeps_what_the_loop_said() -> None:
    reported = [
        condition("Loaded", "True", "AdapterLoaded"),
        condition("Ready", "True", "AdapterReady"),
        condition("Available", "True", "InferenceServiceReady"),
        condition("ResyncLoop", "True", "LeaderHoldsLease"),
    ]
    first = {c.type: c for c in doubted(reported, "the Lease is gone", [], NOW)}
    assert first["Ready"].status is ConditionStatus.UNKNOWN
    assert first["Ready"].reason == STALE_REASON
    assert first["Ready"].message == (
        "the Lease is gone; it last reported Ready True (AdapterReady)"
    )
    assert first["Loaded"].status is ConditionStatus.UNKNOWN
    assert first["Available"] == reported[2] and first["ResyncLoop"] == reported[3]
    later = {
        c.type: c
        for c in doubted(reported, "the Lease is gone", list(first.values()), NOW + timedelta(1))
    }
    assert later["Ready"].last_transition_time == NOW  # its since holds while in doubt
    lone = {c.type: c for c in doubted([], "no loop", [], NOW)}
    assert lone["Ready"].message == "no loop" and lone["Ready"].observed_generation is None


def test_a_doubted_ready_is_drift_in_words() -> None:
    outs = {
        "adapter_name": "sql",
        "path": "/a",
        "conditions": [
            {"type": "Ready", "status": "Unknown", "reason": STALE_REASON, "message": "gone"},
            {"type": "Loaded", "status": "Unknown", "reason": STALE_REASON, "message": "gone"},
        ],
    }
    assert drift_words(outs, {"adapter_name": "sql", "path": "/a"}) == ["Ready unknown: gone"]
    assert served_by([condition("ResyncLoop", "True", "X")]) is None  # no Lease named
    named = Condition.parse(
        {
            "type": "ResyncLoop",
            "status": "True",
            "reason": "LeaderHoldsLease",
            "message": served_by_message("ns", "a.b-c"),
            "lastTransitionTime": NOW,
        }
    )
    assert served_by([named]) == ("ns", "a.b-c")
