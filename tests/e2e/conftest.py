"""Fixtures of the e2e tests (the engine and testbed come from ``pulumi_lora.testing.fixtures``):
provider config, a Ready InferenceService, and helpers to inspect pods."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret
from pulumi import automation as auto

from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._models import LLMKUBE_CONTROLLER_USER
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed


@pytest.fixture
def config(testbed: Testbed) -> ProviderConfig:
    """Provider config pointing at the testbed (a kubeconfig path, as a user would set it)."""
    return ProviderConfig(kube=KubeSource(str(testbed.kubeconfig_path)))


@pytest.fixture
def isvc(testbed: Testbed, namespace: str) -> Iterator[InferenceServiceHandle]:
    """A 3-replica sglang InferenceService with dynamic LoRA enabled, Ready."""
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=3)
    handle.wait_ready(timeout=30)
    yield handle


def provider_for(config: ProviderConfig) -> LoRAAdapterProvider:
    """The dynamic provider as the engine would have configured it."""
    provider = LoRAAdapterProvider()
    provider._config = config
    return provider


def adapter_props(
    namespace: str, path: str, name: str = "sql-lora", **extra: Any
) -> dict[str, Any]:
    """A resource's inputs: adapter ``name`` at ``path`` on InferenceService ``llama``."""
    return {
        "adapter_name": name,
        "path": path,
        "inference_service": "llama",
        "namespace": namespace,
        **extra,
    }


def served(handle: InferenceServiceHandle) -> dict[str, dict[str, str]]:
    """Every Ready pod's adapters (name → path), read from its own /v1/models."""
    return handle.served()


def served_by_every_running_pod(
    handle: InferenceServiceHandle, patience: float = 60.0
) -> dict[str, dict[str, str]]:
    """Every pod's adapters, Ready or not (a starved machine fails readiness probes, and a pod
    that is not Ready still holds what it loaded)."""
    return handle.served(every_pod=True, patience=patience)


def emulator_post(url: str, route: str, body: dict[str, Any]) -> httpx2.Response:
    """Talk to one emulator directly (out-of-band changes in tests)."""
    return httpx2.post(f"{url}{route}", json=body, timeout=10)


def emulator_state(url: str) -> dict[str, Any]:
    """An emulator's admin view of itself (``GET /_emulator/state``: adapters, ever loaded)."""
    state: dict[str, Any] = httpx2.get(f"{url}/_emulator/state", timeout=5).json()
    return state


def drift_report(stack: auto.Stack) -> str | None:
    """What `pulumi preview --refresh --expect-no-changes --diff` proposed, or ``None`` for nothing.

    Only the engine's "no changes were expected" failure means drift; any other failure is raised,
    so an error is never taken for drift (or for its absence). The report names the resources and
    properties the preview would change, for the assertion's message.
    """
    try:
        stack.preview(refresh=True, expect_no_changes=True, diff=True)
    except auto.errors.CommandError as error:
        if "no changes were expected" not in str(error):
            raise
        return str(error)
    return None


def drift_seen(stack: auto.Stack) -> bool:
    """`pulumi preview --refresh --expect-no-changes` fails exactly when drift is seen."""
    return drift_report(stack) is not None


def keyed_service(testbed: Testbed, namespace: str, name: str, key: str) -> InferenceServiceHandle:
    """Two Ready pods started with ``--api-key key``, and Secret ``sglang-key`` (``api-key``)
    holding it, as a CR names it."""
    handle = testbed.deploy_inference_service(
        namespace, name, replicas=2, emulator_args=("--api-key", key)
    )
    handle.wait_ready(timeout=30)
    testbed.client().create(
        Secret(
            metadata=ObjectMeta(name="sglang-key", namespace=namespace), stringData={"api-key": key}
        )
    )
    return handle


class AuditCounter:
    """Requests the apiserver answered about one namespace from now on (its audit log)."""

    def __init__(self, log: Path | None, namespace: str) -> None:
        assert log is not None, "the testbed runs with its audit log on"
        self.log, self.namespace = log, namespace
        self.offset = log.stat().st_size

    def count(self, verb: str, resource: str, *, cluster_wide: bool = False) -> int:
        """How many ``verb`` requests on ``resource`` in the namespace (``cluster_wide``: across
        every namespace, as a cluster-wide LIST) since construction."""
        found = 0
        with self.log.open("rb") as lines:
            lines.seek(self.offset)
            for line in lines:
                event = json.loads(line)
                ref = event.get("objectRef") or {}
                found += (
                    event.get("stage") == "ResponseComplete"
                    and event.get("verb") == verb
                    and ref.get("resource") == resource
                    and ref.get("namespace") == (None if cluster_wide else self.namespace)
                    # LLMKube's LoRA controller (played by every testbed) is not ours to count
                    and (event.get("user") or {}).get("username") != LLMKUBE_CONTROLLER_USER
                )
        return found
