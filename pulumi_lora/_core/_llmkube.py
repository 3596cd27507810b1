"""LLMKube's vocabulary, pure: the InferenceService and pod facts this project reads, its labels.

No I/O. The provider, the loop and the operator commands all read pods through it, so they agree
on what "Ready" means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pulumi_lora._core._ownership import ControllerRef, by_uid, controller_chain, controller_of
from pulumi_lora._models import API_VERSION, KIND

__all__ = [
    "DEFAULT_SERVICE_PORT",
    "DEFAULT_SGLANG_PORT",
    "HTTP_PORT_NAME",
    "SERVICE_LABEL",
    "SGLANG_CONTAINER",
    "PodEndpoint",
    "PodListing",
    "Target",
    "adapter_manifest",
    "all_ready",
    "container_port",
    "describe_pod_state",
    "names",
    "pod_from_object",
    "service_port",
    "split_pods",
    "target_from_object",
]

#: Label LLMKube puts on every pod of an InferenceService (and on its Deployment and, through the
#: pod template, its ReplicaSets); the provider and the loop select pods by it.
SERVICE_LABEL = "inference.llmkube.dev/service"
#: pulumi-lora's readiness gate: the pod condition that turns True once the pod serves every
#: adapter declared for its InferenceService (``_core._gate``; added by ``_kube._gate_policy``).
GATE_CONDITION = "pulumi-lora.dev/adapters-loaded"
#: The SGLang container and its port, as LLMKube's operator names them.
SGLANG_CONTAINER = "sglang"
HTTP_PORT_NAME = "http"
DEFAULT_SGLANG_PORT = 30000
#: The Service port LLMKube sets when ``spec.endpoint.port`` is unset (its service_builder.go;
#: docs/protocol.md).
DEFAULT_SERVICE_PORT = 8080


# --- the target ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The InferenceService facts this project reads."""

    namespace: str
    name: str
    runtime: str
    replicas: int
    extra_args: tuple[str, ...] = ()
    sglang_adapters: tuple[Mapping[str, str], ...] = ()
    uid: str = ""
    volumes: tuple[Mapping[str, Any], ...] = ()  # spec.extraVolumes
    volume_mounts: tuple[Mapping[str, Any], ...] = ()  # spec.extraVolumeMounts (sglang's)
    data_parallel_size: int | None = None  # spec.sglangConfig.dataParallelSize (renders --dp)


def target_from_object(obj: Mapping[str, Any]) -> Target:
    """Pure: read a Target out of an InferenceService object."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    sglang = spec.get("sglangConfig") or {}
    return Target(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        runtime=str(spec.get("runtime") or "llamacpp"),
        replicas=int(spec.get("replicas", 1)),
        extra_args=tuple(str(a) for a in spec.get("extraArgs") or ()),
        sglang_adapters=tuple(sglang.get("loraAdapters") or ()),
        uid=str(meta.get("uid", "")),
        volumes=tuple(spec.get("extraVolumes") or ()),
        volume_mounts=tuple(spec.get("extraVolumeMounts") or ()),
        data_parallel_size=_int(sglang.get("dataParallelSize")),
    )


def _int(value: object) -> int | None:
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


def container_port(spec: Mapping[str, Any]) -> int:
    """Pure: the sglang container port LLMKube sets (containerPort, endpoint.port, or 30000)."""
    endpoint = spec.get("endpoint") or {}
    return int(spec.get("containerPort") or endpoint.get("port") or DEFAULT_SGLANG_PORT)


def service_port(spec: Mapping[str, Any]) -> int:
    """Pure: the Service port LLMKube sets (endpoint.port, else 8080)."""
    endpoint = spec.get("endpoint") or {}
    return int(endpoint.get("port") or DEFAULT_SERVICE_PORT)


# --- pods --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodEndpoint:
    """One pod of the target: identity, readiness, where its SGLang listens."""

    name: str
    namespace: str
    uid: str
    ready: bool
    ip: str | None
    port: int
    state: str
    restart_count: int = 0
    started_at: str | None = None
    controller: ControllerRef | None = None
    service: str = ""  # its SERVICE_LABEL: the InferenceService it is labelled as ("" if none)
    #: Whether the pod carries pulumi-lora's readiness gate (``GATE_CONDITION``): its ``ready``
    #: is then ``ContainersReady`` (its Ready waits for its adapters, which are loaded first).
    gated: bool = False
    container_id: str = ""  # the sglang container's id (a restart makes a new one)
    gate: Mapping[str, Any] | None = None  # the gate's condition as the pod has it, if any
    #: The pod object's resourceVersion (a gate's True is written on this version only).
    resource_version: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)`` of the pod."""
        return (self.namespace, self.name)

    @property
    def target(self) -> tuple[str, str]:
        """``(namespace, name)`` of the InferenceService it is labelled as (``SERVICE_LABEL``)."""
        return (self.namespace, self.service)

    @property
    def serving(self) -> bool:
        """Ready and addressable: the only pods anyone talks to."""
        return self.ready and bool(self.ip)

    @property
    def url(self) -> str:
        """Base URL of the pod's SGLang (pod IP and the container port named ``http``)."""
        host = f"[{self.ip}]" if self.ip and ":" in self.ip else self.ip
        return f"http://{host}:{self.port}"


