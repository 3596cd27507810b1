"""The delegated transport: the provider only applies the CR and awaits; the loop does the rest.

The SGLang pods are keyed (``--api-key``), as in the case delegation exists for: the key lives in
a Secret the CR names, the loop reads it, and it appears in no log, status or Event.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from _resync_harness import PROBE, Cluster, everywhere, served, wait_until
from conftest import Identity, LoopFactory

from pulumi_lora._errors import SwapRolledBack
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig, now_utc
from pulumi_lora._models import ANNOTATION_OPERATION, Transport, format_time
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.deployer import bound_identity


def _provider(cluster: Cluster) -> LoRAAdapterProvider:
    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kube=KubeSource(str(cluster.tb.kubeconfig_path)))
    return provider


def test_provider_create_update_delete_through_the_loop(
    cluster: Cluster, loops: LoopFactory
) -> None:
    key = f"sk-{secrets.token_hex(16)}"
    handle = cluster.deploy(replicas=2, emulator_args=("--api-key", key))
    cluster.kubectl("create", "secret", "generic", "sglang-key", f"--from-literal=api-key={key}")
    v1, v2 = cluster.tb.make_adapter("sql-v1"), cluster.tb.make_adapter("sql-v2")
    loop = loops(cluster.namespace)
    provider = _provider(cluster)

    def props(path: str) -> dict[str, Any]:
        return {
            "adapter_name": "sql-lora",
            "path": path,
            "inference_service": "llama",
            "namespace": cluster.namespace,
            "transport": "delegated",
            "api_key_secret_name": "sglang-key",
            "ready_timeout_seconds": 30,
        }

    created = provider.create(props(v1))
    assert created.outs["loaded"] is True
    assert _served_with_key(handle, key) == {p.name: {"sql-lora": v1} for p in handle.pods()}
    stored = cluster.cr("sql-lora")
    assert stored is not None
    loaded = {c["type"]: c for c in stored["status"]["conditions"]}["Loaded"]
    assert loaded["observedGeneration"] == stored["metadata"]["generation"] == 1
    managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
    assert "pulumi-lora-resync" in managers

    updated = provider.update(created.id, created.outs, props(v2))
    assert updated.outs["loaded"] is True and updated.outs["loaded_path"] == v2
    assert _served_with_key(handle, key) == {p.name: {"sql-lora": v2} for p in handle.pods()}
    assert cluster.cr("sql-lora")["metadata"]["generation"] == 2  # type: ignore[index]

    # A bad revision (rank 512 > the pods' --max-lora-rank 64): the loop puts v2 back on every
    # pod, the update fails in SGLang's words, and the CR names v2 again.
    bad = cluster.tb.make_adapter("sql-r512", rank=512)
    with pytest.raises(SwapRolledBack) as caught:
        provider.update(created.id, updated.outs, props(bad))
    message = str(caught.value)
    assert f"swapping sql-lora to {bad!r} failed (pod " in message
    assert "with rank 512 is incompatible" in message  # SGLang's words
    names = ", ".join(sorted(p.name for p in handle.pods()))
    assert f"rolled back to {v2!r}: it serves again on {names}" in message
    assert _served_with_key(handle, key) == {p.name: {"sql-lora": v2} for p in handle.pods()}
    restored = cluster.cr("sql-lora")
    assert restored is not None and restored["spec"]["path"] == v2
    assert loop.events("swap_rolled_back", failed=bad)
    wait_until(  # the restored generation is the loop's to report: loaded, at v2
        lambda: _loaded(cluster.cr("sql-lora") or {}),
        10,
        what="the loop to report the restored generation loaded",
    )

    provider.delete(created.id, updated.outs)
    assert cluster.cr("sql-lora") is None
    wait_until(
        lambda: _served_with_key(handle, key) == {p.name: {} for p in handle.pods()},
        10,
        what="the loop to unload the deleted CR's adapter",
    )
    assert loop.events("cr_deleted", adapter="sql-lora")

    # The key went to the pods and nowhere else.
    assert key not in "".join(loop.raw)
    assert key not in json.dumps(cluster.events())
    assert key not in json.dumps(stored)
    unkeyed = PROBE.get(f"{handle.pods()[0].url}/v1/models")
    assert unkeyed.status_code == 401  # the key was needed all along


def _loaded(cr: dict[str, Any]) -> bool:
    """Whether the loop reported the CR's current generation loaded."""
    generation = cr.get("metadata", {}).get("generation")
    return any(
        c["type"] == "Loaded"
        and c["status"] == "True"
        and c.get("observedGeneration") == generation
        for c in (cr.get("status") or {}).get("conditions") or ()
    )


