"""What the cluster's controllers would write, as pure functions of what they read.

The LLMKube operator's Deployment for an InferenceService, the Deployment controller's
ReplicaSets, revisions and status, the ReplicaSet controller's Pods and status: each is computed
here from plain dicts (the objects as the apiserver returns them), so the rules can be read and
tested apart from the threads and requests of ``_controllers.py``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pulumi_lora._crd import GROUP, VERSION

__all__ = [
    "ANNOTATION_DECLARED_PORT",
    "ANNOTATION_EMULATOR_ARGS",
    "ANNOTATION_NETWORK",
    "ANNOTATION_PROBE_TIME_SCALE",
    "ANNOTATION_STARTUP_DELAY",
    "CONTAINER_NAME",
    "DEFAULT_PORT",
    "HASH_LABEL",
    "NODE_NAME",
    "REVISION",
    "SERVICE_LABEL",
    "controller_uid",
    "deployment_status",
    "isvc_status",
    "owner_reference",
    "pod_for_replicaset",
    "render_deployment",
    "render_service",
    "replicaset_for",
    "replicaset_status",
    "rollout_scale",
    "service_is_current",
    "template_hash",
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

ANNOTATION_DECLARED_PORT = "testbed.pulumi-lora.dev/declared-port"
"""On a loopback pod: the ``http`` port its spec declared before the testbed gave it its own
(what a Service's numeric ``targetPort`` names; see ``_llmkube.ServiceProxy``)."""

SERVICE_PORT_DEFAULT = 8080
"""The Service port LLMKube's operator uses when ``spec.endpoint.port`` is unset."""

_SPEC_HASH = "testbed.pulumi-lora.dev/spec-hash"
_TESTBED_ANNOTATIONS = (
    ANNOTATION_NETWORK,
    ANNOTATION_STARTUP_DELAY,
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_PROBE_TIME_SCALE,
)
_IMAGE = "lmsysorg/sglang:testbed-emulator"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' SafeEncodeString alphabet


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
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }
    if spec.get("extraVolumeMounts"):
        container["volumeMounts"] = spec["extraVolumeMounts"]
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 30}
    if spec.get("extraVolumes"):
        pod_spec["volumes"] = spec["extraVolumes"]
    deployment_spec = {
        "replicas": int(spec.get("replicas", 1)),
        "selector": {"matchLabels": {"app": name, SERVICE_LABEL: name}},
        "template": {
            "metadata": {"labels": labels, "annotations": pod_annotations},
            "spec": pod_spec,
        },
    }
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


# --- the Deployment controller ------------------------------------------------------------------


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _safe_encode(text: str) -> str:
    return "".join(_SAFE[ord(ch) % len(_SAFE)] for ch in text)


def template_hash(template: dict[str, Any]) -> str:
    """``pod-template-hash``: FNV-32a of the template, encoded as Kubernetes encodes it."""
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return _safe_encode(str(value))[:10]


def replicaset_for(
    deployment: dict[str, Any], pod_hash: str, revision: int, replicas: int
) -> dict[str, Any]:
    """The ReplicaSet the Deployment controller creates for the current template (pure)."""
    meta, spec = deployment["metadata"], deployment["spec"]
    template = copy.deepcopy(spec["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pod_hash
    selector = copy.deepcopy(spec.get("selector", {}))
    selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
    desired = int(spec.get("replicas", 1))
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{pod_hash}",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "annotations": {
                REVISION: str(revision),
                "deployment.kubernetes.io/desired-replicas": str(desired),
                "deployment.kubernetes.io/max-replicas": str(desired + _max_surge(desired)),
            },
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    }


