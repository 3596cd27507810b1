"""``/healthz``, ``/readyz`` and ``/metrics`` of a running loop, leader and standby."""

from __future__ import annotations

from _resync_harness import Cluster, everywhere, wait_until
from conftest import LoopFactory


def test_probes_and_metrics_respond(cluster: Cluster, loops: LoopFactory) -> None:
    handle = cluster.deploy(replicas=1)
    path = cluster.tb.make_adapter("sql-http")
    cluster.apply_cr("sql-http", path)
    leader = loops(cluster.namespace)
    leader.wait_event("caches_synced")
    standby = loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, {"sql-http": path}), 20)

    for loop, role in ((leader, "leader"), (standby, "standby")):
        health = loop.get("/healthz")
        assert (health.status_code, health.text) == (200, "ok\n")
        ready = wait_until(lambda loop=loop: (r := loop.get("/readyz")).is_success and r, 10)
        assert ready.text == f"{role}\n"
        assert loop.get("/nope").status_code == 404
    metrics = leader.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    for name in (
        "pulumi_lora_resync_loads_total",
        "pulumi_lora_resync_unloads_total",
        "pulumi_lora_resync_failures_total",
        "pulumi_lora_resync_reloads_total",
        "pulumi_lora_resync_pod_recovery_seconds_bucket",
        "pulumi_lora_resync_first_load_seconds_bucket",
        "pulumi_lora_resync_verify_sweep_seconds_bucket",
        "pulumi_lora_resync_leader",
    ):
        assert name in metrics.text, name
    assert leader.metric("pulumi_lora_resync_leader") == 1
    assert leader.metric("pulumi_lora_resync_loads_total", reason="verify") == 1
    assert leader.metric("pulumi_lora_resync_reloads_total", reason="verify") >= 1
    assert leader.metric("pulumi_lora_resync_status_writes_total") >= 1
    assert leader.metric("pulumi_lora_resync_verify_sweep_seconds_count") >= 1
    assert standby.metric("pulumi_lora_resync_leader") == 0
