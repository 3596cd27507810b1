"""Handles on the InferenceServices a testbed runs: a view of one service's pods with the
operations tests use (scale, restart, replace, kill, delete), and the manifest the testbed
creates for one."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2

from pulumi_lora._kube._crd import GROUP, INFERENCE_SERVICE_PLURAL, VERSION
from pulumi_lora.testing.testbed._kubelet import (
    Network,
    PodRuntime,
    Server,
)
from pulumi_lora.testing.testbed._process import tail
from pulumi_lora.testing.testbed._workloads import (
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_NETWORK,
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_SERVER,
    ANNOTATION_STARTUP_DELAY,
    DEFAULT_PORT,
    HASH_LABEL,
    SERVICE_LABEL,
    controller_uid,
    deployment_is_current,
    render_deployment,
)

if TYPE_CHECKING:
    from pulumi_lora.testing.testbed._pods import PodPlayer

__all__ = [
    "DEFAULT_EXTRA_ARGS",
    "NETNS_PORT",
    "InferenceServiceHandle",
    "PodInfo",
    "PodNotFoundError",
    "isvc_manifest",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

NETNS_PORT = DEFAULT_PORT
"""SGLang's default port, used by every netns pod at its own IP."""

DEFAULT_EXTRA_ARGS = ("--enable-lora", "--max-lora-rank", "64", "--lora-target-modules", "all")
"""The ``extraArgs`` a dynamic-LoRA SGLang InferenceService needs."""


class PodNotFoundError(LookupError):
    """No pod of a testbed-run InferenceService has that namespace and name."""


@dataclass(frozen=True)
class PodInfo:
    """A snapshot of one pod as the testbed's kubelet sees it."""

    namespace: str
    """Kubernetes namespace of the pod."""
    name: str
    """Pod name (``{isvc}-{hash}-{xxxxx}``)."""
    uid: str
    """Pod UID assigned by the apiserver (a replacement has a new one)."""
    ip: str
    """Pod IP (127.0.0.1 for loopback pods, 198.18.x.y for netns pods)."""
    port: int
    """Container port named ``http`` of container ``sglang``."""
    url: str
    """Base URL of the pod's emulator, e.g. ``http://198.18.0.2:30000``."""
    ready: bool
    """The pod's Ready: its readiness probe answers 200 and every readiness gate's condition is
    True (the kubelet's rule)."""
    restart_count: int
    """``containerStatuses[sglang].restartCount``."""
    started_at: str
    """``state.running.startedAt`` of the current container (RFC 3339)."""
    network: Network
    """``loopback`` or ``netns``."""
    pid: int | None
    """Process id of the emulator, while one runs."""
    containers_ready: bool = False
    """``ContainersReady``: the readiness probe answers 200 (whatever the gates say)."""


def _info(runtime: PodRuntime) -> PodInfo:
    with runtime.lock:
        return PodInfo(
            namespace=runtime.namespace,
            name=runtime.name,
            uid=runtime.uid,
            ip=runtime.ip,
            port=runtime.port,
            url=runtime.url,
            ready=runtime.pod_ready,
            restart_count=runtime.restart_count,
            started_at=runtime.started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            network=runtime.network,
            pid=runtime.pid(),
            containers_ready=runtime.ready,
        )


def isvc_manifest(
    namespace: str,
    name: str,
    *,
    replicas: int,
    runtime: str,
    extra_args: Sequence[str],
    model: str,
    network: Network,
    startup_delay: float,
    emulator_args: Sequence[str],
    probe_time_scale: float | None = None,
    endpoint_port: int | None = None,
    server: Server = "emulator",
    adapter_claim: str | None = None,
) -> dict[str, Any]:
    """The InferenceService the testbed's helper creates, knobs as annotations (pure).

    ``endpoint_port`` sets ``spec.endpoint.port`` (LLMKube's Service port); without it LLMKube
    fronts the pods with a Service on 8080, which the container (30000) does not serve.
    ``adapter_claim`` mounts that PersistentVolumeClaim read-only at :data:`ADAPTERS_PATH` in the
    SGLang container (``extraVolumes``, ``extraVolumeMounts``), as a platform team mounts the
    claim adapters are staged onto.
    """
    annotations: dict[str, str] = {ANNOTATION_NETWORK: network}
    if startup_delay > 0:
        annotations[ANNOTATION_STARTUP_DELAY] = str(startup_delay)
    if emulator_args:
        annotations[ANNOTATION_EMULATOR_ARGS] = json.dumps(list(emulator_args))
    if probe_time_scale is not None:
        annotations[ANNOTATION_PROBE_TIME_SCALE] = str(probe_time_scale)
    if server != "emulator":
        annotations[ANNOTATION_SERVER] = server
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "modelRef": model,
            "runtime": runtime,
            "replicas": replicas,
            "containerPort": NETNS_PORT,
            "extraArgs": list(extra_args),
            **({"endpoint": {"port": endpoint_port}} if endpoint_port else {}),
            **(adapter_volume(adapter_claim) if adapter_claim else {}),
        },
    }


