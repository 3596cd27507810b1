"""A staged adapter after a pod restart (issue 40): the re-sync loop re-loads it from its staged
path, the CR's ``spec.path``, and never stages: the source is gone by then. A delegated staged
adapter's cleanup (issue 53) reads no Secret and sends nothing to pods."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from _resync_harness import PROBE, Cluster, served, wait_until
from conftest import Identity, LoopFactory

from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import STAGERS, ProviderConfig
from pulumi_lora._models import Transport
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.deployer import bound_identity
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


def test_a_delegated_staged_adapter_is_collected_reading_no_secret_and_reaching_no_pod(
    cluster: Cluster,
    loops: LoopFactory,
    resync_identity: Identity,
    tmp_path: Path,
    capfd: Any,
) -> None:
    """Issue 53: the cleanup of a delegated staged adapter read the SGLang key's Secret and
    asked every pod what it serves. The delete here runs as exactly ``pulumi-lora rbac
    --transport delegated --staging -n NS`` (no Secret, and LoRAAdapters listed in its
    namespace only), with no grace period: its collection removes the directory, deciding
    from the CRs alone. The create runs as that role too: a delegated create read the key's
    Secret as well (``_lifecycle._steps.create``), which the role does not grant."""
    key = f"sk-{secrets.token_hex(16)}"
    handle = cluster.deploy(replicas=2, adapter_claim="adapters", emulator_args=("--api-key", key))
    cluster.kubectl("create", "secret", "generic", "sglang-key", f"--from-literal=api-key={key}")
    write_adapter(tmp_path / "sql", seed="sql")
    files = {p.name: p.read_bytes() for p in (tmp_path / "sql").iterdir()}
    loops(cluster.namespace)
    kubeconfig = bound_identity(
        cluster.tb,
        cluster.namespace,
        tmp_path,
        Transport.DELEGATED,
        staging=True,
        loop_namespace=resync_identity.namespace,
    )
    provider = LoRAAdapterProvider()  # the up's command, as the delegated role
    provider._config = ProviderConfig(kube=KubeSource(str(kubeconfig)))
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
                "transport": "delegated",
                "api_key_secret_name": "sglang-key",
                "ready_timeout_seconds": 30,
            }
        )
    outs = made.outs or {}
    path = outs["path"]
    assert outs["loaded"] is True
    directory = cluster.tb.claim_directory(cluster.namespace, "adapters") / Path(path).name
    assert directory.is_dir()
    STAGERS.close()  # the create's command ended
    capfd.readouterr()
    deployer = LoRAAdapterProvider()  # the destroy's command, as the delegated role
    deployer._config = ProviderConfig(kube=KubeSource(str(kubeconfig)), staging_grace=0)
    deployer.delete(made.id, outs)
    said = capfd.readouterr().err
    STAGERS.close()
    assert f"staged directory {path} removed: nothing names it any more" in said, said
    assert not directory.exists()
    assert "Forbidden" not in said and "secrets" not in said
    wait_until(
        lambda: all(_served(pod.url, key) == {} for pod in handle.ready_pods()),
        10,
        what="the loop to unload the deleted CR's adapter",
    )


def _served(url: str, key: str) -> dict[str, str]:
    body = PROBE.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
    return {m["id"]: m["root"] for m in body["data"] if m.get("parent")}
