"""Pods, ReplicaSets and Deployments are read as plain dicts (``_kube._objects.PodResource``...), by
the apiserver paths of Kubernetes' own resources, without touching lightkube's registry."""

from __future__ import annotations

import json

import httpx2
import pytest
from lightkube import Client, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.core.resource_registry import resource_registry
from lightkube.resources.core_v1 import Pod

from pulumi_lora._core._llmkube import SERVICE_LABEL
from pulumi_lora._kube._objects import (
    DeploymentResource,
    PodResource,
    ReplicaSetResource,
    list_owners,
    list_pods,
)

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "llama-0", "namespace": "ns", "labels": {SERVICE_LABEL: "llama"}},
    "spec": {"containers": [{"name": "sglang",
                             "ports": [{"name": "http", "containerPort": 30000}]}]},
    "status": {"podIP": "10.0.0.7", "phase": "Running",
               "conditions": [{"type": "Ready", "status": "True"}]},
}  # fmt: skip


def client_answering(seen: list[str]) -> Client:
    """A lightkube client whose apiserver answers every list with ``POD`` (pods) or nothing."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(f"{request.url.path}?{request.url.query.decode()}")
        items = [POD] if request.url.path.endswith("/pods") else []
        return httpx2.Response(200, content=json.dumps({"items": items, "metadata": {}}))

    config = KubeConfig.from_one(cluster=Cluster(server="http://apiserver.invalid"), user=User())
    return Client(config=config, transport=httpx2.MockTransport(answer))


def test_kubernetes_own_paths_and_plain_dicts() -> None:
    seen: list[str] = []
    client = client_answering(seen)
    (pod,) = list_pods(client, "ns", "llama")
    assert pod.name == "llama-0" and pod.ip == "10.0.0.7"
    (raw,) = client.list(PodResource, namespace="ns")
    assert isinstance(raw, dict) and raw["status"]["podIP"] == "10.0.0.7"  # no typed Pod decoded
    replicasets, deployments = list_owners(client, "ns", "llama")
    assert (replicasets, deployments) == ([], [])
    assert [path.split("?")[0] for path in seen] == [
        "/api/v1/namespaces/ns/pods",
        "/api/v1/namespaces/ns/pods",
        "/apis/apps/v1/namespaces/ns/replicasets",
        "/apis/apps/v1/namespaces/ns/deployments",
    ]
    selector = "labelSelector=inference.llmkube.dev%2Fservice%3Dllama"
    assert [selector in p for p in seen] == [True, False, True, True], seen


@pytest.mark.parametrize("resource", [PodResource, ReplicaSetResource, DeploymentResource])
def test_lightkubes_registry_keeps_its_typed_classes(resource: type) -> None:
    info = resource._api_info.resource  # type: ignore[attr-defined]
    version = f"{info.group}/{info.version}" if info.group else info.version
    assert resource_registry.get(version, info.kind) is not resource
    assert resource_registry.load("v1", "Pod") is Pod
