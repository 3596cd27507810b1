"""Adopting adapters that already run (issue 24, Python's half): ``LoRAAdapter(..., adopt=True)``.

A CR made by kubectl, its adapter already loaded on every pod: adoption takes the CR over (same
uid) with no load and no unload, which every pod is set to refuse, so any request would fail
the create. A pod lacking it gets exactly one load. A CR whose spec differs, or that a
pulumi-lora stack already manages, is refused with what to do; a failed adoption gives the CR
back as it was found. The last test runs it through the engine, as a program does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pulumi
import pytest
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter
from pulumi_lora._errors import AdapterNotLoaded, ClusterError
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import adapter_props, emulator_post, provider_for, served

REFUSE = ["/load_lora_adapter:status=500", "/unload_lora_adapter:status=500"]


provider = provider_for


def props(namespace: str, path: str, **extra: Any) -> dict[str, Any]:
    return adapter_props(namespace, path, **{"adopt": True, **extra})


def kubectl_cr(testbed: Testbed, namespace: str, path: str) -> dict[str, Any]:
    """The CR as a team made it before Pulumi: kubectl, no pulumi-lora annotation."""
    manifest = {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": "sql-lora", "namespace": namespace},
        "spec": {"inferenceServiceRef": {"name": "llama"}, "name": "sql-lora", "path": path},
    }
    done = testbed.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    assert done.returncode == 0, done.stderr
    found = get_adapter(testbed.client(), namespace, "sql-lora")
    assert found is not None
    return found


def loaded_by_hand(handle: InferenceServiceHandle, path: str, pods: int | None = None) -> None:
    for pod in handle.ready_pods()[:pods]:
        body = {"lora_name": "sql-lora", "lora_path": path}
        assert emulator_post(pod.url, "/load_lora_adapter", body).status_code == 200


@contextmanager
def refusing(handle: InferenceServiceHandle, pods: int | None = None) -> Iterator[None]:
    """While inside, the first ``pods`` Ready pods (all by default) answer every load and unload
    with a 500: any such request fails what sends it."""
    try:
        for pod in handle.ready_pods()[:pods]:
            answer = httpx2.post(f"{pod.url}/_emulator/faults", json={"faults": REFUSE}, timeout=5)
            assert answer.status_code == 200, answer.text
        yield
    finally:
        for pod in handle.ready_pods():
            httpx2.delete(f"{pod.url}/_emulator/faults", timeout=5)


def test_adopting_a_running_adapter_sends_nothing_to_the_pods(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    path = testbed.make_adapter("sql-adopt")
    before = kubectl_cr(testbed, namespace, path)
    loaded_by_hand(isvc, path)
    with refusing(isvc):  # any load or unload would fail
        outs = provider(config).create(props(namespace, path)).outs
    assert outs["loaded"] and outs["ready"], outs["conditions"]
    after = get_adapter(testbed.client(), namespace, "sql-lora")
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["annotations"]["pulumi-lora.dev/managed-by"] == "pulumi"
    assert served(isvc) == {pod.name: {"sql-lora": path} for pod in isvc.ready_pods()}
    provider(config).delete("", outs)
    assert get_adapter(testbed.client(), namespace, "sql-lora") is None


def test_adoption_loads_only_where_the_adapter_lacks(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    path = testbed.make_adapter("sql-adopt-some")
    kubectl_cr(testbed, namespace, path)
    loaded_by_hand(isvc, path, pods=2)  # of 3
    with refusing(isvc, pods=2):  # any load or unload would fail
        outs = provider(config).create(props(namespace, path)).outs
    assert served(isvc) == {pod.name: {"sql-lora": path} for pod in isvc.ready_pods()}
    provider(config).delete("", outs)


def test_what_adoption_refuses_and_a_failed_one_gives_back(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    path, other = testbed.make_adapter("sql-theirs"), testbed.make_adapter("sql-ours")
    kubectl_cr(testbed, namespace, path)
    with pytest.raises(ClusterError, match="already exists and this stack did not create it; set "):
        provider(config).create(props(namespace, path, adopt=False))
    with pytest.raises(
        ClusterError,
        match=r"exists with another spec \(spec.path is '/adapters/sql-theirs', declared "
        r"'/adapters/sql-ours'\); adopt takes over only",
    ):
        provider(config).create(props(namespace, other))

    # A failed adoption: the CR stays, as it was (no annotation of ours), nothing loaded.
    with refusing(isvc), pytest.raises(AdapterNotLoaded):
        provider(config).create(props(namespace, path))
    kept = get_adapter(testbed.client(), namespace, "sql-lora")
    assert kept is not None
    assert not any(k.startswith("pulumi-lora.dev/") for k in kept["metadata"]["annotations"] or {})
    assert all(adapters == {} for adapters in served(isvc).values())

    outs = provider(config).create(props(namespace, path)).outs  # now it takes
    with pytest.raises(ClusterError, match="already managed by a pulumi-lora stack"):
        provider(config).create(props(namespace, path))
    provider(config).delete("", outs)


def test_a_read_by_id_alone_declares_the_cr_and_writes_nothing(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    """What ``pulumi import`` of ``NAMESPACE/NAME`` asks of the provider (``provider/``; the
    CLI's side is tests/cli/test_yaml_adoption.py): the CR's declaration as the inputs, every
    pod's truth as the outputs, and nothing sent to a pod or written to the CR."""
    path = testbed.make_adapter("sql-import")
    before = kubectl_cr(testbed, namespace, path)
    loaded_by_hand(isvc, path)
    with refusing(isvc):  # any load or unload would fail
        found = provider(config).read(f"{namespace}/sql-lora", {})
    assert found.id == f"{namespace}/sql-lora"
    assert found.inputs == {
        "adapter_name": "sql-lora",
        "path": path,
        "inference_service": "llama",
        "namespace": namespace,
    }
    assert found.outs is not None and found.outs["loaded"] is True
    assert found.outs["cr_uid"] == before["metadata"]["uid"]
    assert [p["loaded"] for p in found.outs["pods"]] == [True] * len(isvc.ready_pods())
    after = get_adapter(testbed.client(), namespace, "sql-lora")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert provider(config).read(f"{namespace}/absent", {}).id == ""  # no such CR: not found


def test_a_program_adopts_through_the_engine(
    engine: LocalEngine, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    path = testbed.make_adapter("sql-adopt-engine")
    before = kubectl_cr(testbed, namespace, path)
    loaded_by_hand(isvc, path)

    def program() -> None:
        adapter = LoRAAdapter(
            "sql", adapter_name="sql-lora", path=path, inference_service="llama",
            namespace=namespace, adopt=True,
        )  # fmt: skip
        pulumi.export("uid", adapter.cr_uid)

    stack = engine.inline_stack("adopt", "dev", program)
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    with refusing(isvc):  # any load or unload would fail
        up = stack.up()
    assert up.outputs["uid"].value == before["metadata"]["uid"]
    assert not stack.preview(refresh=True, expect_no_changes=True).change_summary.get("update")
    stack.destroy()
    assert get_adapter(testbed.client(), namespace, "sql-lora") is None
    assert all(adapters == {} for adapters in served(isvc).values())
