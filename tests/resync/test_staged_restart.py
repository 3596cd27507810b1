"""A staged adapter after a pod restart (issue 40): the re-sync loop re-loads it from its staged
path, the CR's ``spec.path``, and never stages: the source is gone by then."""

from __future__ import annotations

from pathlib import Path

from _resync_harness import Cluster, served, wait_until
from conftest import LoopFactory

from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import STAGERS, ProviderConfig
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.peft import write_adapter

COMMIT = "3" * 40


def test_a_restarted_pod_reloads_a_staged_adapter_without_staging(
    cluster: Cluster, loops: LoopFactory, tmp_path: Path
) -> None:
    handle = cluster.deploy(replicas=2, adapter_claim="adapters")
    write_adapter(tmp_path / "sql", seed="sql")
    files = {p.name: p.read_bytes() for p in (tmp_path / "sql").iterdir()}
    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kube=KubeSource(str(cluster.tb.kubeconfig_path)))
    loop = loops(cluster.namespace)
    # Leading before the restart, or the restart is its first sync's news (reason "verify"): the
    # shared Lease can still be an earlier test's loop's for a few seconds.
    loop.wait_event("caches_synced")
    with PlayedHub() as hub:
        hub.publish("acme/sql-lora", files, commit=COMMIT)
        cluster.tb.expose_to_pods(hub.port)
        made = provider.create(
            {
                "adapter_name": "sql-lora",
                "source": f"hf://acme/sql-lora@{COMMIT}",
                "source_endpoint": hub.endpoint,
                "inference_service": "llama",
                "namespace": cluster.namespace,
            }
        )
    STAGERS.close()  # the command ended: its stager with it
    path = (made.outs or {})["path"]
    assert all(pod == {"sql-lora": path} for pod in served(handle).values())

    victim = handle.pods()[0].name
    cluster.tb.restart_pod(cluster.namespace, victim)
    wait_until(lambda: handle.pod(victim).ready, 30, what="the restarted pod Ready")
    wait_until(
        lambda: served(handle).get(victim) == {"sql-lora": path}, 10, what="the staged adapter"
    )
    synced = loop.wait_event("pod_synced", reason="restart", pod=f"{cluster.namespace}/{victim}")
    assert synced["loads"] == 1 and synced["failures"] == 0
    assert cluster.kubectl("get", "jobs", "-o", "name").strip() == ""  # the loop made none
