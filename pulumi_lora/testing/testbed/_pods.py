"""The InferenceService player: LLMKube's Deployment controller and a kubelet, for a testbed.

The testbed runs no kubelet, scheduler or controller-manager. This module plays all three for
InferenceServices it deploys:

- like the ReplicaSet controller it keeps ``spec.replicas`` Pods named ``{isvc}-{hash}-{xxxxx}``
  with LLMKube's labels, creating replacements for Pods deleted behind its back (it polls the
  apiserver, so ``kubectl scale`` and ``kubectl delete pod`` work too);
- like a kubelet it runs one emulator process per Pod (the SGLang emulator,
  ``python -m pulumi_lora.testing.emulator``), probes ``/health_generate`` every
  :data:`PROBE_INTERVAL` seconds and patches ``pods/NAME/status`` (``Ready`` is True only while the
  probe answers 200), and on a restart loses the process state, bumps ``restartCount`` and
  ``state.running.startedAt``;
- like LLMKube's operator it keeps the InferenceService's ``status`` (readyReplicas,
  desiredReplicas, phase, endpoint) current.

Threads: one prober per pod and one reconcile loop per testbed run beside the caller's thread.
Lock order is handle → pod; the isvc status has its own lock and takes no other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import secrets
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import httpx

from pulumi_lora._crd import GROUP, INFERENCE_SERVICE_PLURAL, VERSION
from pulumi_lora.testing.testbed._netns import PodNetwork, allocate_pod_network
from pulumi_lora.testing.testbed._process import ManagedProcess, free_port, tail
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest

__all__ = [
    "CONTAINER_NAME",
    "DEFAULT_EXTRA_ARGS",
    "EMULATOR_MODULE",
    "NETNS_PORT",
    "NODE_NAME",
    "PROBE_INTERVAL",
    "InferenceServiceHandle",
    "Network",
    "PodInfo",
    "PodNotFoundError",
    "PodPlayer",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

Network = Literal["loopback", "netns"]
"""How a pod is reached: ``loopback`` (127.0.0.1, own port) or ``netns`` (own IP, port 30000)."""

EMULATOR_MODULE = "pulumi_lora.testing.emulator"
"""The module every pod runs (``python -m``)."""

CONTAINER_NAME = "sglang"
"""Container name LLMKube gives the SGLang runtime."""

NODE_NAME = "testbed-node"
"""The one Node every pod is bound to."""

NETNS_PORT = 30000
"""SGLang's default port, used by every netns pod at its own IP."""

PROBE_INTERVAL = 0.1
"""Seconds between two readiness probes of one pod."""

RECONCILE_INTERVAL = 0.5
"""Seconds between two passes of the Deployment-controller loop."""

SERVICE_LABEL = "inference.llmkube.dev/service"
"""The label LLMKube puts on an InferenceService's pods (its value: the service's name)."""

DEFAULT_EXTRA_ARGS = ("--enable-lora", "--max-lora-rank", "64", "--lora-target-modules", "all")
"""The ``extraArgs`` a dynamic-LoRA SGLang InferenceService needs."""

_IMAGE = "lmsysorg/sglang:testbed-emulator"
_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes' SafeEncodeString uses
_STOP_TIMEOUT = 10.0
_PROBE_TIMEOUT = 1.0

_API_ERRORS = (httpx.HTTPError, ApiRequestError)


class PodNotFoundError(LookupError):
    """No pod of a testbed-managed InferenceService has that namespace and name."""


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _suffix(length: int) -> str:
    return "".join(secrets.choice(_HASH_ALPHABET) for _ in range(length))


def _container_id() -> str:
    return "containerd://" + secrets.token_hex(32)


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
    """True while the readiness probe answers 200."""
    restart_count: int
    """``containerStatuses[sglang].restartCount``."""
    started_at: str
    """``state.running.startedAt`` of the current container (RFC 3339)."""
    network: Network
    """``loopback`` or ``netns``."""
    pid: int | None
    """Process id of the emulator, while one runs."""