def pod_from_object(obj: Mapping[str, Any]) -> PodEndpoint:
    """Pure: a PodEndpoint from a Pod object (container ``sglang``, port ``http``)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers = spec.get("containers") or []
    sglang = next(
        (c for c in containers if c.get("name") == SGLANG_CONTAINER),
        containers[0] if containers else {},
    )
    port = next(
        (
            int(p["containerPort"])
            for p in sglang.get("ports") or []
            if p.get("name") == HTTP_PORT_NAME
        ),
        DEFAULT_SGLANG_PORT,
    )
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    gates = {g.get("conditionType") for g in spec.get("readinessGates") or []}
    gated = GATE_CONDITION in gates
    # A gated pod is Ready only once its adapters are loaded: loads go to its ready containers.
    kind = "ContainersReady" if gated else "Ready"
    ready = (conditions.get(kind) or {}).get("status") == "True"
    ready = ready and not meta.get("deletionTimestamp")
    container_status: Mapping[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == SGLANG_CONTAINER), {}
    )
    running = (container_status.get("state") or {}).get("running") or {}
    return PodEndpoint(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        ready=ready,
        ip=status.get("podIP"),
        port=port,
        state=describe_pod_state(status, bool(meta.get("deletionTimestamp"))),
        restart_count=int(container_status.get("restartCount", 0)),
        started_at=running.get("startedAt"),
        controller=controller_of(obj),
        service=str((meta.get("labels") or {}).get(SERVICE_LABEL) or ""),
        gated=gated,
        container_id=str(container_status.get("containerID") or ""),
        gate=conditions.get(GATE_CONDITION),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def describe_pod_state(status: Mapping[str, Any], terminating: bool) -> str:
    """Pure: ``Running, Ready`` / ``Pending, not Ready (ContainersNotReady)`` for messages."""
    phase = str(status.get("phase") or "Unknown")
    if terminating:
        return f"{phase}, terminating"
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready and ready.get("status") == "True":
        return f"{phase}, Ready"
    reason = (ready or {}).get("reason")
    return f"{phase}, not Ready" + (f" ({reason})" if reason else "")


@dataclass(frozen=True)
class PodListing:
    """The pods of a target: those its controller chain vouches for, and the labelled others
    (name → why not, see ``_core._ownership.controller_chain``), which get no request at all."""

    pods: tuple[PodEndpoint, ...] = ()
    untrusted: Mapping[str, str] = field(default_factory=dict)


def split_pods(
    target: Target,
    pods: Sequence[PodEndpoint],
    replicasets: Sequence[Mapping[str, Any]],
    deployments: Sequence[Mapping[str, Any]],
) -> PodListing:
    """Pure: ``pods`` split into those the target controls and the others, with why."""
    rs_by_uid, dep_by_uid = by_uid(replicasets), by_uid(deployments)
    trusted, untrusted = [], {}
    for pod in pods:
        why = controller_chain(pod.namespace, pod.controller, rs_by_uid, dep_by_uid, target.uid)
        if why is None:
            trusted.append(pod)
        else:
            untrusted[pod.name] = why
    return PodListing(tuple(trusted), untrusted)


def all_ready(target: Target, pods: Sequence[PodEndpoint]) -> bool:
    """Pure: every desired replica is Ready, and no pod is not."""
    ready = sum(1 for p in pods if p.ready)
    return ready >= max(target.replicas, 1) and ready == len(pods)


# --- the CR ------------------------------------------------------------------------------------


def adapter_manifest(
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    annotations: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
    *,
    finalizers: Sequence[str] = (),
) -> dict[str, Any]:
    """Pure: the CR as this project applies it (spec, its own annotations and, while it deletes,
    its own finalizer; nothing else)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": dict(annotations),
    }
    if labels:
        metadata["labels"] = dict(labels)
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": dict(spec)}


def names(pods: Sequence[PodEndpoint]) -> list[str]:
    """Pod names, for messages."""
    return [p.name for p in pods]
