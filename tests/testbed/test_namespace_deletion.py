"""``kubectl delete namespace`` deletes everything a namespace holds, and the namespace.

The real namespace controller and garbage collector of the testbed's kube-controller-manager:
an InferenceService with its Deployment, ReplicaSet, pods and Service, LoRAAdapters (LLMKube's
LoRA controller runs, as in every LLMKube install) and the re-sync loop's objects. Without a
controller-manager such a namespace stayed ``Terminating`` forever, so no stack that declares its
own Namespace could be destroyed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pulumi_lora._models import LLMKUBE_FINALIZER
from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import DEFAULT_EXTRA_ARGS, Testbed
from pulumi_lora.testing.testbed._process import alive

CRS = "/apis/inference.llmkube.dev/v1alpha1/namespaces/{ns}/{plural}"


def apply(testbed: Testbed, *manifests: dict[str, Any]) -> None:
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)})
    done = testbed.kubectl("apply", "-f", "-", input=text)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def testbed(testbed_binaries: object) -> Iterator[Testbed]:
    """A plain ``Testbed()``: LLMKube's LoRA controller acts on every CR (no coexistence policy
    holds it off), so its finalizer is on each LoRAAdapter and must come off again."""
    with Testbed() as bed:
        yield bed


def test_a_namespace_holding_the_platform_deletes_completely(testbed: Testbed) -> None:
    ns = testbed.create_namespace("whole-platform")
    isvc = {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "llama", "namespace": ns},
        "spec": {
            "modelRef": "llama-8b",
            "runtime": "sglang",
            "replicas": 2,
            "extraArgs": list(DEFAULT_EXTRA_ARGS),
            "endpoint": {"port": 30000},
        },
    }
    adapters = [
        {
            "apiVersion": "inference.llmkube.dev/v1alpha1",
            "kind": "LoRAAdapter",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "inferenceServiceRef": {"name": "llama"},
                "name": name,
                "path": testbed.make_adapter(name),
            },
        }
        for name in ("sql", "chat")
    ]
    loop = resync_manifests(ns, "pulumi-lora:testbed", watch_namespace=ns, name=f"loop-{ns}"[:60])
    cluster_wide = [m for m in loop if m["metadata"].get("namespace") != ns]
    # The loop's manifests carry the coexistence policy, which refuses LLMKube's LoRA controller
    # every write on the CRs the loop serves once the apiserver has loaded it (moments after the
    # apply): applied together, the CRs LLMKube had not reached by then never got its finalizer
    # (a CI run saw one). So the loop comes once LLMKube has marked both.
    apply(testbed, isvc, *adapters)
    try:
        handle = wait_until(lambda: _handle(testbed, ns), 30, what="the operator's Deployment")
        pids = [info.pid for info in handle.wait_ready(30)]
        # LLMKube's LoRA controller put its finalizer on each: it must take it off again.
        wait_until(
            lambda: all(
                LLMKUBE_FINALIZER in (cr["metadata"].get("finalizers") or [])
                for cr in testbed.rest.get(CRS.format(ns=ns, plural="loraadapters"))["items"]
            ),
            30,
            what="LLMKube's finalizer on the LoRAAdapters",
        )
        apply(testbed, *loop)
        listed = testbed.kubectl("get", "all,loraadapters,serviceaccounts,roles,rolebindings",
                                 "-n", ns, "-o", "name")  # fmt: skip
        held = set(listed.stdout.split())
        assert {"service/llama", "deployment.apps/llama", "deployment.apps/" + f"loop-{ns}"[:60],
                "loraadapter.inference.llmkube.dev/sql"} <= held, held  # fmt: skip
        assert len([h for h in held if h.startswith("pod/llama-")]) == 2

        done = testbed.kubectl("delete", "namespace", ns, "--timeout=120s", timeout=150)
        assert done.returncode == 0, done.stderr
        assert f'namespace "{ns}" deleted' in done.stdout
        gone = testbed.kubectl("get", "namespace", ns)
        assert gone.returncode != 0 and "NotFound" in gone.stderr
        assert not [pid for pid in pids if pid and alive(pid)]
        for plural in ("loraadapters", "inferenceservices"):
            assert testbed.rest.get(CRS.format(ns=ns, plural=plural))["items"] == []
    finally:
        for manifest in cluster_wide:
            testbed.kubectl("delete", manifest["kind"], manifest["metadata"]["name"],
                            "--ignore-not-found")  # fmt: skip


def _handle(testbed: Testbed, namespace: str) -> Any:
    try:
        return testbed.inference_service(namespace, "llama")
    except KeyError:
        return None
