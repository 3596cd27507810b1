"""The loop's state metrics: which adapter is served on which Ready pod, since when, capacity."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families
from test_resync_world import NOW, TARGET, cr, pod, world

from pulumi_lora._models import LLMKUBE_FINALIZER
from pulumi_lora._reconcile import PodOutcome
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
