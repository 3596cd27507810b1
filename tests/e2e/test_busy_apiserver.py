"""A busy or refusing apiserver, through the real engine (issue 38).

API Priority and Fairness sheds requests with 429 and ``Retry-After`` on every managed cluster:
``pulumi up``, ``refresh`` and ``destroy`` wait and send them again, and end as on a quiet
cluster. A 403 on the InferenceService during ``pulumi destroy`` says nothing of what the pods
serve: the destroy fails and every CR stays, being deleted, held, until a retry can unload.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._models import UNLOAD_FINALIZER
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import Testbed
from tests.e2e.conftest import served
from tests.e2e.shedding import busy_apiserver, kind_of

NAMES = ("sql-lora", "chat-lora", "code-lora")


def test_kind_of() -> None:
    assert kind_of("GET", "/api/v1/namespaces/n/pods?labelSelector=x") == "GET pods"
    assert kind_of("GET", "/apis/inference.llmkube.dev/v1alpha1/namespaces/n/loraadapters/a") == (
        "GET loraadapters/NAME"
    )
    assert kind_of(
        "PATCH", "/apis/inference.llmkube.dev/v1alpha1/namespaces/n/loraadapters/a/status"
    ) == ("PATCH loraadapters/NAME/status")
    assert kind_of("GET", "/apis/inference.llmkube.dev/v1alpha1/loraadapters") == (
        "GET loraadapters"
    )


def crs(testbed: Testbed, namespace: str) -> dict[str, dict[str, Any]]:
    got = testbed.kubectl("get", "lora", "-n", namespace, "-o", "json")
    assert got.returncode == 0, got.stderr
    return {cr["metadata"]["name"]: cr for cr in json.loads(got.stdout)["items"]}


def test_shed_requests_are_retried_and_a_refused_read_keeps_the_crs(
    engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=30)
    paths = {name: testbed.make_adapter(name) for name in NAMES}

    def program() -> None:
        for name in NAMES:
            LoRAAdapter(
                name,
                LoRAAdapterArgs(
                    adapter_name=name,
                    path=paths[name],
                    inference_service="llama",
                    namespace=namespace,
                ),
            )

    with busy_apiserver(testbed, tmp_path) as (busy, kubeconfig):
        stack = engine.inline_stack("busy-apiserver", "shed", program)
        stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(kubeconfig)))

        busy.shed_anew()
        up = stack.up()
        assert up.summary.resource_changes == {"create": 4}, up.summary.resource_changes
        assert {"GET inferenceservices/NAME", "PATCH loraadapters/NAME"} <= busy.shed(), busy
        want = {name: paths[name] for name in NAMES}
        assert served(handle) == {pod.name: want for pod in handle.ready_pods()}

        busy.shed_anew()
        refreshed = stack.refresh()
        assert refreshed.summary.resource_changes == {"same": 4}, refreshed.summary
        assert "GET loraadapters/NAME" in busy.shed() or "GET loraadapters" in busy.shed(), busy

        busy.refused.add("GET inferenceservices/NAME")
        printed: list[str] = []
        with pytest.raises(auto.CommandError) as failed:
            stack.destroy(on_output=printed.append)
        text = "\n".join(printed) + str(failed.value)
        for name in NAMES:
            assert f"could not unload adapter '{name}'" in text, text
            assert f"LoRAAdapter {namespace}/{name} stays, being deleted" in text, text
        assert "HTTP 403 Forbidden" in text, text
        kept = crs(testbed, namespace)
        assert set(kept) == set(NAMES), kept
        for cr in kept.values():
            assert cr["metadata"].get("deletionTimestamp"), cr
            assert UNLOAD_FINALIZER in cr["metadata"]["finalizers"], cr
        assert served(handle) == {pod.name: want for pod in handle.ready_pods()}

        busy.refused.clear()
        busy.shed_anew()
        stack.destroy()
        assert busy.shed(), busy
    assert crs(testbed, namespace) == {}
    assert served(handle) == {pod.name: {} for pod in handle.ready_pods()}
