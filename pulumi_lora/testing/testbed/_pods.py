"""What the testbed plays of a cluster, and handles on the InferenceServices it runs.

The Deployment and ReplicaSet controllers and the garbage collector are the real
kube-controller-manager's (``_controller_manager.py``). :class:`PodPlayer` plays the rest for
every object in the cluster, whoever created it (kubectl, pulumi-kubernetes, a test), with the
real chain of objects in the apiserver:

- LLMKube's operator: a Deployment per InferenceService (ownerReference → the service), updated
  when its spec changes, its Service, and the service's ``status``;
- the scheduler's bind (``_scheduler.py``): every new pod to the testbed node;
- the kubelet (``_kubelet.py``): one process per Pod it can run, readiness from its probes.

It reads the cluster through watches (``_informer.py``) and acts on each change, so an idle
testbed sends no request; the operator's decisions are pure functions (``_workloads.py``).
Writes happen only when an object's desired state or status differs from the cache.
Per-service test knobs travel as annotations (:data:`ANNOTATION_NETWORK`, ...).
:class:`InferenceServiceHandle` is a view of one service's pods with the operations tests use.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi_lora._crd import GROUP, INFERENCE_SERVICE_PLURAL, VERSION
from pulumi_lora.testing.testbed import _incluster
from pulumi_lora.testing.testbed._containers import start_container
from pulumi_lora.testing.testbed._kubelet import (
    EMULATOR_MODULE,
    PROBE_INTERVAL,
    KubeletContext,
    Network,
    PodRuntime,
    resolve_env,
)
from pulumi_lora.testing.testbed._played import Caches, ClusterPlay
from pulumi_lora.testing.testbed._podnet import LoopbackRoutes
from pulumi_lora.testing.testbed._process import ManagedProcess, tail
from pulumi_lora.testing.testbed._rest import KubeRest
from pulumi_lora.testing.testbed._workloads import (
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_NETWORK,
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_STARTUP_DELAY,
    CONTAINER_NAME,
    DEFAULT_PORT,
    HASH_LABEL,
    NODE_NAME,
    REVISION,
    SERVICE_LABEL,
    controller_uid,
)

__all__ = [
    "ANNOTATION_EMULATOR_ARGS",
    "ANNOTATION_NETWORK",
    "ANNOTATION_PROBE_TIME_SCALE",
    "ANNOTATION_STARTUP_DELAY",
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
    "SandboxUnavailableError",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

NETNS_PORT = DEFAULT_PORT
"""SGLang's default port, used by every netns pod at its own IP."""

RECONCILE_INTERVAL = 0.5
"""Seconds between two controller passes when no watch event wakes them earlier."""

CONVERGE_TIMEOUT = 60.0
"""How long the synchronous operations (deploy, scale, replace, delete) wait for the cluster.

A deletion is the real garbage collector's, one owner at a time (InferenceService, Deployment,
ReplicaSet, pods): seconds, but on a loaded two-core machine running two testbeds it took over
30."""

DEFAULT_EXTRA_ARGS = ("--enable-lora", "--max-lora-rank", "64", "--lora-target-modules", "all")
"""The ``extraArgs`` a dynamic-LoRA SGLang InferenceService needs."""

_BATCH = 0.01


class PodNotFoundError(LookupError):
    """No pod of a testbed-run InferenceService has that namespace and name."""


class SandboxUnavailableError(RuntimeError):
    """The in-cluster sandbox a re-sync loop pod needs is not available (the pod stays Pending)."""


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


def _info(runtime: PodRuntime) -> PodInfo:
    with runtime.lock:
        return PodInfo(
            namespace=runtime.namespace,
            name=runtime.name,
            uid=runtime.uid,
            ip=runtime.ip,
            port=runtime.port,
            url=runtime.url,
            ready=runtime.ready,
            restart_count=runtime.restart_count,
            started_at=runtime.started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            network=runtime.network,
            pid=runtime.pid(),
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
) -> dict[str, Any]:
    """The InferenceService the testbed's helper creates, knobs as annotations (pure).

    ``endpoint_port`` sets ``spec.endpoint.port`` (LLMKube's Service port); without it LLMKube
    fronts the pods with a Service on 8080, which the container (30000) does not serve.
    """
    annotations: dict[str, str] = {ANNOTATION_NETWORK: network}
    if startup_delay > 0:
        annotations[ANNOTATION_STARTUP_DELAY] = str(startup_delay)
    if emulator_args:
        annotations[ANNOTATION_EMULATOR_ARGS] = json.dumps(list(emulator_args))
    if probe_time_scale is not None:
        annotations[ANNOTATION_PROBE_TIME_SCALE] = str(probe_time_scale)
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
        },
    }


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

    def _settled(self) -> bool:
        """``replicas`` pods, all of the current template, all Ready."""
        runtimes = self._runtimes()
        current = self.player.current_hash(self.namespace, self.name)
        return len(runtimes) == self.replicas and all(
            r.ready and r.labels.get(HASH_LABEL) == current for r in runtimes
        )

    def wait_ready(self, timeout: float = 30.0) -> list[PodInfo]:
        """Wait until ``replicas`` pods of the current template exist and all are Ready.

        Raises :class:`TimeoutError` listing each pod's state and its emulator log's tail.
        """
        deadline = time.monotonic() + timeout
        while not self._settled():
            if time.monotonic() > deadline:
                runtimes = self._runtimes()
                details = "\n".join(
                    f"- {r.name} ready={r.ready} pid={r.pid()} url={r.url}\n"
                    + (tail(r.process.log_path, 15) if r.process else str(r.state))
                    for r in runtimes
                )
                ready = sum(r.ready for r in runtimes)
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


