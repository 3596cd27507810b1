"""Watch resumption against the real apiserver: an expired resourceVersion (410) means relist."""

from __future__ import annotations

import asyncio
from typing import Any

from pulumi_lora._core._llmkube import adapter_manifest
from pulumi_lora._kube._objects import apply_adapter
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._resync._kube import Kube
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora.testing.testbed import Testbed


def test_an_expired_version_is_relisted_then_watched(testbed: Testbed, namespace: str) -> None:
    admin = testbed.client()
    spec = {"name": "old", "path": "/adapters/old", "inferenceServiceRef": {"name": "llama"}}
    apply_adapter(admin, adapter_manifest(namespace, "old", spec, {}))
    metrics = Metrics()
    snapshots: list[list[str]] = []
    events: list[tuple[str, str]] = []

    async def scenario() -> None:
        kube = Kube(KubeSource(kubeconfig=str(testbed.kubeconfig_path)), namespace)
        task = asyncio.create_task(
            kube.follow(
                "loraadapters",
                "1",  # long compacted out of the watch cache: the apiserver answers 410
                lambda items: snapshots.append([i["metadata"]["name"] for i in items]),
                lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
                metrics,
            )
        )
        try:
            for _ in range(100):
                if snapshots:
                    break
                await asyncio.sleep(0.05)
            new = {**spec, "name": "new"}
            await asyncio.to_thread(
                apply_adapter, admin, adapter_manifest(namespace, "new", new, {})
            )
            for _ in range(100):
                if ("ADDED", "new") in events:
                    break
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await kube.close()

    asyncio.run(scenario())
    assert snapshots == [["old"]]
    assert ("ADDED", "new") in events
    restarts: dict[Any, float] = {
        tuple(sorted(s.labels.items())): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "pulumi_lora_resync_watch_restarts_total"
    }
    assert restarts == {(("action", "relist"), ("resource", "loraadapters")): 1.0}