ADAPTERS_PATH = "/adapters"
"""Where the SGLang container sees the adapter claim (and, without one, the adapter root)."""


def adapter_volume(claim: str) -> dict[str, Any]:
    """The ``extraVolumes`` and ``extraVolumeMounts`` that mount ``claim`` read-only (pure)."""
    return {
        "extraVolumes": [
            {"name": "adapters", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        ],
        "extraVolumeMounts": [{"name": "adapters", "mountPath": ADAPTERS_PATH, "readOnly": True}],
    }


def claim_manifests(namespace: str, claim: str, directory: str) -> list[dict[str, Any]]:
    """A ReadWriteMany PersistentVolume on ``directory`` (a ``hostPath``: the node is this
    machine), bound ahead to the PersistentVolumeClaim ``namespace/claim``, then that claim
    (pure). The binder controller binds them as it binds any pre-bound pair."""
    volume = f"{namespace}-{claim}"
    size = {"storage": "10Gi"}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {"testbed.pulumi-lora.dev/claim": claim}},
            "spec": {
                "capacity": size,
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": directory, "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": size},
            },
        },
    ]


class InferenceServiceHandle:
    """A view of one InferenceService and the pods the controllers run for it."""

    def __init__(self, player: PodPlayer, namespace: str, name: str) -> None:
        self.player = player
        self.namespace = namespace
        self.name = name
        self._replicas = 1

    @property
    def path(self) -> str:
        """REST path of the InferenceService."""
        return (
            f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/"
            f"{INFERENCE_SERVICE_PLURAL}/{self.name}"
        )

    @property
    def selector(self) -> str:
        """The label selector of this InferenceService's pods."""
        return f"{SERVICE_LABEL}={self.name}"

    @property
    def replicas(self) -> int:
        """``spec.replicas`` as last seen in the cluster."""
        isvc = self.player.caches.isvcs.get(self.namespace, self.name)
        if isvc is not None:
            self._replicas = int(isvc.get("spec", {}).get("replicas", 1))
        return self._replicas

    # --- queries -----------------------------------------------------------------------------

    def _runtimes(self) -> list[PodRuntime]:
        return self.player.runtimes_of(self.namespace, self.name)

    def pods(self) -> list[PodInfo]:
        """Snapshots of the current pods, oldest first."""
        return [_info(r) for r in self._runtimes()]

    def pod(self, name: str) -> PodInfo:
        """The snapshot of one pod; :class:`PodNotFoundError` if it is not (or no longer) ours."""
        return _info(self._runtime(name))

    def _runtime(self, name: str) -> PodRuntime:
        for runtime in self._runtimes():
            if runtime.name == name:
                return runtime
        raise PodNotFoundError(f"no pod {self.namespace}/{name} in {self.name}")

    def has_pod(self, name: str) -> bool:
        """Whether ``name`` is one of this InferenceService's current pods."""
        return any(r.name == name for r in self._runtimes())

    def ready_pods(self) -> list[PodInfo]:
        """Snapshots of the Ready pods."""
        return [info for info in self.pods() if info.ready]

    def served(
        self, *, every_pod: bool = False, api_key: str = "", patience: float = 30.0
    ) -> dict[str, dict[str, str]]:
        """What each pod serves, from its own ``/v1/models``: pod name → adapter name → path.

        The Ready pods (``every_pod``: every pod, Ready or not: a starved machine fails
        readiness probes, and a pod that is not Ready still holds what it loaded). A
        pod that does not answer is asked again until ``patience`` runs out, then named in the
        failure; leaving it out would read as "serves nothing" (CI once took a slow pod for an
        unloaded one). Only a pod that stopped being one of those meanwhile is left out.
        """
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

        def wanted() -> list[PodInfo]:
            return self.pods() if every_pod else self.ready_pods()

        found: dict[str, dict[str, str]] = {}
        with httpx2.Client(trust_env=False, timeout=10.0, headers=headers) as client:
            for pod in wanted():
                deadline = time.monotonic() + patience
                while True:
                    try:
                        answer = client.get(f"{pod.url}/v1/models")
                        answer.raise_for_status()
                        models = answer.json()["data"]
                        break
                    except httpx2.HTTPError as exc:
                        if pod.name not in {p.name for p in wanted()}:
                            models = None
                            break
                        if time.monotonic() >= deadline:
                            raise AssertionError(
                                f"pod {pod.name} ({pod.url}) did not answer /v1/models in "
                                f"{patience:g} s: {exc!r}"
                            ) from exc
                        time.sleep(0.1)
                if models is not None:
                    found[pod.name] = {m["id"]: m["root"] for m in models if m.get("parent")}
        return found

    def _settled(self, wanted: dict[str, Any] | None = None) -> bool:
        """``replicas`` pods, all of the current template, all Ready; with ``wanted`` (the
        Deployment the operator renders from the InferenceService as last read), only once the
        operator has written it (a Deployment it owns)."""
        if wanted is not None:
            live = self.player.caches.deployments.get(self.namespace, self.name)
            if (
                live is not None
                and controller_uid(live) == controller_uid(wanted)
                and not deployment_is_current(live, wanted)
            ):
                return False
        runtimes = self._runtimes()
        current = self.player.current_hash(self.namespace, self.name)
        return len(runtimes) == self.replicas and all(
            r.pod_ready and r.labels.get(HASH_LABEL) == current for r in runtimes
        )

    def wait_ready(self, timeout: float = 30.0) -> list[PodInfo]:
        """Wait until ``replicas`` pods of the current template exist and all are Ready, for the
        InferenceService as the apiserver has it now (read afresh: a change made elsewhere, with
        kubectl, counts at once, not only once the testbed's watch brings it).

        Raises :class:`TimeoutError` listing each pod's state and its emulator log's tail.
        """
        deadline = time.monotonic() + timeout
        found = self.player.user.get(self.path, allow=(404,))
        self.player.caches.isvcs.note(found)
        wanted = render_deployment(found) if found and found.get("kind") != "Status" else None
        while not self._settled(wanted):
            if time.monotonic() > deadline:
                runtimes = self._runtimes()
                details = "\n".join(
                    f"- {r.name} ready={r.pod_ready} pid={r.pid()} url={r.url}\n"
                    + (tail(r.process.log_path, 15) if r.process else str(r.state))
                    for r in runtimes
                )
                ready = sum(r.pod_ready for r in runtimes)
                raise TimeoutError(
                    f"{self.namespace}/{self.name}: {ready}/{self.replicas}"
                    f" pods Ready after {timeout:.1f}s\n{details}"
                )
            time.sleep(0.05)
        return self.pods()

    # --- operations --------------------------------------------------------------------------

    def scale(self, replicas: int) -> None:
        """Patch ``spec.replicas``; return once the controllers made (or removed) the pods."""
        written = self.player.user.merge_patch(self.path, {"spec": {"replicas": replicas}})
        self.player.caches.isvcs.note(written)
        self._replicas = replicas
        self.player.converge(
            lambda: len(self._runtimes()) == replicas, f"{self.name} at {replicas} pods"
        )

    def restart_pod(self, name: str) -> PodInfo:
        """Restart the pod's container in place (same name, UID, IP and port)."""
        runtime = self._runtime(name)
        runtime.restart()
        self.player.kick()
        return _info(runtime)

    def replace_pod(self, name: str) -> PodInfo:
        """Delete the pod; return its replacement (new name, UID and process; not yet Ready)."""
        old = self._runtime(name)
        before = {r.name for r in self._runtimes()}
        self.player.user.delete(old.path)
        self.player.converge(
            lambda: (
                old.uid not in self.player.manager.runtimes
                and bool({r.name for r in self._runtimes()} - before)
            ),
            f"a replacement for {name}",
        )
        new = next(r for r in self._runtimes() if r.name not in before)
        return _info(new)

    def kill_pod_process(self, name: str) -> PodInfo:
        """Crash the pod's container (SIGKILL) without restarting it: it stays not Ready."""
        runtime = self._runtime(name)
        runtime.stop_container(crash=True)
        runtime.publish()
        self.player.kick()
        return _info(runtime)

    def delete(self) -> None:
        """Delete the InferenceService; return once its pods and processes are gone."""
        isvc = self.player.caches.isvcs.get(self.namespace, self.name)
        self.player.user.delete(self.path)
        if isvc is not None:
            self.player.caches.isvcs.note_deleted(isvc)
        self.player.converge(
            lambda: not self._runtimes() and not self.player.pod_objects(self.namespace, self.name),
            f"{self.name}'s pods to stop",
        )
        _log.info("InferenceService %s/%s deleted", self.namespace, self.name)

    def close(self) -> None:
        """Stop this service's processes now (the objects stay): for a testbed going away."""
        for runtime in self._runtimes():
            runtime.shutdown()