@dataclass(frozen=True)
class Sandbox:
    """Where an in-cluster pod finds the apiserver (what ``_incluster`` needs)."""

    apiserver_port: int
    ca_pem: str
    containers: bool = False
    """Run the loop's pods as podman containers from their image (else as local processes)."""
    state_dir: Path | None = None
    """Where the kubelet keeps each pod's mounted files (ServiceAccount, emptyDir)."""


class PodPlayer:
    """Plays the operator, the scheduler's bind and the kubelet for every object of a testbed."""

    def __init__(
        self,
        rest: KubeRest,
        testbed_id: str,
        log_dir: Path,
        adapter_root: Path,
        *,
        default_network: Network = "loopback",
        sandbox: Sandbox | None = None,
        user_rest: KubeRest | None = None,
        operator_rest: KubeRest | None = None,
        scheduler_rest: KubeRest | None = None,
    ) -> None:
        """``rest`` acts as the kubelet, ``operator_rest`` as LLMKube's operator (and reads the
        caches), ``scheduler_rest`` binds pods (both default to ``rest``), ``user_rest``
        (default: ``rest``) as the test for the helper operations (create, scale, delete);
        nothing runs before :meth:`start`."""
        self.rest = rest
        self.user = user_rest or rest
        self.testbed_id = testbed_id
        self.log_dir = log_dir
        self.adapter_root = adapter_root
        self.default_network = default_network
        self.sandbox = sandbox
        self._counter = itertools.count().__next__
        self.lock = threading.RLock()  # held by a controller pass and by next_index
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.caches = Caches(operator_rest or rest, self._wake.set)
        self.routes = LoopbackRoutes()
        context = KubeletContext(
            rest=rest,
            log_dir=log_dir,
            adapter_root=adapter_root,
            testbed_id=testbed_id,
            default_network=default_network,
            next_index=self.next_index,
            note_pod=self.caches.pods.note,
            start_resync=self.start_resync,
            routes=self.routes,
        )
        self.manager = ClusterPlay(
            operator_rest or rest, self.caches, context, scheduler=scheduler_rest
        )
        self._handles: dict[tuple[str, str], InferenceServiceHandle] = {}
        self._loop: threading.Thread | None = None
        self.passes = 0

    def start(self) -> None:
        """Start the watches and the controller loop; wait for the first listing."""
        for informer in self.caches.all:
            informer.start()
        self._loop = threading.Thread(target=self._run, name="testbed-controllers", daemon=True)
        self._loop.start()
        deadline = time.monotonic() + CONVERGE_TIMEOUT
        while not self.caches.synced() and time.monotonic() < deadline:
            time.sleep(0.02)

    def next_index(self) -> int:
        """A testbed-wide pod counter (netns and link names)."""
        with self.lock:
            return self._counter()

    def kick(self) -> None:
        """Wake the controller loop now."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._wake.wait(RECONCILE_INTERVAL):
                self._stop.wait(_BATCH)  # events come in bursts: one pass for the burst
            if self._stop.is_set():
                return
            self._wake.clear()
            with self.lock:
                self.manager.run_pass()
                self.passes += 1

    def converge(self, done: Callable[[], bool], what: str) -> None:
        """Wake the controllers until ``done()``; :class:`TimeoutError` naming ``what``."""
        deadline = time.monotonic() + CONVERGE_TIMEOUT
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"testbed controllers: no {what} after {CONVERGE_TIMEOUT}s")
            self.kick()
            time.sleep(0.02)

    # --- the object chain --------------------------------------------------------------------

    def runtimes_of(self, namespace: str, name: str) -> list[PodRuntime]:
        """Running pods whose controller chain ends at InferenceService ``namespace/name``."""
        isvc = self.caches.isvcs.get(namespace, name)
        uid = None if isvc is None else isvc["metadata"]["uid"]
        owners = self._owner_index()
        found = []
        for runtime in list(self.manager.runtimes.values()):
            if runtime.namespace != namespace:
                continue
            if runtime.labels.get(SERVICE_LABEL) != name:
                continue
            if uid is None or self._root(runtime.pod, owners) == uid:
                found.append(runtime)
        return sorted(found, key=lambda r: r.order)

    def _owner_index(self) -> dict[str, dict[str, Any]]:
        index = {}
        for informer in (self.caches.replicasets, self.caches.deployments):
            for obj in informer.items():
                index[obj["metadata"]["uid"]] = obj
        return index

    @staticmethod
    def _root(obj: dict[str, Any], owners: dict[str, dict[str, Any]]) -> str | None:
        """The UID at the top of an object's controller chain (pod → RS → Deployment → ...)."""
        uid = controller_uid(obj)
        for _ in range(3):
            if uid is None or uid not in owners:
                return uid
            uid = controller_uid(owners[uid])
        return uid

    def current_hash(self, namespace: str, name: str) -> str | None:
        """pod-template-hash of the newest ReplicaSet of the Deployment named like the service,
        once the Deployment controller has seen the Deployment's latest spec (as cached)."""
        deployment = self.caches.deployments.get(namespace, name)
        if deployment is None:
            return None
        meta = deployment["metadata"]
        if deployment.get("status", {}).get("observedGeneration", 0) < meta.get("generation", 1):
            return None  # an edit the Deployment controller has not rolled out yet
        revision = (meta.get("annotations") or {}).get(REVISION)
        for rs in self.caches.replicasets.items():
            rs_meta = rs["metadata"]
            if (
                rs_meta.get("namespace") == namespace
                and controller_uid(rs) == meta["uid"]
                and (rs_meta.get("annotations") or {}).get(REVISION) == revision
            ):
                found: str | None = (rs_meta.get("labels") or {}).get(HASH_LABEL)
                return found
        return None

    # --- the helper's operations ---------------------------------------------------------------

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
        probe_time_scale: float | None = None,
        endpoint_port: int | None = None,
    ) -> InferenceServiceHandle:
        """Create the InferenceService; return once its pods exist and their processes started."""
        if network not in ("loopback", "netns"):
            raise ValueError(f"network must be 'loopback' or 'netns', not {network!r}")
        if self.caches.isvcs.get(namespace, name) is not None:
            raise ValueError(f"InferenceService {namespace}/{name} is already deployed")
        body = isvc_manifest(
            namespace,
            name,
            replicas=replicas,
            runtime=runtime,
            extra_args=extra_args,
            model=model,
            network=network,
            startup_delay=startup_delay,
            emulator_args=emulator_args,
            probe_time_scale=probe_time_scale,
            endpoint_port=endpoint_port,
        )
        collection = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{INFERENCE_SERVICE_PLURAL}"
        self.caches.isvcs.note(self.user.create(collection, body))
        handle = self.handle(namespace, name)
        self.converge(
            lambda: len([r for r in handle._runtimes() if r.launched.is_set()]) == replicas,
            f"{replicas} pods for {namespace}/{name}",
        )
        return handle

    def handle(self, namespace: str, name: str) -> InferenceServiceHandle:
        """The handle of an InferenceService in the cluster; ``KeyError`` if there is none."""
        if self.caches.isvcs.get(namespace, name) is None:
            raise KeyError((namespace, name))
        with self.lock:
            handle = self._handles.get((namespace, name))
            if handle is None:
                handle = self._handles[(namespace, name)] = InferenceServiceHandle(
                    self, namespace, name
                )
            return handle

    def runtime_of(self, namespace: str, pod: str) -> PodRuntime:
        """The kubelet's state of any pod on the node (raises :class:`PodNotFoundError`)."""
        for runtime in list(self.manager.runtimes.values()):
            if runtime.namespace == namespace and runtime.name == pod and not runtime.gone:
                return runtime
        raise PodNotFoundError(f"no pod {namespace}/{pod} runs on the testbed's node")

    def handle_of_pod(self, namespace: str, pod: str) -> InferenceServiceHandle:
        """The handle whose InferenceService runs a pod; :class:`PodNotFoundError` if none."""
        for runtime in list(self.manager.runtimes.values()):
            if runtime.namespace == namespace and runtime.name == pod and not runtime.gone:
                service = runtime.labels.get(SERVICE_LABEL)
                if service is not None:
                    with contextlib.suppress(KeyError):
                        return self.handle(namespace, service)
        raise PodNotFoundError(f"no testbed pod {namespace}/{pod}")

    def release_namespace(self, namespace: str) -> None:
        """Delete every InferenceService, Deployment and bare Pod in ``namespace``; wait for its
        pods (a bare pod, one no controller owns, would otherwise keep the wait to its timeout)."""
        for isvc in self.caches.isvcs.items():
            if isvc["metadata"]["namespace"] == namespace:
                self.handle(namespace, isvc["metadata"]["name"]).delete()
        for deployment in self.caches.deployments.items():
            meta = deployment["metadata"]
            if meta["namespace"] == namespace and controller_uid(deployment) is None:
                self.user.delete(f"/apis/apps/v1/namespaces/{namespace}/deployments/{meta['name']}")
        for runtime in list(self.manager.runtimes.values()):
            if runtime.namespace == namespace and controller_uid(runtime.pod) is None:
                self.user.delete(runtime.path)
        with contextlib.suppress(TimeoutError):
            self.converge(
                lambda: (
                    not any(r.namespace == namespace for r in self.manager.runtimes.values())
                    and not self.pod_objects(namespace)
                ),
                f"pods left in {namespace}",
            )

    def pod_objects(self, namespace: str, service: str | None = None) -> list[dict[str, Any]]:
        """Pod objects in ``namespace`` (of InferenceService ``service``), as cached: the ones the
        ReplicaSet controller made that the kubelet has not started yet count too."""
        return [
            pod
            for pod in self.caches.pods.items()
            if pod["metadata"].get("namespace") == namespace
            and (
                service is None
                or (pod["metadata"].get("labels") or {}).get(SERVICE_LABEL) == service
            )
        ]

    def emulator_pids(self) -> list[int]:
        """Process ids of the emulators running now, over every pod."""
        pids = (r.pid() for r in list(self.manager.runtimes.values()) if r.kind == "emulator")
        return [pid for pid in pids if pid is not None]

    # --- the re-sync loop's pods ---------------------------------------------------------------

    def start_resync(self, runtime: PodRuntime) -> ManagedProcess:
        """The kubelet's hook for a ``pulumi-lora resync`` container: a real container from the
        pod's image (``_containers.py``) when the testbed runs containers, else the container's
        command as a local process in the same sandbox (``_incluster.py``). Both get a token
        bound to the pod, the ServiceAccount files and the apiserver at
        ``KUBERNETES_SERVICE_HOST`` inside the pod's network namespace.
        """
        if self.sandbox is None or runtime.net is None:
            raise SandboxUnavailableError("a re-sync pod needs a network namespace (root)")
        pod = runtime.pod
        account = pod["spec"].get("serviceAccountName", "default")
        token = _incluster.request_token(
            self.rest, runtime.namespace, account, runtime.name, runtime.uid
        )
        env = resolve_env(runtime.container, pod, runtime.ip)
        log_path = self.log_dir / f"{runtime.namespace}_{runtime.name}.log"
        if self.sandbox.containers:
            state = self.sandbox.state_dir or self.log_dir
            return start_container(
                pod=pod,
                container=runtime.container,
                env=env,
                token=None if pod["spec"].get("automountServiceAccountToken") is False else token,
                ca_pem=self.sandbox.ca_pem,
                network=runtime.net,
                apiserver_port=self.sandbox.apiserver_port,
                state_dir=state / runtime.uid,
                log_path=log_path,
                routes=self.routes,
            )
        command = [str(a) for a in runtime.container.get("command", [])]
        argv = [*command, *[str(a) for a in runtime.container.get("args", []) or []]]
        process: ManagedProcess = _incluster.run_in_cluster_pod(
            name=runtime.name,
            argv=argv,
            env=env,
            namespace=runtime.namespace,
            service_account_token=token,
            ca_pem=self.sandbox.ca_pem.encode("ascii"),
            apiserver_port=self.sandbox.apiserver_port,
            network=runtime.net,
            log_path=log_path,
            routes=self.routes,
        )
        return process

    # --- cost and teardown ---------------------------------------------------------------------

    def requests(self) -> dict[str, int]:
        """Requests sent so far: ``reads`` (LISTs and watches) and ``writes``."""
        return {"reads": self.caches.requests(), "writes": self.manager.writes}

    def close(self) -> None:
        """Stop the loop and the watches, then every pod (processes and network namespaces)."""
        self._stop.set()
        self._wake.set()
        loop = self._loop
        if loop is not None:
            loop.join(timeout=10.0)
        for informer in self.caches.all:
            informer.stop()
        with self.lock:
            self.manager.shutdown()
        self.routes.close()