class _Pod:
    """Kubelet state of one pod: its process, its network and the status last published."""

    def __init__(
        self,
        handle: InferenceServiceHandle,
        name: str,
        ip: str,
        port: int,
        net: PodNetwork | None,
    ) -> None:
        self.handle = handle
        self.name = name
        self.uid = ""
        self.ip = ip
        self.port = port
        self.net = net
        self.lock = threading.RLock()
        self.ready = False
        self.restart_count = 0
        self.epoch = 0
        self.running = False
        self.created = _now()
        self.start_time = self.created
        self.started_at = self.created
        self.container_id = _container_id()
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.ready_since = self.created
        self.dirty = False
        self.gone = False
        self._stop = threading.Event()
        self._prober: threading.Thread | None = None
        log = handle.player.log_dir / f"{handle.namespace}_{name}.log"
        self.process = ManagedProcess(f"emulator {handle.namespace}/{name}", self._argv(), log)

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.handle.namespace}/pods/{self.name}"

    def _argv(self) -> list[str]:
        handle = self.handle
        argv = [] if self.net is None else self.net.exec_prefix()
        argv += [sys.executable, "-m", EMULATOR_MODULE, "--host", self.ip, "--port", str(self.port)]
        argv += ["--emulator-fs-root", str(handle.player.adapter_root), "--emulator-admin"]
        argv += [*handle.extra_args, *handle.emulator_args]
        if handle.startup_delay > 0:
            argv += ["--emulator-startup-delay", str(handle.startup_delay)]
        return argv

    def info(self) -> PodInfo:
        with self.lock:
            return PodInfo(
                namespace=self.handle.namespace,
                name=self.name,
                uid=self.uid,
                ip=self.ip,
                port=self.port,
                url=self.url,
                ready=self.ready,
                restart_count=self.restart_count,
                started_at=_rfc3339(self.started_at),
                network="loopback" if self.net is None else "netns",
                pid=self.process.pid if self.process.alive() else None,
            )

    # --- the Pod object --------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        """The Pod as LLMKube's Deployment would have created it (pure)."""
        handle = self.handle
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": handle.namespace,
                "labels": {**handle.labels, "pod-template-hash": handle.template_hash},
                "annotations": {
                    "testbed.pulumi-lora.dev/network": "loopback" if self.net is None else "netns"
                },
            },
            "spec": {
                "nodeName": NODE_NAME,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "containers": [
                    {
                        "name": CONTAINER_NAME,
                        "image": _IMAGE,
                        "command": ["python3", "-m", "sglang.launch_server"],
                        "args": [
                            "--model-path",
                            handle.model,
                            "--host",
                            "0.0.0.0",  # noqa: S104 - the pod manifest, not a socket here
                            "--port",
                            str(self.port),
                            *handle.extra_args,
                        ],
                        "ports": [{"name": "http", "containerPort": self.port, "protocol": "TCP"}],
                        "readinessProbe": {
                            "httpGet": {"path": "/health_generate", "port": "http"},
                            "periodSeconds": 1,
                            "failureThreshold": 1,
                        },
                    }
                ],
            },
        }

    def status_body(self) -> dict[str, Any]:
        """The kubelet's view of this pod as a ``pods/status`` merge patch (caller holds lock)."""
        ready = "True" if self.ready else "False"
        since = _rfc3339(self.ready_since)
        created = _rfc3339(self.created)
        status = {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": _rfc3339(self.start_time),
            "qosClass": "BestEffort",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": created},
                {"type": "Initialized", "status": "True", "lastTransitionTime": created},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": since},
                {"type": "Ready", "status": ready, "lastTransitionTime": since},
            ],
            "containerStatuses": [
                {
                    "name": CONTAINER_NAME,
                    "image": _IMAGE,
                    "imageID": f"{_IMAGE}@sha256:{'0' * 64}",
                    "containerID": self.container_id,
                    "ready": self.ready,
                    "started": "running" in self.state,
                    "restartCount": self.restart_count,
                    "state": self.state,
                    "lastState": self.last_state,
                }
            ],
        }
        return {"status": status}

    def publish(self) -> None:
        """Patch the pod's status now; on failure leave it dirty for the prober to retry."""
        with self.lock:
            if self.gone:
                return
            self.dirty = True
            try:
                self.handle.player.rest.merge_patch(f"{self.path}/status", self.status_body())
            except _API_ERRORS as exc:
                _log.debug("status of pod %s not published yet: %s", self.name, exc)
                return
            self.dirty = False

    def set_ready(self, ready: bool) -> bool:
        """Record a readiness result; returns whether it changed (caller holds lock)."""
        if ready == self.ready:
            return False
        self.ready = ready
        self.ready_since = _now()
        return True

    # --- the container ---------------------------------------------------------------------

    def start_container(self) -> None:
        """Start the emulator: a fresh process, state running, not ready until probed."""
        with self.lock:
            started = _now()
            # Kubernetes times have one-second resolution: keep startedAt moving on a restart.
            if started <= self.started_at and self.restart_count > 0:
                started = self.started_at + timedelta(seconds=1)
            self.started_at = started
            self.container_id = _container_id()
            self.process.start()
            self.running = True
            self.state = {"running": {"startedAt": _rfc3339(started)}}
            self.set_ready(False)
            self.epoch += 1

    def stop_container(self, *, crash: bool = False) -> None:
        """Stop the emulator (SIGTERM, or SIGKILL for a crash) and record it as terminated."""
        with self.lock:
            self.epoch += 1
            was_running = self.running
            self.running = False
            code = self.process.kill() if crash else self.process.stop(_STOP_TIMEOUT)
            if was_running:
                self._terminated(code)
            self.set_ready(False)

    def _terminated(self, code: int | None) -> None:
        exit_code = 137 if code is None or code < 0 else code
        started = self.state.get("running", {}).get("startedAt", _rfc3339(self.started_at))
        self.state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": started,
                "finishedAt": _rfc3339(_now()),
                "containerID": self.container_id,
            }
        }

    def restart(self) -> None:
        """Restart in place like a kubelet: state lost, restartCount+1, same IP and port."""
        with self.lock:
            self.stop_container()
            self.publish()
            self.last_state = self.state
            self.restart_count += 1
            self.start_container()
            self.publish()

    # --- the readiness prober --------------------------------------------------------------

    def start_prober(self) -> None:
        thread = threading.Thread(target=self._probe_loop, name=f"prober-{self.name}", daemon=True)
        self._prober = thread
        thread.start()

    def stop_prober(self) -> None:
        self._stop.set()
        thread = self._prober
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def _probe_loop(self) -> None:
        # One connection per probe, closed by us right after the answer (as a kubelet does):
        # a kept-alive connection would be closed by the server when the container stops, and
        # that leaves the server's port in TIME_WAIT, so the restarted server could not bind it.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(trust_env=False, timeout=_PROBE_TIMEOUT, limits=limits) as http:
            while not self._stop.wait(PROBE_INTERVAL):
                try:
                    self._probe_once(http)
                except Exception:  # a prober must survive anything; it is a test fixture
                    _log.exception("prober of pod %s failed", self.name)

    def _probe_once(self, http: httpx.Client) -> None:
        with self.lock:
            epoch, running = self.epoch, self.running
            if self.dirty:
                self.publish()
        if not running:
            return
        alive = self.process.alive()
        healthy = False
        if alive:
            try:
                healthy = http.get(f"{self.url}/health_generate").status_code == 200
            except httpx.HTTPError:
                healthy = False
        changed = False
        with self.lock:
            if epoch != self.epoch or self.gone:
                return  # restarted, killed or deleted while we probed: result is stale
            if not alive and self.running:
                self.running = False
                self._terminated(self.process.returncode())
                changed = True
                _log.info("emulator of pod %s exited (%s)", self.name, self.process.returncode())
            changed = self.set_ready(healthy) or changed
            if changed:
                _log.debug("pod %s ready=%s", self.name, self.ready)
                self.publish()
        if changed:
            self.handle.publish_status()


