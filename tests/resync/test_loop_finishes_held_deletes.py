"""The loop finishes a delete that a failed ``pulumi destroy`` left (docs/protocol.md rule 4).

The provider's destroy failed on a pod that refused the unload; nobody runs it again (the stack
was abandoned). Where the loop runs, the held CR does not wait for a person: once the provider's
``delete@`` lease is over, the loop unloads from every serving pod (retrying the refusing one
with its backoff) and removes pulumi-lora's finalizer, so the CR goes.
"""

from __future__ import annotations

from datetime import timedelta

import httpx2
import pytest
from _resync_harness import Cluster, served, wait_until
from conftest import LoopFactory

from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig, now_utc
from pulumi_lora._models import ANNOTATION_OPERATION, UNLOAD_FINALIZER, format_time
from pulumi_lora._provider import LoRAAdapterProvider


def test_the_loop_finishes_a_delete_a_failed_destroy_left(
    cluster: Cluster, loops: LoopFactory
) -> None:
    handle = cluster.deploy(replicas=2)
    path = cluster.tb.make_adapter("held")
    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kube=KubeSource(str(cluster.tb.kubeconfig_path)))
    props = {
        "adapter_name": "sql-lora",
        "path": path,
        "inference_service": "llama",
        "namespace": cluster.namespace,
    }
    outs = provider.create(props).outs
    stuck, other = handle.ready_pods()
    refuse = {"faults": ["/unload_lora_adapter:status=500,times=always"]}
    assert httpx2.post(f"{stuck.url}/_emulator/faults", json=refuse, timeout=10).status_code == 200
    with pytest.raises(PulumiLoRAError, match=f"pod {stuck.name}"):
        provider.delete("", outs)
    held = cluster.cr("sql-lora")
    assert held is not None and held["metadata"]["finalizers"] == [UNLOAD_FINALIZER]
    # The destroy failed long ago: its lease (5 minutes) is over.
    old = format_time(now_utc() - timedelta(minutes=6))
    cluster.kubectl(
        "annotate", "lora", "sql-lora", "--overwrite", f"{ANNOTATION_OPERATION}=delete@{old}"
    )

    loop = loops(cluster.namespace)
    loop.wait_event("held_delete_seen", timeout=60, cr=f"{cluster.namespace}/sql-lora")
    wait_until(
        lambda: any(
            e["failures"]
            for e in loop.events("pod_synced", pod=f"{cluster.namespace}/{stuck.name}")
        ),
        60,
        what="the loop's unload to fail on the refusing pod",
    )
    assert served(handle)[stuck.name] == {"sql-lora": path}
    assert served(handle)[other.name] == {}
    still = cluster.cr("sql-lora")  # the refusing pod keeps it held
    assert still is not None and still["metadata"]["finalizers"] == [UNLOAD_FINALIZER]

    assert httpx2.delete(f"{stuck.url}/_emulator/faults", timeout=10).status_code == 200
    loop.wait_event("held_delete_finished", timeout=60, cr=f"{cluster.namespace}/sql-lora")
    wait_until(lambda: cluster.cr("sql-lora") is None, 30, what="the CR to go")
    assert served(handle) == {stuck.name: {}, other.name: {}}
