"""The cluster side of a re-sync test, and probes of what the pods serve.

The loop process itself is :class:`pulumi_lora.testing.loop.LoopProcess` (re-exported here).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import httpx2

from pulumi_lora._core._llmkube import adapter_manifest
from pulumi_lora._kube._objects import apply_adapter, get_adapter
from pulumi_lora.testing.loop import LoopProcess, wait_until

__all__ = [
    "PROBE",
    "Cluster",
    "LoopProcess",
    "emulator",
    "everywhere",
    "served",
    "wait_until",
]


# --- the cluster side of a test -----------------------------------------------------------------


class Cluster:
    """One test's namespace: InferenceServices, CRs, and what the pods serve.

    ``close`` deletes the CRs and scales the InferenceServices to zero, so a later test's loop
    (which may watch every namespace) finds nothing of this one to act on.
    """

    def __init__(self, testbed: Any, namespace: str) -> None:
        self.tb = testbed
        self.namespace = namespace
        self.client = testbed.client()
        self.handles: list[Any] = []

    def deploy(self, name: str = "llama", replicas: int = 2, **kwargs: Any) -> Any:
        """Deploy an InferenceService and wait until its pods are Ready."""
        handle = self.tb.deploy_inference_service(self.namespace, name, replicas=replicas, **kwargs)
        self.handles.append(handle)
        handle.wait_ready(timeout=60)
        return handle

    def apply_cr(
        self,
        name: str,
        path: str,
        *,
        adapter: str | None = None,
        isvc: str = "llama",
        annotations: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Apply a LoRAAdapter as the provider would (server-side apply, its field manager)."""
        spec = {"name": adapter or name, "path": path, "inferenceServiceRef": {"name": isvc}}
        manifest = adapter_manifest(self.namespace, name, spec, dict(annotations or {}))
        return apply_adapter(self.client, manifest)

    def cr(self, name: str) -> dict[str, Any] | None:
        """The CR as stored (None when gone)."""
        return get_adapter(self.client, self.namespace, name)

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        """The CR's conditions by type."""
        cr = self.cr(name) or {}
        return {c["type"]: c for c in (cr.get("status") or {}).get("conditions") or ()}

    def kubectl(self, *args: str) -> str:
        """kubectl in this namespace; fails the test on a non-zero exit."""
        done = self.tb.kubectl(*args, "-n", self.namespace)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return str(done.stdout)

    def events(self) -> list[dict[str, Any]]:
        """Events in the namespace."""
        return list(json.loads(self.kubectl("get", "events", "-o", "json"))["items"])

    def close(self) -> None:
        """Delete this test's CRs and stop its pods."""
        self.tb.kubectl(
            "delete", "loraadapters.inference.llmkube.dev", "--all", "-n", self.namespace
        )
        for handle in self.handles:
            # Teardown: a failed scale must not hide the test's own result.
            with contextlib.suppress(Exception):
                self.tb.scale(self.namespace, handle.name, 0)


#: One client for the tests' probes of pods (a client per call costs a TLS context each time);
#: no keep-alive, so no connection outlives a request and a pod can restart on its port.
PROBE = httpx2.Client(trust_env=False, timeout=5, limits=httpx2.Limits(max_keepalive_connections=0))


def served(handle: Any, patience: float = 30.0) -> dict[str, dict[str, str]]:
    """Every Ready pod's adapters (name → path) from its own ``/v1/models``
    (:meth:`InferenceServiceHandle.served`)."""
    served: dict[str, dict[str, str]] = handle.served(patience=patience)
    return served


def everywhere(handle: Any, expected: Mapping[str, str], replicas: int | None = None) -> bool:
    """Whether every Ready pod (``replicas`` of them, when given) serves exactly ``expected``."""
    seen = served(handle)
    count = handle.replicas if replicas is None else replicas
    return len(seen) == count and all(adapters == dict(expected) for adapters in seen.values())


def emulator(url: str, method: str, route: str, body: Any = None) -> Any:
    """Talk to an emulator directly (out-of-band changes; its admin API)."""
    response = PROBE.request(method, f"{url}{route}", json=body, timeout=10)
    return response.json() if response.content else None
