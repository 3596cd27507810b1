"""Installing the project's CRDs into a testbed and waiting until they are served."""

from __future__ import annotations

import logging
import time
from typing import Any

from pulumi_lora._kube._crd import (
    GROUP,
    INFERENCE_SERVICE_PLURAL,
    LORA_ADAPTER_PLURAL,
    VERSION,
    all_crds,
)
from pulumi_lora.testing.testbed._rest import KubeRest

__all__ = ["CrdNotEstablishedError", "install_crds"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FIELD_MANAGER = "pulumi-lora-testbed"
"""The field manager every testbed write uses."""


class CrdNotEstablishedError(RuntimeError):
    """A CRD was accepted but did not become Established in time."""


def _condition(crd: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in crd.get("status", {}).get("conditions", []) or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


def install_crds(rest: KubeRest, timeout: float = 30.0) -> list[str]:
    """Server-side apply every CRD of :func:`pulumi_lora._kube._crd.all_crds`; wait for Established.

    Returns the CRD names. Raises :class:`CrdNotEstablishedError` naming the CRD and its last
    conditions when one is not served within ``timeout`` seconds.
    """
    names = []
    for crd in all_crds():
        name = crd["metadata"]["name"]
        rest.apply(f"{_CRD_PATH}/{name}", crd, FIELD_MANAGER)
        names.append(name)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            current = rest.get(f"{_CRD_PATH}/{name}")
            established = _condition(current, "Established")
            if established and established.get("status") == "True":
                _log.info("CRD %s established", name)
                break
            if time.monotonic() > deadline:
                conditions = current.get("status", {}).get("conditions")
                raise CrdNotEstablishedError(f"CRD {name} not Established: {conditions}")
            time.sleep(0.05)
    _warm_up(rest)
    return names


# Minimal valid objects, created with dryRun=All: the first write of a custom resource after its CRD
# was established waits (about 2 s) for the apiserver to build its handler; paying that here keeps
# it out of the first test, and proves the resources are really served.
_SAMPLES = {
    LORA_ADAPTER_PLURAL: {
        "kind": "LoRAAdapter",
        "spec": {
            "name": "warm-up",
            "path": "/adapters/warm-up",
            "inferenceServiceRef": {"name": "x"},
        },
    },
    INFERENCE_SERVICE_PLURAL: {"kind": "InferenceService", "spec": {"modelRef": "warm-up"}},
}


def _warm_up(rest: KubeRest) -> None:
    for plural, sample in _SAMPLES.items():
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "metadata": {"name": "testbed-warm-up", "namespace": "default"},
            **sample,
        }
        rest.request(
            "POST",
            f"/apis/{GROUP}/{VERSION}/namespaces/default/{plural}",
            body=body,
            params={"dryRun": "All"},
        )