def _max_surge(replicas: int) -> int:
    return -(-replicas * 25 // 100)  # 25%, rounded up (the RollingUpdate default)


def _max_unavailable(replicas: int) -> int:
    return replicas * 25 // 100  # 25%, rounded down


def rollout_scale(
    desired: int, new_available: int, olds: Sequence[tuple[str, int]]
) -> dict[str, int]:
    """Replicas each old ReplicaSet keeps while the new one (already at ``desired``) comes up.

    ``olds`` is ``(name, spec.replicas)``, newest first. Old pods go as new ones become
    available, so the service never has fewer available pods than before the rollout.
    """
    left = max(0, desired - new_available)
    scaled = {}
    for name, replicas in olds:
        keep = min(replicas, left)
        scaled[name] = keep
        left -= keep
    return scaled


def _condition(
    previous: list[dict[str, Any]], kind: str, verdict: tuple[str, str, str], now: str
) -> dict[str, Any]:
    """A Deployment condition; its times move only when it changes (``verdict``: status,
    reason, message)."""
    status, reason, message = verdict
    old: dict[str, Any] = next((c for c in previous if c.get("type") == kind), {})
    changed = not old or (old.get("reason"), old.get("message")) != (reason, message)
    flipped = not old or old.get("status") != status
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": now if changed or flipped else old.get("lastUpdateTime", now),
        "lastTransitionTime": now if flipped else old.get("lastTransitionTime", now),
        "reason": reason,
        "message": message,
    }


def deployment_status(
    deployment: dict[str, Any],
    new_rs: dict[str, Any],
    all_rs: Sequence[dict[str, Any]],
    *,
    created_new: bool,
    now: str,
) -> dict[str, Any]:
    """The Deployment status kube-controller-manager writes (pure).

    What pulumi-kubernetes' await logic reads: ``observedGeneration`` equal to the generation,
    ``Available`` and ``Progressing`` (reason ``NewReplicaSetAvailable`` once the rollout is
    complete), the replica counts.
    """
    desired = int(deployment["spec"].get("replicas", 1))

    def total(field: str) -> int:
        return sum(int(rs.get("status", {}).get(field, 0)) for rs in all_rs)

    replicas, ready, available = (
        total("replicas"),
        total("readyReplicas"),
        total("availableReplicas"),
    )
    updated = int(new_rs.get("status", {}).get("replicas", 0))
    new_available = int(new_rs.get("status", {}).get("availableReplicas", 0))
    previous = deployment.get("status", {}).get("conditions", []) or []
    rs_name = new_rs["metadata"]["name"]
    if available >= desired - _max_unavailable(desired):
        avail = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        avail = (
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
    complete = updated == desired and replicas == desired and new_available >= desired
    if complete:
        progress = (
            "NewReplicaSetAvailable",
            f'ReplicaSet "{rs_name}" has successfully progressed.',
        )
    elif created_new:
        progress = ("NewReplicaSetCreated", f'Created new replica set "{rs_name}"')
    else:
        progress = ("ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.')
    status: dict[str, Any] = {
        "observedGeneration": int(deployment["metadata"].get("generation", 1)),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": max(0, desired - available),
        "conditions": [
            _condition(previous, "Available", avail, now),
            _condition(previous, "Progressing", ("True", *progress), now),
        ],
    }
    return {k: v for k, v in status.items() if v != 0 or k in ("observedGeneration",)}


# --- the ReplicaSet controller ------------------------------------------------------------------


def pod_for_replicaset(rs: dict[str, Any], name: str) -> dict[str, Any]:
    """A Pod the ReplicaSet controller creates from its template, bound to the testbed node."""
    template = copy.deepcopy(rs["spec"]["template"])
    meta = template.get("metadata", {})
    spec = template["spec"]
    spec["nodeName"] = NODE_NAME
    spec.setdefault("restartPolicy", "Always")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": rs["metadata"]["namespace"],
            "labels": meta.get("labels", {}) or {},
            "annotations": meta.get("annotations", {}) or {},
            "ownerReferences": [owner_reference(rs)],
        },
        "spec": spec,
    }


def pod_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's ``Ready`` condition is True."""
    for cond in pod.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def replicaset_status(rs: dict[str, Any], pods: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ReplicaSet status the ReplicaSet controller writes, from its active pods (pure)."""
    ready = sum(1 for pod in pods if pod_ready(pod))
    status = {
        "replicas": len(pods),
        "fullyLabeledReplicas": len(pods),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": int(rs["metadata"].get("generation", 1)),
    }
    return {k: v for k, v in status.items() if v != 0 or k in ("replicas", "observedGeneration")}


def isvc_path(namespace: str, name: str) -> str:
    """REST path of an InferenceService."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/inferenceservices/{name}"