class InferenceServiceHandle:
    """One testbed-managed InferenceService: its CR, its pods and the processes behind them."""

    def __init__(
        self,
        player: PodPlayer,
        namespace: str,
        name: str,
        *,
        replicas: int,
        runtime: str,
        extra_args: Sequence[str],
        network: Network,
        startup_delay: float,
        emulator_args: Sequence[str],
        model: str,
    ) -> None:
        self.player = player
        self.namespace = namespace
        self.name = name
        self.replicas = replicas
        self.runtime = runtime
        self.extra_args = tuple(extra_args)
        self.network: Network = network
        self.startup_delay = startup_delay
        self.emulator_args = tuple(emulator_args)
        self.model = model
        self.template_hash = _suffix(10)
        self.labels = {
            "app": name,
            SERVICE_LABEL: name,
            "inference.llmkube.dev/model": model,
            "inference.llmkube.dev/runtime": runtime,
        }
        self.lock = threading.RLock()
        self._pods: dict[str, _Pod] = {}  # replaced, never mutated: readers need no lock
        self._changes = 0  # counts replacements of _pods (see version())
        self._status_lock = threading.Lock()
        self._published: dict[str, Any] | None = None
        self._available_since = _now()
        self._available = False
        self.closed = False

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

    def manifest(self) -> dict[str, Any]:
        """The InferenceService CR the testbed creates (pure)."""
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "modelRef": self.model,
                "runtime": self.runtime,
                "replicas": self.replicas,
                "containerPort": NETNS_PORT,
                "extraArgs": list(self.extra_args),
            },
        }

    # --- queries -----------------------------------------------------------------------------

    def pods(self) -> list[PodInfo]:
        """Snapshots of the current pods, oldest first."""
        return [pod.info() for pod in self._pods.values()]

    def pod(self, name: str) -> PodInfo:
        """The snapshot of one pod; :class:`PodNotFoundError` if it is not (or no longer) ours."""
        return self._pod(name).info()

    def _pod(self, name: str) -> _Pod:
        try:
            return self._pods[name]
        except KeyError:
            raise PodNotFoundError(f"no pod {self.namespace}/{name} in {self.name}") from None

    def has_pod(self, name: str) -> bool:
        """Whether ``name`` is one of this InferenceService's current pods."""
        return name in self._pods

    def ready_pods(self) -> list[PodInfo]:
        """Snapshots of the Ready pods."""
        return [info for info in self.pods() if info.ready]

    def wait_ready(self, timeout: float = 30.0) -> list[PodInfo]:
        """Wait until ``replicas`` pods exist and every one is Ready; return their snapshots.

        Raises :class:`TimeoutError` listing each pod's state and its emulator log's tail.
        """
        deadline = time.monotonic() + timeout
        while True:
            infos = self.pods()
            if len(infos) == self.replicas and all(info.ready for info in infos):
                return infos
            if time.monotonic() > deadline:
                details = "\n".join(
                    f"- {i.name} ready={i.ready} pid={i.pid} url={i.url}\n"
                    f"{tail(self._pods[i.name].process.log_path, 15)}"
                    for i in infos
                    if i.name in self._pods
                )
                raise TimeoutError(
                    f"{self.namespace}/{self.name}: {sum(i.ready for i in infos)}/{self.replicas}"
                    f" pods Ready after {timeout:.1f}s\n{details}"
                )
            time.sleep(0.05)

    # --- the Deployment controller -----------------------------------------------------------

    def _add_pod(self) -> _Pod:
        player = self.player
        name = f"{self.name}-{self.template_hash}-{_suffix(5)}"
        net: PodNetwork | None = None
        if self.network == "netns":
            net = allocate_pod_network(player.testbed_id, player.next_index())
            ip, port = net.pod_ip, NETNS_PORT
        else:
            ip, port = "127.0.0.1", free_port()
        pod = _Pod(self, name, ip, port, net)
        try:
            created = player.rest.create(
                f"/api/v1/namespaces/{self.namespace}/pods", pod.manifest()
            )
            pod.uid = created["metadata"]["uid"]
            pod.start_container()
            pod.publish()
        except BaseException:
            pod.gone = True
            pod.process.stop()
            if net is not None:
                net.teardown()
            raise
        self._pods = {**self._pods, name: pod}
        self._changes += 1
        pod.start_prober()
        _log.info("pod %s/%s started at %s (uid %s)", self.namespace, name, pod.url, pod.uid)
        return pod

    def _remove_pod(self, pod: _Pod, *, graceful: bool = True) -> None:
        """Delete like a kubelet: mark terminating, stop the process, then remove the object."""
        rest = self.player.rest
        if graceful:
            with contextlib.suppress(*_API_ERRORS):
                rest.delete(pod.path, grace_period=30)
        pod.stop_prober()
        pod.stop_container()
        pod.publish()
        with pod.lock:
            pod.gone = True
        with contextlib.suppress(*_API_ERRORS):
            rest.delete(pod.path, grace_period=0)
        if pod.net is not None:
            pod.net.teardown()
        self._pods = {k: v for k, v in self._pods.items() if k != pod.name}
        self._changes += 1
        _log.info("pod %s/%s removed", self.namespace, pod.name)

    def reconcile(self) -> None:
        """Bring the pods to ``replicas``: add new ones, remove the newest extra ones."""
        with self.lock:
            if self.closed:
                return
            while len(self._pods) < self.replicas:
                self._add_pod()
            while len(self._pods) > self.replicas:
                newest = list(self._pods.values())[-1]
                self._remove_pod(newest)
        self.publish_status()

    def version(self) -> tuple[int, int]:
        """Changes whenever this handle adds or removes a pod, or changes its replicas."""
        return self._changes, self.replicas

    def sync_from_cluster(
        self,
        isvc: dict[str, Any] | None = None,
        live: dict[str, dict[str, Any]] | None = None,
        listed_at: tuple[int, int] | None = None,
    ) -> None:
        """One pass of the controller loop: follow ``spec.replicas`` and deleted pods.

        ``isvc`` (the InferenceService as stored; ``None``: gone) and ``live`` (its pods' metadata
        by name) come from the controller loop's one cluster-wide listing per pass, taken when
        this handle's :meth:`version` was ``listed_at``; if the handle changed since, the listing
        is stale for it and the pass leaves it alone. Called with neither, this fetches them.
        """
        rest = self.player.rest
        with self.lock:
            if self.closed or (listed_at is not None and listed_at != self.version()):
                return
            if live is None:
                isvc = rest.get(self.path, allow=(404,))
                listing = rest.get(
                    f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={self.selector}"
                )
                live = {i["metadata"]["name"]: i["metadata"] for i in listing.get("items", [])}
            if isvc is None:
                return
            replicas = int(isvc.get("spec", {}).get("replicas", 1))
            for name, pod in list(self._pods.items()):
                meta = live.get(name)
                if meta is None or meta.get("uid") != pod.uid:
                    _log.info("pod %s/%s deleted behind the testbed's back", self.namespace, name)
                    self._remove_pod(pod, graceful=False)
                elif meta.get("deletionTimestamp"):
                    self._remove_pod(pod, graceful=False)
            if replicas != self.replicas:
                _log.info("%s/%s scaled to %d", self.namespace, self.name, replicas)
                self.replicas = replicas
            self.reconcile()
        self.publish_status()

    # --- operations ----------------------------------------------------------------------------

    def scale(self, replicas: int) -> None:
        """Patch ``spec.replicas`` and add or remove pods to match (returns before Ready)."""
        with self.lock:
            self.player.rest.merge_patch(self.path, {"spec": {"replicas": replicas}})
            self.replicas = replicas
            self.reconcile()

    def restart_pod(self, name: str) -> PodInfo:
        """Restart the pod's container in place (same name, UID, IP and port)."""
        with self.lock:
            pod = self._pod(name)
            pod.restart()
        self.publish_status()
        return pod.info()

    def replace_pod(self, name: str) -> PodInfo:
        """Delete the pod and create a replacement (new name, UID and process)."""
        with self.lock:
            old = self._pod(name)
            self._remove_pod(old)
            new = self._add_pod()
        self.publish_status()
        return new.info()

    def kill_pod_process(self, name: str) -> PodInfo:
        """Crash the pod's emulator (SIGKILL) without restarting it: it stays not Ready."""
        with self.lock:
            pod = self._pod(name)
            pod.stop_container(crash=True)
            pod.publish()
        self.publish_status()
        return pod.info()

    def delete(self) -> None:
        """Stop the pods and delete them and the InferenceService CR from the apiserver."""
        with self.lock:
            pods = list(self._pods.values())
            self.close()
            rest = self.player.rest
            for pod in pods:
                with contextlib.suppress(*_API_ERRORS):
                    rest.delete(pod.path, grace_period=0)
            self._pods = {}
            with contextlib.suppress(*_API_ERRORS):
                rest.delete(self.path)
        self.player.forget(self)
        _log.info("InferenceService %s/%s deleted", self.namespace, self.name)

    def close(self) -> None:
        """Stop every prober and process and remove the pod networks (objects stay)."""
        with self.lock:
            self.closed = True
            pods = list(self._pods.values())
        for pod in pods:
            pod.stop_prober()
        for pod in pods:
            with pod.lock:
                pod.gone = True
                pod.running = False
            pod.process.terminate()  # all at once: they shut down side by side
        for pod in pods:
            pod.process.stop(_STOP_TIMEOUT)
            if pod.net is not None:
                pod.net.teardown()

    # --- the operator's status ---------------------------------------------------------------

    def status_body(self) -> dict[str, Any]:
        """The InferenceService status LLMKube's operator would write (pure given the pods)."""
        pods = list(self._pods.values())
        ready = sum(1 for pod in pods if pod.ready)
        desired = self.replicas
        if desired > 0 and ready >= desired:
            phase = "Ready"
        elif ready == 0 and desired > 0:
            phase = "Creating"
        elif desired == 0:
            phase = "Ready"
        else:
            phase = "Progressing"
        available = ready > 0
        if available != self._available:
            self._available = available
            self._available_since = _now()
        service = self.name.replace(".", "-")
        return {
            "status": {
                "phase": phase,
                "readyReplicas": ready,
                "desiredReplicas": desired,
                "endpoint": f"http://{service}.{self.namespace}.svc.cluster.local:8080"
                "/v1/chat/completions",
                "conditions": [
                    {
                        "type": "Available",
                        "status": "True" if available else "False",
                        "reason": "MinimumReplicasAvailable" if available else "NoReadyReplicas",
                        "message": f"{ready}/{desired} replicas ready",
                        "lastTransitionTime": _rfc3339(self._available_since),
                    }
                ],
            }
        }

    def publish_status(self) -> None:
        """Patch the InferenceService status if it changed since the last successful patch."""
        with self._status_lock:
            if self.closed:
                return
            body = self.status_body()
            if body == self._published:
                return
            try:
                self.player.rest.merge_patch(f"{self.path}/status", body)
            except _API_ERRORS as exc:
                _log.debug("status of %s/%s not published yet: %s", self.namespace, self.name, exc)
                self._published = None
                return
            self._published = body


