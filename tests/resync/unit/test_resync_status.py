"""One CR's status from its pods' outcomes, within the closed schema."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pulumi_lora._core._conditions import Availability
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._models import LoRAAdapterStatus, Policy
from pulumi_lora._resync._status import adapter_status, same_status, stored_status

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OK = Availability(True, "InferenceServiceReady")


def status(
    outcomes: list[PodOutcome] | None,
    *,
    stored: LoRAAdapterStatus | None = None,
    over: str | None = None,
    now: datetime = T0,
    availability: Availability = OK,
    last_loaded: datetime | None = None,
) -> LoRAAdapterStatus:
    return adapter_status(
        generation=3,
        policy=Policy.ALL_READY_PODS,
        outcomes=outcomes,
        availability=availability,
        stored=stored or LoRAAdapterStatus(),
        path="/adapters/sql",
        over_capacity=over,
        last_loaded=last_loaded,
        now=now,
    )


def by_type(s: LoRAAdapterStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status.value, c.reason) for c in s.conditions or ()}


def test_loaded_everywhere() -> None:
    s = status([PodOutcome("a", loaded=True), PodOutcome("b", loaded=True)], last_loaded=T0)
    assert by_type(s) == {
        "Available": ("True", "InferenceServiceReady"),
        "Loaded": ("True", "AdapterLoaded"),
        "Error": ("False", "NoError"),
        "Ready": ("True", "AdapterReady"),
    }
    assert s.loaded_path == "/adapters/sql" and s.last_loaded_at == T0
    assert all(c.observed_generation == 3 for c in s.conditions or ())


def test_over_capacity_appears_and_resolves_keeping_its_transition_time() -> None:
    evicted = PodOutcome("a", loaded=False, reason="MaxLoadedLorasExceeded", error="evicted")
    first = status([evicted], over="pod a evicted sql")
    assert by_type(first)["OverCapacity"] == ("True", "MaxLoadedLorasExceeded")
    assert by_type(first)["Loaded"] == ("False", "MaxLoadedLorasExceeded")
    later = status([evicted], stored=first, over="pod a evicted sql", now=T0 + timedelta(minutes=1))
    over = {c.type: c for c in later.conditions or ()}["OverCapacity"]
    assert over.last_transition_time == T0
    resolved = status([PodOutcome("a", loaded=True)], stored=later, now=T0 + timedelta(minutes=2))
    assert by_type(resolved)["OverCapacity"] == ("False", "WithinCapacity")
    assert by_type(status([PodOutcome("a", loaded=True)])).keys() == {
        "Available",
        "Loaded",
        "Error",
        "Ready",
    }  # never over capacity: no such condition at all


def test_nothing_evictable_is_over_capacity_too() -> None:
    full = PodOutcome("a", loaded=False, reason="CapacityExhausted", error="all pinned")
    assert by_type(status([full]))["OverCapacity"] == ("True", "CapacityExhausted")


def test_an_unusable_target_reports_without_outcomes() -> None:
    s = status(None, availability=Availability(False, "RuntimeMismatch", 'runtime="vllm"'))
    assert by_type(s)["Error"] == ("True", "RuntimeMismatch")
    assert s.loaded_path is None


def test_last_loaded_only_moves_forward() -> None:
    stored = LoRAAdapterStatus(last_loaded_at=T0, loaded_path="/old")
    assert status([PodOutcome("a", loaded=False)], stored=stored).loaded_path == "/old"
    earlier = status([PodOutcome("a", loaded=True)], stored=stored, last_loaded=T0 - timedelta(1))
    assert earlier.last_loaded_at == T0


def test_same_status_ignores_condition_order() -> None:
    s = status([PodOutcome("a", loaded=True)]).wire()
    shuffled = {**s, "conditions": list(reversed(s["conditions"]))}
    assert same_status(s, shuffled)
    assert not same_status(s, {**s, "loadedPath": "/other"})
    assert stored_status({"conditions": [{"type": "bad"}]}) == LoRAAdapterStatus()
