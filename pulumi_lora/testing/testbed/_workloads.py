"""What LLMKube's operator would write, as pure functions of what it reads.

The operator's Deployment and Service for an InferenceService and the service's status, computed
here from plain dicts (the objects as the apiserver returns them), so the rules can be read and
tested apart from the threads and requests of ``_played.py``; and the names the real
Deployment controller uses (``pod-template-hash``, the revision annotation).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pulumi_lora._kube._crd import GROUP, VERSION

__all__ = [
    "ANNOTATION_EMULATOR_ARGS",
    "ANNOTATION_NETWORK",
    "ANNOTATION_PROBE_TIME_SCALE",
    "ANNOTATION_SERVER",
    "ANNOTATION_STARTUP_DELAY",
    "CONTAINER_NAME",
    "DEFAULT_PORT",
    "HASH_LABEL",
    "NODE_NAME",
    "REVISION",
    "SERVICE_LABEL",
    "controller_uid",
    "isvc_status",
    "owner_reference",
    "render_deployment",
    "render_service",
    "service_is_current",
]

CONTAINER_NAME = "sglang"
"""Container name LLMKube gives the SGLang runtime."""

NODE_NAME = "testbed-node"
"""The one Node every pod is bound to."""

DEFAULT_PORT = 30000
"""SGLang's default port: the container port when the InferenceService names none."""

SERVICE_LABEL = "inference.llmkube.dev/service"
"""The label LLMKube puts on an InferenceService's pods (its value: the service's name)."""

HASH_LABEL = "pod-template-hash"
"""The label the Deployment controller adds to its ReplicaSets and their pods."""

REVISION = "deployment.kubernetes.io/revision"
"""The Deployment controller's revision annotation (on the Deployment and each ReplicaSet)."""

ANNOTATION_NETWORK = "testbed.pulumi-lora.dev/network"
"""Test knob on an InferenceService (copied to its pods): ``loopback`` or ``netns``."""

ANNOTATION_STARTUP_DELAY = "testbed.pulumi-lora.dev/startup-delay"
"""Test knob: seconds the emulator answers 503 on ``/health_generate`` after start."""

ANNOTATION_EMULATOR_ARGS = "testbed.pulumi-lora.dev/emulator-args"
"""Test knob: a JSON list of extra emulator-only arguments."""

ANNOTATION_PROBE_TIME_SCALE = "testbed.pulumi-lora.dev/probe-time-scale"
"""Test knob: the factor on the readiness probe's periods (the kubelet's default when absent)."""

ANNOTATION_SERVER = "testbed.pulumi-lora.dev/server"
"""Test knob: what the SGLang container runs, ``emulator`` (the default) or ``sglang`` (the real
server on the CPU, ``pulumi_lora.testing.sglang``)."""

SERVICE_PORT_DEFAULT = 8080
"""The Service port LLMKube's operator uses when ``spec.endpoint.port`` is unset."""

_SPEC_HASH = "testbed.pulumi-lora.dev/spec-hash"
_TESTBED_ANNOTATIONS = (
    ANNOTATION_NETWORK,
    ANNOTATION_STARTUP_DELAY,
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_SERVER,
)
_IMAGE = "lmsysorg/sglang:testbed-emulator"


# --- ownership --------------------------------------------------------------------------------


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to ``owner`` (as every built-in controller writes it)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: dict[str, Any], kind: str | None = None) -> str | None:
    """UID of the object's controller owner (of ``kind`` if given), or ``None``."""
    for ref in obj.get("metadata", {}).get("ownerReferences", []) or []:
        if ref.get("controller") and (kind is None or ref.get("kind") == kind):
            return str(ref.get("uid"))
    return None


# --- the LLMKube operator -----------------------------------------------------------------------


def _container_port(spec: dict[str, Any]) -> int:
    endpoint = spec.get("endpoint") or {}
    return int(spec.get("containerPort") or endpoint.get("port") or DEFAULT_PORT)


