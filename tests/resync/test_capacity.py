"""``--max-loaded-loras``: evictions are reported as ``OverCapacity``, never reloaded in a loop."""

from __future__ import annotations

from _resync_harness import Cluster, emulator, served, wait_until
from conftest import LoopFactory

from pulumi_lora.testing.testbed import DEFAULT_EXTRA_ARGS

TIGHT = (*DEFAULT_EXTRA_ARGS, "--max-loaded-loras", "1", "--max-loras-per-batch", "1")


def test_eviction_thrash_is_reported_not_looped(cluster: Cluster, loops: LoopFactory) -> None:
    handle = cluster.deploy(replicas=1, extra_args=TIGHT)
    pod = handle.pods()[0]
    a, b = cluster.tb.make_adapter("sql-a"), cluster.tb.make_adapter("sql-b")
    cluster.apply_cr("sql-a", a)
    cluster.apply_cr("sql-b", b)
    loop = loops(cluster.namespace)

    def over(name: str) -> dict[str, str] | None:
        condition = cluster.conditions(name).get("OverCapacity")
        return condition if condition and condition["status"] == "True" else None

    condition = wait_until(lambda: over("sql-a") and over("sql-b"), 20, what="OverCapacity")
    assert condition["reason"] == "MaxLoadedLorasExceeded"
    message = condition["message"]
    assert "--max-loaded-loras 1" in message and "sql-a" in message and "sql-b" in message
    assert loop.wait_event("over_capacity")["limit"] == "1"

    loads = loop.metric("pulumi_lora_resync_loads_total")
    sweeps = len(loop.events("verify_sweep"))
    wait_until(lambda: len(loop.events("verify_sweep")) >= sweeps + 4, 20, what="four sweeps")
    assert loop.metric("pulumi_lora_resync_loads_total") == loads == 2, "the loop re-loaded"
    state = emulator(pod.url, "GET", "/_emulator/state")
    assert len(state["adapters"]) == 1
    kept = state["adapters"][0]["name"]
    evicted = ({"sql-a", "sql-b"} - {kept}).pop()
    conditions = cluster.conditions(evicted)
    assert conditions["Loaded"]["status"] == "False"
    assert conditions["Loaded"]["reason"] == "MaxLoadedLorasExceeded"
    assert cluster.conditions(kept)["Loaded"]["status"] == "True"
    assert any(e["reason"] == "OverCapacity" and e["type"] == "Warning" for e in cluster.events())
    assert loop.metric("pulumi_lora_resync_evictions_total") == 1

    # Declaring fewer adapters frees the room: the note is dropped and the condition resolves.
    cluster.kubectl("delete", "loraadapters.inference.llmkube.dev", kept)
    wait_until(
        lambda: served(handle).get(pod.name) == {evicted: {"sql-a": a, "sql-b": b}[evicted]}, 10
    )
    wait_until(
        lambda: cluster.conditions(evicted).get("OverCapacity", {}).get("status") == "False", 10
    )
    assert cluster.conditions(evicted)["Ready"]["status"] == "True"
