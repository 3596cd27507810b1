"""The loop against the real apiserver and emulated SGLang pods: pods come and go, adapters follow.

Each test runs the loop as its own process (the CLI), with the least-privilege ServiceAccount.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from _resync_harness import Cluster, emulator, everywhere, served, wait_until
from conftest import LoopFactory

from pulumi_lora._models import parse_time


def next_second(stamp: datetime | None) -> None:
    """Wait until the clock is past the second ``stamp`` (a one-second API timestamp) is in, so
    the next timestamp the apiserver or the loop writes is a later one."""
    assert stamp is not None
    wait_until(lambda: datetime.now(UTC) >= stamp + timedelta(seconds=1), 2, interval=0.01)


def _adapters(cluster: Cluster, *names: str) -> dict[str, str]:
    paths = {name: cluster.tb.make_adapter(name) for name in names}
    for name, path in paths.items():
        cluster.apply_cr(name, path)
    return paths


def test_a_restarted_pod_gets_its_adapters_back_at_once(
    cluster: Cluster, loops: LoopFactory
) -> None:
    handle = cluster.deploy(replicas=2)
    want = _adapters(cluster, "sql-a", "sql-b", "sql-c")
    loop = loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, want), 20, what="the adapters on both pods")
    wait_until(lambda: cluster.conditions("sql-a").get("Loaded", {}).get("status") == "True", 10)
    before = parse_time(cluster.cr("sql-a")["status"]["lastLoadedAt"])  # type: ignore[index]

    victim = handle.pods()[0].name
    next_second(before)  # lastLoadedAt has one-second resolution
    cluster.tb.restart_pod(cluster.namespace, victim)
    wait_until(lambda: handle.pod(victim).ready, 30, what="the restarted pod Ready")
    wait_until(lambda: served(handle).get(victim) == want, 5, what="the adapters back on it")

    synced = loop.wait_event("pod_synced", reason="restart", pod=f"{cluster.namespace}/{victim}")
    assert synced["loads"] == 3 and synced["failures"] == 0
    # Each heal's load was followed by its smoke: one generation through each adapter on the
    # restarted server (its emulator started afresh), none through anything else.
    restarted = emulator(handle.pod(victim).url, "GET", "/_emulator/state")
    assert restarted["inferences"] == dict.fromkeys(want, 1)
    assert loop.metric("pulumi_lora_resync_loads_total", reason="restart") == 3
    first = loop.metric("pulumi_lora_resync_first_load_seconds_sum")
    assert loop.metric("pulumi_lora_resync_first_load_seconds_count") == 1
    assert first < 0.25, f"first load {first:.3f}s after Ready"
    assert loop.metric("pulumi_lora_resync_pod_recovery_seconds_count") == 1

    def moved() -> bool:
        status = (cluster.cr("sql-a") or {}).get("status") or {}
        at = parse_time(status.get("lastLoadedAt"))
        return at is not None and before is not None and at > before

    wait_until(moved, 10, what="lastLoadedAt to move on the re-load")

    def reported() -> bool:
        return any(
            e["reason"] == "AdapterLoaded"
            and e["source"].get("component") == "pulumi-lora-resync"
            and victim in e["message"]
            and "(restart)" in e["message"]
            for e in cluster.events()
        )

    wait_until(reported, 10, what="an AdapterLoaded Event about the restart")


def test_a_replacement_pod_gets_the_adapters(cluster: Cluster, loops: LoopFactory) -> None:
    handle = cluster.deploy(replicas=2)
    want = _adapters(cluster, "sql-a", "sql-b")
    loop = loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, want), 20)

    old = handle.pods()[0].name
    new = cluster.tb.replace_pod(cluster.namespace, old)
    wait_until(lambda: handle.pod(new).ready, 30, what="the replacement Ready")
    wait_until(lambda: served(handle).get(new) == want, 5, what="the adapters on the new pod")
    assert loop.wait_event("pod_synced", reason="new_pod", pod=f"{cluster.namespace}/{new}")
    wait_until(
        lambda: "loaded on 2/2 Ready pods" in cluster.conditions("sql-a")["Loaded"]["message"], 10
    )


def test_scaling_up_loads_the_new_pods(cluster: Cluster, loops: LoopFactory) -> None:
    handle = cluster.deploy(replicas=1)
    want = _adapters(cluster, "sql-a")
    loop = loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, want), 20)

    cluster.tb.scale(cluster.namespace, "llama", 3)
    handle.wait_ready(timeout=60)
    wait_until(lambda: everywhere(handle, want, replicas=3), 10, what="3 pods serving")
    # The loads land before the runs that made them log their end.
    wait_until(lambda: len(loop.events("pod_synced", reason="new_pod")) >= 2, 10, what="2 runs")
    wait_until(
        lambda: cluster.conditions("sql-a")["Loaded"]["message"] == "loaded on 3/3 Ready pods", 10
    )


def test_verification_heals_an_out_of_band_unload_and_a_wrong_path(
    cluster: Cluster, loops: LoopFactory
) -> None:
    handle = cluster.deploy(replicas=2)
    want = _adapters(cluster, "sql-a", "sql-b")
    other = cluster.tb.make_adapter("elsewhere")
    loop = loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, want), 20)

    first, second = handle.pods()
    emulator(first.url, "POST", "/unload_lora_adapter", {"lora_name": "sql-a"})
    # A wrong path takes an unload and a load; hold the loop's next look at that pod (its
    # /v1/models stalls 1.5 s) so the swap is made out of band in one piece, then seen.
    emulator(second.url, "POST", "/_emulator/faults", {"faults": ["/v1/models:stall=1.5"]})
    wait_until(lambda: not emulator(second.url, "GET", "/_emulator/faults")["faults"], 5)
    emulator(second.url, "POST", "/unload_lora_adapter", {"lora_name": "sql-b"})
    emulator(second.url, "POST", "/load_lora_adapter", {"lora_name": "sql-b", "lora_path": other})
    wait_until(lambda: everywhere(handle, want), 5, what="verification to heal both pods")
    assert loop.metric("pulumi_lora_resync_loads_total", reason="verify") >= 4  # 2 initial + 2
    healed = [e for e in loop.events("pod_synced", reason="verify") if e["loads"]]
    assert {e["pod"] for e in healed} >= {f"{cluster.namespace}/{first.name}"}
    wait_until(
        lambda: any(
            e["reason"] == "AdapterSwapped" and second.name in e["message"]
            for e in cluster.events()
        ),
        10,
        what="an AdapterSwapped Event for the wrong path",
    )


def test_a_cr_deleted_with_kubectl_is_unloaded_everywhere(
    cluster: Cluster, loops: LoopFactory
) -> None:
    handle = cluster.deploy(replicas=2)
    want = _adapters(cluster, "sql-a", "sql-b")
    loop = loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, want), 20)

    cluster.kubectl("delete", "loraadapters.inference.llmkube.dev", "sql-a")
    wait_until(lambda: everywhere(handle, {"sql-b": want["sql-b"]}), 5, what="sql-a unloaded")
    assert loop.wait_event("cr_deleted", adapter="sql-a")
    assert loop.metric("pulumi_lora_resync_unloads_total", reason="cr_change") == 2
    pods = [p.name for p in handle.pods()]

    def one_event_for_both() -> bool:
        unloaded = [e for e in cluster.events() if e["reason"] == "AdapterUnloaded"]
        return len(unloaded) == 1 and all(p in unloaded[0]["message"] for p in pods)

    wait_until(one_event_for_both, 10, what="one AdapterUnloaded Event naming both pods")


def test_deleting_one_claimant_leaves_the_name_to_the_other(
    cluster: Cluster, loops: LoopFactory
) -> None:
    """Rules 4 and 5: the older CR owns the name; deleting it hands the name over, no unload."""
    handle = cluster.deploy(replicas=2)
    first, second = cluster.tb.make_adapter("sql-one"), cluster.tb.make_adapter("sql-two")
    owner = cluster.apply_cr("owner", first, adapter="sql")
    # creationTimestamp decides ownership, at one-second resolution
    next_second(parse_time(owner["metadata"]["creationTimestamp"]))
    cluster.apply_cr("claimant", second, adapter="sql")
    loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, {"sql": first}), 20)
    wait_until(
        lambda: cluster.conditions("claimant").get("Error", {}).get("reason") == "NameCollision", 10
    )
    assert "LoRAAdapter" in cluster.conditions("claimant")["Loaded"]["message"]

    cluster.kubectl("delete", "loraadapters.inference.llmkube.dev", "owner")
    wait_until(lambda: everywhere(handle, {"sql": second}), 10, what="the claimant's path")
    wait_until(lambda: cluster.conditions("claimant").get("Ready", {}).get("status") == "True", 10)


def test_a_path_edit_is_swapped_and_reported_for_the_new_generation(
    cluster: Cluster, loops: LoopFactory
) -> None:
    handle = cluster.deploy(replicas=2)
    v1, v2 = cluster.tb.make_adapter("sql-v1"), cluster.tb.make_adapter("sql-v2")
    cluster.apply_cr("sql", v1)
    loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, {"sql": v1}), 20)

    cluster.kubectl(
        "patch",
        "loraadapters.inference.llmkube.dev",
        "sql",
        "--type=merge",
        "-p",
        f'{{"spec":{{"path":"{v2}"}}}}',
    )
    wait_until(lambda: everywhere(handle, {"sql": v2}), 5, what="the swap on every pod")

    def reported() -> bool:
        cr = cluster.cr("sql") or {}
        loaded = {c["type"]: c for c in cr.get("status", {}).get("conditions", [])}.get(
            "Loaded", {}
        )
        return (
            cr["metadata"]["generation"] == 2
            and loaded.get("observedGeneration") == 2
            and loaded.get("status") == "True"
            and cr["status"].get("loadedPath") == v2
        )

    wait_until(reported, 10, what="Loaded=True for generation 2")


def test_a_missing_target_is_reported(cluster: Cluster, loops: LoopFactory) -> None:
    path = cluster.tb.make_adapter("orphan")
    cluster.apply_cr("orphan", path, isvc="nowhere")
    loops(cluster.namespace)
    wait_until(
        lambda: (
            cluster.conditions("orphan").get("Available", {}).get("reason")
            == "InferenceServiceNotFound"
        ),
        10,
    )
    conditions = cluster.conditions("orphan")
    assert conditions["Error"]["status"] == "True" and conditions["Ready"]["status"] == "False"
    assert conditions["Available"]["observedGeneration"] == 1


def test_failures_are_retried_with_backoff_and_reported_once(
    cluster: Cluster, loops: LoopFactory
) -> None:
    handle = cluster.deploy(replicas=1)
    pod = handle.pods()[0]
    emulator(
        pod.url, "POST", "/_emulator/faults", {"faults": ["/load_lora_adapter:status=500,times=3"]}
    )
    path = cluster.tb.make_adapter("flaky")
    loop = loops(cluster.namespace)
    cluster.apply_cr("flaky", path, annotations={"pulumi-lora.dev/pinned": "true"})
    wait_until(
        lambda: cluster.conditions("flaky").get("Error", {}).get("reason") == "ServerError", 10
    )
    wait_until(lambda: everywhere(handle, {"flaky": path}), 15, what="the retries to get through")
    assert loop.metric("pulumi_lora_resync_failures_total", reason="ServerError") == 3
    assert loop.metric("pulumi_lora_resync_loads_total") == 1
    delays = [e["retry_in"] for e in loop.events("pod_synced") if e["failures"]]
    assert len(delays) == 3 and delays[0] < delays[2]  # 0.2 s doubling, with jitter
    wait_until(lambda: cluster.conditions("flaky").get("Ready", {}).get("status") == "True", 10)
    warnings = [e for e in cluster.events() if e["reason"] == "AdapterLoadFailed"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"  # the same failure, once
    state = emulator(pod.url, "GET", "/_emulator/state")
    assert state["adapters"] == [{**state["adapters"][0], "name": "flaky", "pinned": True}]