def render_deployment(isvc: dict[str, Any]) -> dict[str, Any]:
    """The Deployment LLMKube's operator keeps for an InferenceService (pure).

    Labels, container ``sglang``, port ``http`` (containerPort, else endpoint.port, else 30000),
    readiness probe ``/health_generate`` and ``extraArgs`` as container arguments, as
    LLMKube's operator builds it (docs/protocol.md); the testbed's own knobs travel as pod
    annotations.
    """
    meta, spec = isvc["metadata"], isvc.get("spec", {})
    name = meta["name"]
    model = str(spec.get("modelRef", ""))
    runtime = str(spec.get("runtime", "llamacpp"))
    port = _container_port(spec)
    labels = {
        "app": name,
        SERVICE_LABEL: name,
        "inference.llmkube.dev/model": model,
        "inference.llmkube.dev/runtime": runtime,
    }
    given = meta.get("annotations", {}) or {}
    pod_annotations = {k: given[k] for k in _TESTBED_ANNOTATIONS if k in given}
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": _IMAGE,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": [
            "--model-path",
            model,
            "--host",
            "0.0.0.0",  # noqa: S104 - the manifest, not a socket here
            "--port",
            str(port),
            *[str(a) for a in spec.get("extraArgs", []) or []],
        ],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/health_generate", "port": "http"},
            # The testbed's own, stricter than LLMKube's 10 s and 3 failures (907ac8d8
            # runtime_sglang.go, which also declares a startup and a liveness probe).
            "periodSeconds": 1,
            "failureThreshold": 1,
            # LLMKube's (runtime_sglang.go): SGLang's /health_generate waits for its generation
            # in one-second steps, so it never answers within a kubelet's default second. The
            # kubelet waits it whatever the probe time scale (_probes.Probe.of).
            "timeoutSeconds": 5,
        },
    }
    if spec.get("extraVolumeMounts"):
        container["volumeMounts"] = spec["extraVolumeMounts"]
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 30}
    if spec.get("extraVolumes"):
        pod_spec["volumes"] = spec["extraVolumes"]
    deployment_spec: dict[str, Any] = {
        "replicas": int(spec.get("replicas", 1)),
        "selector": {"matchLabels": {"app": name, SERVICE_LABEL: name}},
        "template": {
            "metadata": {"labels": labels, "annotations": pod_annotations},
            "spec": pod_spec,
        },
    }
    if int((spec.get("resources") or {}).get("gpu") or 0) > 0:
        # LLMKube (deployment_builder.go, apiutil.GPUCount): a GPU InferenceService is replaced
        # all at once, since a new pod could not schedule while the old holds the GPUs; a CPU
        # one rolls with the Deployment's default (25 % surge, 25 % unavailable).
        deployment_spec["strategy"] = {"type": "Recreate"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": dict(labels),
            "annotations": {_SPEC_HASH: _digest(deployment_spec)},
            "ownerReferences": [owner_reference(isvc)],
        },
        "spec": deployment_spec,
    }


def service_name(isvc_name: str) -> str:
    """The Service LLMKube names after an InferenceService (``.`` becomes ``-``)."""
    return isvc_name.replace(".", "-")


def render_service(isvc: dict[str, Any]) -> dict[str, Any]:
    """The Service LLMKube's operator keeps for an InferenceService (pure).

    As ``service_builder.go`` (LLMKube 907ac8d8) builds it: named after the InferenceService with
    ``.`` as ``-``, selecting ``app`` and the service label, one port ``http`` whose ``port`` and
    numeric ``targetPort`` are ``spec.endpoint.port``, else 8080 for every runtime. So an sglang
    InferenceService without ``endpoint.port`` gets a Service on 8080 in front of a container on
    30000: LLMKube's own trap, played as it is.
    """
    meta, spec = isvc["metadata"], isvc.get("spec", {})
    name = meta["name"]
    endpoint = spec.get("endpoint") or {}
    port = int(endpoint.get("port") or SERVICE_PORT_DEFAULT)
    kinds = {"NodePort": "NodePort", "LoadBalancer": "LoadBalancer"}
    labels = {"app": name, SERVICE_LABEL: name}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(name),
            "namespace": meta["namespace"],
            "labels": dict(labels),
            "ownerReferences": [owner_reference(isvc)],
        },
        "spec": {
            "type": kinds.get(str(endpoint.get("type", "")), "ClusterIP"),
            "selector": labels,
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def service_is_current(live: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether a live Service already has the desired selector, ports and type (pure)."""
    have, want = live.get("spec", {}), desired["spec"]
    ports = [
        {k: p.get(k) for k in ("name", "port", "targetPort", "protocol")}
        for p in have.get("ports", []) or []
    ]
    return bool(
        have.get("selector") == want["selector"]
        and have.get("type", "ClusterIP") == want["type"]
        and ports == want["ports"]
    )


def deployment_is_current(live: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether the live Deployment was written from the same InferenceService spec."""
    annotations = live.get("metadata", {}).get("annotations", {}) or {}
    wanted: str = desired["metadata"]["annotations"][_SPEC_HASH]
    return annotations.get(_SPEC_HASH) == wanted


def isvc_status(
    isvc: dict[str, Any], deployment: dict[str, Any] | None, since: str
) -> dict[str, Any]:
    """The status LLMKube's operator writes, from its Deployment's status (pure).

    ``since`` is the lastTransitionTime of ``Available`` (the caller keeps it moving only when
    the status flips).
    """
    desired = int(isvc.get("spec", {}).get("replicas", 1))
    dstatus = (deployment or {}).get("status", {})
    ready = int(dstatus.get("readyReplicas", 0))
    if desired == 0 or ready >= desired:
        phase = "Ready" if deployment is not None else "Pending"
    elif ready == 0:
        phase = "Creating"
    else:
        phase = "Progressing"
    available = ready > 0
    name, namespace = isvc["metadata"]["name"], isvc["metadata"]["namespace"]
    service = name.replace(".", "-")
    port = int((isvc.get("spec", {}).get("endpoint") or {}).get("port") or 8080)
    path = (isvc.get("spec", {}).get("endpoint") or {}).get("path") or "/v1/chat/completions"
    return {
        "phase": phase,
        "readyReplicas": ready,
        "desiredReplicas": desired,
        "endpoint": f"http://{service}.{namespace}.svc.cluster.local:{port}{path}",
        "conditions": [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "NoReadyReplicas",
                "message": f"{ready}/{desired} replicas ready",
                "lastTransitionTime": since,
            }
        ],
    }


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def pod_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's ``Ready`` condition is True."""
    for cond in pod.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def isvc_path(namespace: str, name: str) -> str:
    """REST path of an InferenceService."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/inferenceservices/{name}"
