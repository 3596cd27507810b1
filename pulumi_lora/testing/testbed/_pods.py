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
:class:`InferenceServiceHandle` (``_handles.py``) is a view of one service's pods with the
operations tests use.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pulumi_lora._kube._crd import GROUP, INFERENCE_SERVICE_PLURAL, VERSION
from pulumi_lora.testing.testbed._handles import (
    InferenceServiceHandle,
    PodNotFoundError,
    claim_manifests,
    isvc_manifest,
)
from pulumi_lora.testing.testbed._kubelet import (
    EMULATOR_MODULE,
    KubeletContext,
    Network,
    PodRuntime,
    Server,
)
from pulumi_lora.testing.testbed._played import Caches, ClusterPlay
from pulumi_lora.testing.testbed._podnet import LoopbackRoutes
from pulumi_lora.testing.testbed._probes import PROBE_INTERVAL
from pulumi_lora.testing.testbed._rest import KubeRest
from pulumi_lora.testing.testbed._sandbox import KubeletHooks, Sandbox
from pulumi_lora.testing.testbed._workloads import (
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_NETWORK,
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_STARTUP_DELAY,
    CONTAINER_NAME,
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
    "EMULATOR_MODULE",
    "NODE_NAME",
    "PROBE_INTERVAL",
    "Network",
    "PodPlayer",
    "Server",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

RECONCILE_INTERVAL = 0.5
"""Seconds between two controller passes when no watch event wakes them earlier."""

CONVERGE_TIMEOUT = 60.0
"""How long the synchronous operations (deploy, scale, replace, delete) wait for the cluster.

A deletion is the real garbage collector's, one owner at a time (InferenceService, Deployment,
ReplicaSet, pods): seconds, but on a loaded two-core machine running two testbeds it took over
30."""

_BATCH = 0.01


class PodPlayer(KubeletHooks):
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
            claim_mounts=self.claim_mounts,
            termination_message=self.termination_message,
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
        server: Server = "emulator",
        adapter_claim: str | None = None,
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
            server=server,
            adapter_claim=adapter_claim,
        )
        if adapter_claim is not None:
            self.make_claim(namespace, adapter_claim)
        collection = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{INFERENCE_SERVICE_PLURAL}"
        self.caches.isvcs.note(self.user.create(collection, body))
        handle = self.handle(namespace, name)
        self.converge(
            lambda: len([r for r in handle._runtimes() if r.launched.is_set()]) == replicas,
            f"{replicas} pods for {namespace}/{name}",
        )
        return handle

    def make_claim(self, namespace: str, claim: str) -> Path:
        """The ReadWriteMany claim ``namespace/claim`` on a directory of this testbed (made once,
        bound before it returns); its directory, writable by any uid as an NFS export can be."""
        directory = self.volume_root / f"{namespace}-{claim}"
        found = self.user.get(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}", allow=(404,)
        )
        if found is None:
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o1777)
            volume, pvc = claim_manifests(namespace, claim, str(directory))
            self.user.create("/api/v1/persistentvolumes", volume)
            self.user.create(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", pvc)
        self.converge(
            lambda: self._claim_phase(namespace, claim) == "Bound",
            f"PersistentVolumeClaim {namespace}/{claim} bound",
        )
        return directory

    def _claim_phase(self, namespace: str, claim: str) -> str | None:
        found = self.user.get(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}", allow=(404,)
        )
        return None if found is None else (found.get("status") or {}).get("phase")

    @property
    def volume_root(self) -> Path:
        """Where this testbed's PersistentVolumes keep their files (beside the adapter root)."""
        return self.adapter_root.parent / "volumes"

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