def _served_with_key(handle: Any, key: str) -> dict[str, dict[str, str]]:
    found = {}
    for pod in handle.ready_pods():
        body = PROBE.get(f"{pod.url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
        found[pod.name] = {m["id"]: m["root"] for m in body["data"] if m.get("parent")}
    return found


def test_the_operation_annotation_means_hands_off(cluster: Cluster, loops: LoopFactory) -> None:
    """Rules 2 and 3: a young ``update@`` and any ``delete@`` keep the loop off the adapter."""
    handle = cluster.deploy(replicas=1)
    a, b, c = (cluster.tb.make_adapter(n) for n in ("busy", "leaving", "abandoned"))
    stale = format_time(now_utc().replace(year=now_utc().year - 1))
    cluster.apply_cr(
        "busy", a, annotations={ANNOTATION_OPERATION: f"update@{format_time(now_utc())}"}
    )
    cluster.apply_cr("leaving", b, annotations={ANNOTATION_OPERATION: f"delete@{stale}"})
    cluster.apply_cr("abandoned", c, annotations={ANNOTATION_OPERATION: f"update@{stale}"})
    loop = loops(cluster.namespace)
    wait_until(
        lambda: everywhere(handle, {"abandoned": c}), 20, what="the abandoned update acted on"
    )
    loop.wait_event("verify_sweep")
    wait_until(lambda: len(loop.events("verify_sweep")) >= 3, 10)
    assert everywhere(handle, {"abandoned": c}), "the loop touched a CR mid-operation"
    assert "Loaded" not in cluster.conditions("busy")  # no status while hands off

    cluster.apply_cr("busy", a)  # the provider's next apply omits the annotation: done
    wait_until(lambda: everywhere(handle, {"abandoned": c, "busy": a}), 5)
    wait_until(lambda: cluster.conditions("busy").get("Loaded", {}).get("status") == "True", 10)
    assert "leaving" not in served(handle)[handle.pods()[0].name]


def test_a_refresh_says_when_the_loop_is_gone(
    cluster: Cluster, loops: LoopFactory, resync_identity: Identity, tmp_path: Path, capfd: Any
) -> None:
    """A delegated refresh reports the loop's verdict while the loop's leader renews the Lease
    its ``ResyncLoop`` condition names; once it does not, ``Ready`` is Unknown and the refresh
    says why in words. The provider runs as exactly ``pulumi-lora rbac --transport delegated``."""
    cluster.deploy(replicas=1)
    path = cluster.tb.make_adapter("gone-loop")
    loop = loops(cluster.namespace)
    kubeconfig = bound_identity(
        cluster.tb,
        cluster.namespace,
        tmp_path,
        Transport.DELEGATED,
        loop_namespace=resync_identity.namespace,
    )
    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kube=KubeSource(str(kubeconfig)))
    props = {
        "adapter_name": "gone-loop",
        "path": path,
        "inference_service": "llama",
        "namespace": cluster.namespace,
        "transport": "delegated",
        "ready_timeout_seconds": 30,
    }
    made = provider.create(props)
    lease = f"Lease {resync_identity.namespace}/{resync_identity.lease}"
    served_by = {c["type"]: c for c in made.outs["conditions"]}["ResyncLoop"]
    assert served_by["message"].endswith(lease)
    alive = provider.read(made.id, made.outs)
    assert alive.outs["ready"] is True and alive.outs["conditions"] == made.outs["conditions"]
    assert "Ready unknown" not in capfd.readouterr().err

    loop.kill()  # no release: the Lease stays held by a leader that no longer renews it

    def refreshed() -> dict[str, Any] | None:
        outs = provider.read(made.id, made.outs).outs
        return None if outs["ready"] else outs

    outs = wait_until(refreshed, 30, interval=1.0, what="the refresh to doubt a gone loop")
    ready = {c["type"]: c for c in outs["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("Unknown", "ResyncLoopStale")
    assert f"the re-sync loop's {lease} is held by its leader" in ready["message"]
    assert "it last reported Ready True (AdapterReady)" in ready["message"]
    err = capfd.readouterr().err
    assert f"Ready unknown: the re-sync loop's {lease}" in err, err
