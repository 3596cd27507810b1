"""The loop's state metrics: which adapter is served on which Ready pod, since when, capacity."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from test_resync_world import NOW, TARGET, cr, pod, world

from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._models import LLMKUBE_FINALIZER
from pulumi_lora._resync._decide import CapacityNote
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._served import AdapterMetrics, FleetState, NotServedClock, fleet_state
from pulumi_lora._resync._world import World

LIMITED = ("--enable-lora", "--max-loaded-loras", "4")


def fleet() -> World:
    """Two CRs on two Ready pods and one pod not Ready; ``sql`` loaded on pod a only."""
    w = world(cr("sql"), cr("chat"), extra_args=LIMITED)
    for name, ready in (("a", True), ("b", True), ("c", False)):
        w.seed_pod(pod(name, ready=ready))
    task = next(t for t in w.pod_work(("models", "a"), NOW).tasks if t.name == "sql")
    w.record(("models", "a"), task, PodOutcome("a", loaded=True, path=task.path))
    failed = next(t for t in w.pod_work(("models", "b"), NOW).tasks if t.name == "sql")
    w.record(("models", "b"), failed, PodOutcome("b", loaded=False, reason="ServerError"))
    return w


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_served_and_not_served_since_per_ready_pod() -> None:
    w, clock = fleet(), NotServedClock()
    first = fleet_state(w, clock, 1000.0)
    sql = next(a for a in first.adapters if a.adapter == "sql")
    assert [(p.pod, p.served, p.not_served_since, p.reason) for p in sql.pods] == [
        ("a", True, None, ""),
        ("b", False, 1000.0, "ServerError"),
    ]  # pod c is not Ready: nothing is expected of it
    assert (sql.served_pods, sql.not_served_since) == (1, 1000.0)

    # Later looks keep the first time; served again, the pair is forgotten.
    assert fleet_state(w, clock, 1060.0).adapters[1].not_served_since == 1000.0
    task = next(t for t in w.pod_work(("models", "b"), NOW).tasks if t.name == "sql")
    w.record(("models", "b"), task, PodOutcome("b", loaded=True, path=task.path))
    sql = next(a for a in fleet_state(w, clock, 1120.0).adapters if a.adapter == "sql")
    assert (sql.served_pods, sql.not_served_since) == (2, None)
    task = next(t for t in w.pod_work(("models", "b"), NOW).tasks if t.name == "sql")
    w.record(("models", "b"), task, PodOutcome("b", loaded=False, reason="ServerError"))
    sql = next(a for a in fleet_state(w, clock, 1180.0).adapters if a.adapter == "sql")
    assert sql.not_served_since == 1180.0  # a new outage starts a new clock


def test_a_new_generation_is_not_served_until_a_run_records_it() -> None:
    w, clock = fleet(), NotServedClock()
    w.put_cr(replace(w.crs[("models", "sql")], generation=2, path="/adapters/sql-v2"))
    sql = next(a for a in fleet_state(w, clock, 5.0).adapters if a.adapter == "sql")
    assert sql.served_pods == 0


def test_capacity_per_pod() -> None:
    w = fleet()
    w.pods[("models", "a")].note_capacity(
        CapacityNote("a", frozenset({"chat"}), w.declared_for(TARGET))
    )
    w.pods[("models", "b")].failed(0.0)
    pods = {p.pod[1]: p for p in fleet_state(w, NotServedClock(), 0.0).pods}
    assert (pods["a"].declared, pods["a"].served, pods["a"].evicted, pods["a"].limit) == (
        2,
        1,
        1,
        4,
    )
    assert pods["b"].consecutive_failures == 1 and pods["b"].served == 0
    assert not pods["c"].ready


def test_llmkube_contest_shows_on_the_cr() -> None:
    w = fleet()
    chat = w.crs[("models", "chat")]
    raw = {**chat.raw, "metadata": {**chat.raw["metadata"], "finalizers": [LLMKUBE_FINALIZER]}}
    w.put_cr(replace(chat, raw=raw))
    contested = {a.adapter: a.contested for a in fleet_state(w, NotServedClock(), 0.0).adapters}
    assert contested == {"chat": True, "sql": False}
    returned = fleet_state(w, NotServedClock(), 0.0, {("models", "sql")})
    assert all(a.contested for a in returned.adapters)


def test_metrics_name_the_adapter_and_the_pod() -> None:
    metrics, w, clock = Metrics(), fleet(), NotServedClock()
    assert not any(name.startswith("pulumi_lora_resync_adapter") for name, _ in samples(metrics))
    metrics.state.source = lambda: fleet_state(w, clock, 1000.0)
    found = samples(metrics)
    sql = (
        ("adapter", "sql"),
        ("inference_service", "models/llama"),
        ("lora_adapter", "sql"),
        ("namespace", "models"),
    )
    b = tuple(sorted((*sql, ("pod", "b"))))
    assert found[("pulumi_lora_resync_adapter_served", b)] == 0
    assert found[("pulumi_lora_resync_adapter_not_served_since_timestamp_seconds", b)] == 1000.0
    assert found[("pulumi_lora_resync_adapter_served_pods", sql)] == 1
    assert found[("pulumi_lora_resync_adapter_ready_pods", sql)] == 2
    pod_a = (("inference_service", "models/llama"), ("namespace", "models"), ("pod", "a"))
    assert found[("pulumi_lora_resync_pod_max_loaded_loras", pod_a)] == 4
    assert found[("pulumi_lora_resync_pod_adapters_served", pod_a)] == 1
    # 2 CRs x 2 Ready pods of served series, one not-served pair per pod b and chat on a.
    assert sum(1 for n, _ in found if n == "pulumi_lora_resync_adapter_served") == 4


def test_per_adapter_detail_drops_the_pod_series() -> None:
    metrics, w, clock = Metrics(AdapterMetrics.PER_ADAPTER), fleet(), NotServedClock()
    state: FleetState = fleet_state(w, clock, 1000.0)
    metrics.state.source = lambda: state
    found = samples(metrics)
    assert not any(n == "pulumi_lora_resync_adapter_served" for n, _ in found)
    since = {
        dict(labels)["adapter"]: value
        for (n, labels), value in found.items()
        if n == "pulumi_lora_resync_adapter_not_served_since_timestamp_seconds"
    }
    assert since == {"sql": 1000.0, "chat": 1000.0}
    assert not any(
        "pod" in dict(labels) for n, labels in found if n.startswith("pulumi_lora_resync_adapter")
    )


# --- "since" survives a leader change: the CR's status is its record -----------------------

#: When the loop (an earlier leader) wrote ``Loaded=False`` / ``Error=True`` on the CR.
RECORDED = datetime(2026, 12, 1, 11, 50, tzinfo=UTC)
LATER = NOW.timestamp()  # ten minutes on: a new leader's first look


def not_loaded(
    since: datetime = RECORDED, *, generation: int = 1, reason: str = "ServerError"
) -> dict[str, Any]:
    """A CR status as the loop writes it while a Ready pod fails to load the adapter."""
    at = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    common = {"lastTransitionTime": at, "observedGeneration": generation, "reason": reason}
    return {
        "conditions": [
            {"type": "Loaded", "status": "False", "message": "pod b: 500", **common},
            {"type": "Error", "status": "True", "message": "pod b: 500", **common},
        ]
    }


def with_status(w: World, name: str, status: dict[str, Any]) -> None:
    w.put_cr(replace(w.crs[("models", name)], status=status))


def since_by_pod(state: FleetState, adapter: str) -> dict[str, float | None]:
    found = next(a for a in state.adapters if a.adapter == adapter)
    return {p.pod: p.not_served_since for p in found.pods}


def test_a_new_leader_reports_the_since_the_cr_status_recorded() -> None:
    """A failover (a new clock) keeps the outage's start: the alert fires on time, not 5 minutes
    after every new leader."""
    w = fleet()  # sql: served on a, failing on b
    with_status(w, "sql", not_loaded())
    with_status(w, "chat", not_loaded())  # chat: no run recorded yet on this leader
    clock = NotServedClock()
    state = fleet_state(w, clock, LATER)
    assert since_by_pod(state, "sql") == {"a": None, "b": RECORDED.timestamp()}
    # A pair whose run is still to come is not taken as failing (the old leader may have
    # served it): it starts at the first look, and takes the record once its run fails.
    assert since_by_pod(state, "chat") == {"a": LATER, "b": LATER}
    task = next(t for t in w.pod_work(("models", "a"), NOW).tasks if t.name == "chat")
    w.record(("models", "a"), task, PodOutcome("a", loaded=False, reason="ServerError"))
    state = fleet_state(w, clock, LATER + 15)
    assert since_by_pod(state, "chat") == {"a": RECORDED.timestamp(), "b": LATER}
    assert since_by_pod(state, "sql")["b"] == RECORDED.timestamp()


def test_a_pod_started_after_the_record_counts_from_its_start() -> None:
    w = fleet()
    started = datetime(2026, 12, 1, 11, 55, tzinfo=UTC)
    b = w.pods[("models", "b")]
    b.facts = replace(b.facts, started_at=started.strftime("%Y-%m-%dT%H:%M:%SZ"))
    with_status(w, "sql", not_loaded())
    assert since_by_pod(fleet_state(w, NotServedClock(), LATER), "sql")["b"] == (
        started.timestamp()
    )


def test_only_the_loops_conditions_for_the_current_generation_count() -> None:
    for status in (
        not_loaded(generation=0),  # about an older spec
        not_loaded(reason="ReconcilerError"),  # LLMKube's own controller wrote it
        {"conditions": "unreadable"},
    ):
        w = fleet()
        with_status(w, "sql", status)
        assert since_by_pod(fleet_state(w, NotServedClock(), LATER), "sql")["b"] == LATER


def test_an_outage_this_leader_saw_start_keeps_its_own_since() -> None:
    """The record is the CR's (its first failing pod): a pod this leader saw served and then
    fail is not dated back to it."""
    w = fleet()
    with_status(w, "sql", not_loaded())
    task = next(t for t in w.pod_work(("models", "b"), NOW).tasks if t.name == "sql")
    w.record(("models", "b"), task, PodOutcome("b", loaded=True, path=task.path))
    clock = NotServedClock()
    assert since_by_pod(fleet_state(w, clock, LATER), "sql")["b"] is None
    w.record(("models", "b"), task, PodOutcome("b", loaded=False, reason="ServerError"))
    assert since_by_pod(fleet_state(w, clock, LATER + 60), "sql")["b"] == LATER + 60


def test_a_cr_the_loop_may_not_act_on_keeps_its_record_on_every_pod() -> None:
    """A name another CR owns gets no run, hence no outcome: its conditions are the record."""
    w = fleet()
    w.put_cr(cr("sql-copy", "sql", created="2026-12-01T11:00:00Z"))  # sql owns the name
    with_status(w, "sql-copy", not_loaded(reason="NameCollision"))
    state = fleet_state(w, NotServedClock(), LATER)
    assert since_by_pod(state, "sql") == {"a": None, "b": LATER}  # no record on sql
    copy = next(a for a in state.adapters if a.cr == ("models", "sql-copy"))
    assert {p.pod: p.not_served_since for p in copy.pods} == {
        "a": RECORDED.timestamp(),
        "b": RECORDED.timestamp(),
    }