@dataclass
class PodPlayer:
    """Plays the Deployment controller and kubelet for every InferenceService of one testbed."""

    rest: KubeRest
    """REST access as the testbed's admin."""
    testbed_id: str
    """Short id naming this testbed's network namespaces and links."""
    log_dir: Path
    """Where each emulator's log goes (``<namespace>_<pod>.log``)."""
    adapter_root: Path
    """The emulator's ``--emulator-fs-root``: container paths resolve under it."""
    handles: dict[tuple[str, str], InferenceServiceHandle] = dataclasses.field(default_factory=dict)
    _counter: Callable[[], int] = dataclasses.field(
        default_factory=lambda: itertools.count().__next__
    )
    _lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    _loop: threading.Thread | None = None

    def next_index(self) -> int:
        """A testbed-wide pod counter (netns and link names)."""
        with self._lock:
            return self._counter()

    def deploy(
        self,
        namespace: str,
        name: str,
        *,
        replicas: int,
        runtime: str,
        extra_args: Sequence[str],
        network: Network,
        startup_delay: float,
        emulator_args: Sequence[str],
        model: str,
    ) -> InferenceServiceHandle:
        """Create the InferenceService CR and its pods (their processes start; not yet Ready)."""
        if network not in ("loopback", "netns"):
            raise ValueError(f"network must be 'loopback' or 'netns', not {network!r}")
        handle = InferenceServiceHandle(
            self,
            namespace,
            name,
            replicas=replicas,
            runtime=runtime,
            extra_args=extra_args,
            network=network,
            startup_delay=startup_delay,
            emulator_args=emulator_args,
            model=model,
        )
        with self._lock:
            if (namespace, name) in self.handles:
                raise ValueError(f"InferenceService {namespace}/{name} is already deployed")
            self.rest.create(handle.path.rsplit("/", 1)[0], handle.manifest())
            self.handles[(namespace, name)] = handle
        handle.reconcile()
        self._ensure_loop()
        return handle

    def handle_of_pod(self, namespace: str, pod: str) -> InferenceServiceHandle:
        """The handle owning a pod; :class:`PodNotFoundError` if none does."""
        for (ns, _), handle in list(self.handles.items()):
            if ns == namespace and handle.has_pod(pod):
                return handle
        raise PodNotFoundError(f"no testbed pod {namespace}/{pod}")

    def forget(self, handle: InferenceServiceHandle) -> None:
        """Stop tracking a deleted InferenceService."""
        with self._lock:
            if self.handles.get((handle.namespace, handle.name)) is handle:
                del self.handles[(handle.namespace, handle.name)]

    def handle(self, namespace: str, name: str) -> InferenceServiceHandle:
        """The handle of a deployed InferenceService; ``KeyError`` if not deployed here."""
        return self.handles[(namespace, name)]

    def release_namespace(self, namespace: str) -> None:
        """Delete every InferenceService deployed in ``namespace`` (pods, processes and CRs)."""
        with self._lock:
            doomed = [h for (ns, _), h in self.handles.items() if ns == namespace]
        for handle in doomed:
            handle.delete()

    def emulator_pids(self) -> list[int]:
        """Process ids of the emulators running now, over every InferenceService."""
        with self._lock:
            handles = list(self.handles.values())
        return [pod.pid for handle in handles for pod in handle.pods() if pod.pid is not None]

    def _ensure_loop(self) -> None:
        with self._lock:
            if self._loop is None:
                self._loop = threading.Thread(
                    target=self._controller_loop, name="testbed-controller", daemon=True
                )
                self._loop.start()

    def _controller_loop(self) -> None:
        """Every ``RECONCILE_INTERVAL``: two cluster-wide lists, then each handle from them.

        Two requests a pass whatever the number of InferenceServices (a session's tests deploy
        hundreds; a GET and a LIST per handle every half second loaded the apiserver more than
        the tests did).
        """
        while not self._stop.wait(RECONCILE_INTERVAL):
            handles = [(h, h.version()) for h in list(self.handles.values()) if not h.closed]
            if not handles:
                continue
            try:
                isvcs, pods = self._list_cluster()
            except _API_ERRORS as exc:
                _log.debug("controller pass skipped: %s", exc)
                continue
            for handle, version in handles:
                try:
                    handle.sync_from_cluster(
                        isvcs.get((handle.namespace, handle.name)),
                        pods.get((handle.namespace, handle.name), {}),
                        listed_at=version,
                    )
                except _API_ERRORS as exc:
                    _log.debug("controller pass for %s skipped: %s", handle.name, exc)
                except Exception:  # the loop must outlive one bad pass
                    _log.exception("controller pass for %s failed", handle.name)

    def _list_cluster(
        self,
    ) -> tuple[
        dict[tuple[str, str], dict[str, Any]],
        dict[tuple[str, str], dict[str, dict[str, Any]]],
    ]:
        """Every InferenceService, and every service-labelled pod's metadata, by (ns, name)."""
        listed = self.rest.get(f"/apis/{GROUP}/{VERSION}/{INFERENCE_SERVICE_PLURAL}")
        isvcs = {
            (i["metadata"]["namespace"], i["metadata"]["name"]): i for i in listed.get("items", [])
        }
        pods: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        for item in self.rest.get(f"/api/v1/pods?labelSelector={SERVICE_LABEL}").get("items", []):
            meta = item["metadata"]
            key = (meta["namespace"], meta.get("labels", {}).get(SERVICE_LABEL, ""))
            pods.setdefault(key, {})[meta["name"]] = meta
        return isvcs, pods

    def close(self) -> None:
        """Stop the controller loop, then every pod (processes and network namespaces)."""
        self._stop.set()
        loop = self._loop
        if loop is not None:
            loop.join(timeout=10.0)
        for handle in list(self.handles.values()):
            handle.close()
