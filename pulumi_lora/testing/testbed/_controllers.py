"""One pass of the cluster's controllers over the informers' caches, and the writes it makes.

In order: LLMKube's operator (a Deployment per InferenceService, its status), the Deployment
controller (ReplicaSets, revisions, rollouts, status), the ReplicaSet controller (Pods, status),
the garbage collector's background cascade (objects whose controller owner is gone; the
foreground and orphan finalizers, for every kind, are ``_collector.py``'s) and the kubelet
(containers of the Pods bound to the testbed node). Decisions come from ``_workloads.py``; this
module only reads the caches and sends what differs, so an idle cluster costs no request.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import httpx

from pulumi_lora._crd import GROUP, INFERENCE_SERVICE_PLURAL, VERSION
from pulumi_lora.testing.testbed._informer import Informer, object_key
from pulumi_lora.testing.testbed._kubelet import KubeletContext, PodRuntime, delete_now
from pulumi_lora.testing.testbed._process import free_port
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest
from pulumi_lora.testing.testbed._workloads import (
    ANNOTATION_DECLARED_PORT,
    ANNOTATION_NETWORK,
    HASH_LABEL,
    NODE_NAME,
    REVISION,
    controller_uid,
    deployment_is_current,
    deployment_status,
    isvc_status,
    pod_for_replicaset,
    pod_ready,
    render_deployment,
    render_service,
    replicaset_for,
    replicaset_status,
    rollout_scale,
    service_is_current,
    template_hash,
)

__all__ = ["Caches", "ControllerManager"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

_API_ERRORS = (httpx.HTTPError, ApiRequestError)
_SAFE = "bcdfghjklmnpqrstvwxz2456789"

ISVC_COLLECTION = f"/apis/{GROUP}/{VERSION}/{INFERENCE_SERVICE_PLURAL}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch turning status ``old`` into ``new`` (fields gone are nulled)."""
    return {"status": {**dict.fromkeys((k for k in old if k not in new), None), **new}}


def _terminating(obj: dict[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


class Caches:
    """The informers the controllers read: InferenceServices, Deployments, ReplicaSets, Pods and
    Services."""

    def __init__(self, rest: KubeRest, on_change: Callable[[], None]) -> None:
        self.isvcs = Informer(rest, ISVC_COLLECTION, on_change)
        self.deployments = Informer(rest, "/apis/apps/v1/deployments", on_change)
        self.replicasets = Informer(rest, "/apis/apps/v1/replicasets", on_change)
        self.pods = Informer(rest, "/api/v1/pods", on_change)
        self.services = Informer(rest, "/api/v1/services", on_change)
        self.all = (self.isvcs, self.deployments, self.replicasets, self.pods, self.services)

    def synced(self) -> bool:
        """Whether every informer has listed at least once."""
        return all(i.synced.is_set() for i in self.all)

    def requests(self) -> int:
        """LIST and watch requests sent so far by every informer."""
        return sum(i.requests for i in self.all)


class ControllerManager:
    """The controllers and kubelet of one testbed, as one reconcile pass over the caches."""

    def __init__(self, rest: KubeRest, caches: Caches, kubelet: KubeletContext) -> None:
        self.rest = rest
        self.caches = caches
        self.kubelet = kubelet
        self.runtimes: dict[str, PodRuntime] = {}  # by pod UID; replaced, never mutated
        self._ports: set[int] = set()
        self.writes = 0

    # --- one pass --------------------------------------------------------------------------

    def run_pass(self) -> None:
        """Every controller once, each object on its own (one failure does not stop the rest)."""
        if not self.caches.synced():
            return
        for step in (
            self._operator,
            self._deployments,
            self._replicasets,
            self._collect,
            self._kubelet,
        ):
            try:
                step()
            except _API_ERRORS as exc:
                _log.debug("controller step %s deferred: %s", step.__name__, exc)
            except Exception:  # the loop must outlive one bad pass
                _log.exception("controller step %s failed", step.__name__)

    def _write(self, informer: Informer, send: Callable[[], Any]) -> Any:
        self.writes += 1
        written = send()
        informer.note(written)
        return written

    # --- LLMKube's operator ----------------------------------------------------------------

    def _operator(self) -> None:
        for isvc in self.caches.isvcs.items():
            if _terminating(isvc):
                continue
            with _deferred(isvc):
                self._operate(isvc)

    def _operate(self, isvc: dict[str, Any]) -> None:
        namespace, name = object_key(isvc)
        desired = render_deployment(isvc)
        live = self.caches.deployments.get(namespace, name)
        base = f"/apis/apps/v1/namespaces/{namespace}/deployments"
        if live is None:
            live = self._write(self.caches.deployments, lambda: self.rest.create(base, desired))
        elif controller_uid(live) == isvc["metadata"]["uid"] and not deployment_is_current(
            live, desired
        ):
            body = {**desired, "metadata": {**live["metadata"], **desired["metadata"]}}
            body["metadata"]["annotations"] = {
                **(live["metadata"].get("annotations") or {}),
                **desired["metadata"]["annotations"],
            }
            live = self._write(
                self.caches.deployments, lambda: self.rest.put(f"{base}/{name}", body)
            )
        self._serve(isvc)
        old = isvc.get("status", {}) or {}
        previous: dict[str, Any] = next(
            (c for c in old.get("conditions", []) if c.get("type") == "Available"), {}
        )
        owned = live if controller_uid(live) == isvc["metadata"]["uid"] else None
        status = isvc_status(isvc, owned, previous.get("lastTransitionTime", _now()))
        if previous.get("status") != status["conditions"][0]["status"]:
            status["conditions"][0]["lastTransitionTime"] = _now()
        if status != old:
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/inferenceservices/{name}"
            self._write(
                self.caches.isvcs,
                lambda: self.rest.merge_patch(f"{path}/status", _status_patch(old, status)),
            )

    def _serve(self, isvc: dict[str, Any]) -> None:
        """The Service LLMKube's operator creates in front of the pods (``render_service``)."""
        desired = render_service(isvc)
        namespace, name = object_key(desired)
        live = self.caches.services.get(namespace, name)
        base = f"/api/v1/namespaces/{namespace}/services"
        if live is None:
            self._write(self.caches.services, lambda: self.rest.create(base, desired))
        elif controller_uid(live) == isvc["metadata"]["uid"] and not service_is_current(
            live, desired
        ):
            body = {**live, "spec": {**live["spec"], **desired["spec"]}}
            self._write(self.caches.services, lambda: self.rest.put(f"{base}/{name}", body))

    # --- the Deployment controller ---------------------------------------------------------

    def _owned(self, informer: Informer, owner: dict[str, Any]) -> list[dict[str, Any]]:
        uid = owner["metadata"]["uid"]
        namespace = owner["metadata"]["namespace"]
        return [
            o
            for o in informer.items()
            if o["metadata"].get("namespace") == namespace and controller_uid(o) == uid
        ]

    def _deployments(self) -> None:
        for deployment in self.caches.deployments.items():
            if _terminating(deployment):
                continue
            with _deferred(deployment):
                self._roll(deployment)

    def _roll(self, deployment: dict[str, Any]) -> None:
        namespace, name = object_key(deployment)
        desired = int(deployment["spec"].get("replicas", 1))
        pod_hash = template_hash(deployment["spec"]["template"])
        owned = self._owned(self.caches.replicasets, deployment)
        revisions = [
            int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")) for rs in owned
        ]
        new_rs = next(
            (rs for rs in owned if rs["metadata"]["labels"].get(HASH_LABEL) == pod_hash), None
        )
        base = f"/apis/apps/v1/namespaces/{namespace}/replicasets"
        created = False
        if new_rs is None:
            body = replicaset_for(deployment, pod_hash, max(revisions, default=0) + 1, desired)
            new_rs = self._write(self.caches.replicasets, lambda: self.rest.create(base, body))
            created = True
            _log.info(
                "deployment %s/%s: new ReplicaSet %s", namespace, name, body["metadata"]["name"]
            )
        else:
            own = int((new_rs["metadata"].get("annotations") or {}).get(REVISION, "0"))
            patch: dict[str, Any] = {}
            if own < max(revisions, default=0):  # rolled back to an older template
                patch["metadata"] = {"annotations": {REVISION: str(max(revisions) + 1)}}
            if int(new_rs["spec"].get("replicas", 1)) != desired:
                patch["spec"] = {"replicas": desired}
                patch.setdefault("metadata", {}).setdefault("annotations", {})[
                    "deployment.kubernetes.io/desired-replicas"
                ] = str(desired)
            if patch:
                path = f"{base}/{new_rs['metadata']['name']}"
                new_rs = self._write(
                    self.caches.replicasets, lambda: self.rest.merge_patch(path, patch)
                )
        olds = sorted(
            (rs for rs in owned if rs["metadata"]["uid"] != new_rs["metadata"]["uid"]),
            key=lambda rs: int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")),
            reverse=True,
        )
        new_available = int(new_rs.get("status", {}).get("availableReplicas", 0))
        targets = rollout_scale(
            desired,
            new_available,
            [(rs["metadata"]["name"], int(rs["spec"].get("replicas", 1))) for rs in olds],
        )
        for rs in olds:
            target = targets[rs["metadata"]["name"]]
            if int(rs["spec"].get("replicas", 1)) != target:
                path = f"{base}/{rs['metadata']['name']}"
                self._write(
                    self.caches.replicasets,
                    partial(self.rest.merge_patch, path, {"spec": {"replicas": target}}),
                )
        revision = (new_rs["metadata"].get("annotations") or {}).get(REVISION, "1")
        dpath = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
        if (deployment["metadata"].get("annotations") or {}).get(REVISION) != revision:
            patch = {"metadata": {"annotations": {REVISION: revision}}}
            deployment = self._write(
                self.caches.deployments, lambda: self.rest.merge_patch(dpath, patch)
            )
        current = [new_rs, *olds]
        status = deployment_status(deployment, new_rs, current, created_new=created, now=_now())
        old = deployment.get("status", {}) or {}
        if status != old:
            self._write(
                self.caches.deployments,
                lambda: self.rest.merge_patch(f"{dpath}/status", _status_patch(old, status)),
            )

    # --- the ReplicaSet controller ---------------------------------------------------------

    def _replicasets(self) -> None:
        for rs in self.caches.replicasets.items():
            if _terminating(rs):
                continue
            with _deferred(rs):
                self._replicate(rs)

    def _replicate(self, rs: dict[str, Any]) -> None:
        namespace, name = object_key(rs)
        pods = [p for p in self._owned(self.caches.pods, rs) if not _terminating(p)]
        desired = int(rs["spec"].get("replicas", 1))
        base = f"/api/v1/namespaces/{namespace}/pods"
        for _ in range(desired - len(pods)):
            body = self._new_pod(rs)
            pods.append(self._write(self.caches.pods, partial(self.rest.create, base, body)))
        if len(pods) > desired:
            # Not Ready first, then the newest (what the ReplicaSet controller prefers to delete).
            for pod in sorted(pods, key=lambda p: (pod_ready(p), _neg(p)))[: len(pods) - desired]:
                path = f"{base}/{pod['metadata']['name']}"
                self._write(self.caches.pods, partial(self.rest.delete, path))
                pods.remove(pod)
        status = replicaset_status(rs, pods)
        old = rs.get("status", {}) or {}
        if status != old:
            path = f"/apis/apps/v1/namespaces/{namespace}/replicasets/{name}/status"
            self._write(
                self.caches.replicasets,
                lambda: self.rest.merge_patch(path, _status_patch(old, status)),
            )

    def _new_pod(self, rs: dict[str, Any]) -> dict[str, Any]:
        suffix = "".join(secrets.choice(_SAFE) for _ in range(5))
        pod = pod_for_replicaset(rs, f"{rs['metadata']['name']}-{suffix}")
        network = pod["metadata"]["annotations"].get(
            ANNOTATION_NETWORK, self.kubelet.default_network
        )
        if network == "loopback":
            self._give_own_port(pod)
        return pod

    def _give_own_port(self, pod: dict[str, Any]) -> None:
        """Loopback pods share 127.0.0.1, so each gets its own ``http`` port.

        The testbed's stand-in for a pod network: in a cluster every pod has its own IP and the
        same port; here the port (``containerPort`` and the ``--port`` argument) is rewritten as
        the pod is created, which is the only place a pod's spec can still change.
        """
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []) or []:
                if port.get("name") != "http":
                    continue
                chosen = free_port()
                while chosen in self._ports:
                    chosen = free_port()
                self._ports.add(chosen)
                old = str(port["containerPort"])
                port["containerPort"] = chosen
                pod["metadata"].setdefault("annotations", {})[ANNOTATION_DECLARED_PORT] = old
                args = [str(a) for a in container.get("args", []) or []]
                for i, arg in enumerate(args[:-1]):
                    if arg == "--port" and args[i + 1] == old:
                        args[i + 1] = str(chosen)
                container["args"] = args

    # --- the garbage collector -------------------------------------------------------------

    def _collect(self) -> None:
        owners = {
            "InferenceService": self.caches.isvcs.uids(),
            "Deployment": self.caches.deployments.uids(),
            "ReplicaSet": self.caches.replicasets.uids(),
        }
        for informer, plural in (
            (self.caches.deployments, "apis/apps/v1/namespaces/{ns}/deployments"),
            (self.caches.replicasets, "apis/apps/v1/namespaces/{ns}/replicasets"),
            (self.caches.pods, "api/v1/namespaces/{ns}/pods"),
            (self.caches.services, "api/v1/namespaces/{ns}/services"),
        ):
            for obj in informer.items():
                ref = next(
                    (
                        r
                        for r in obj["metadata"].get("ownerReferences", []) or []
                        if r.get("controller")
                    ),
                    None,
                )
                if ref is None or ref.get("kind") not in owners or _terminating(obj):
                    continue
                if ref.get("uid") in owners[ref["kind"]]:
                    continue
                namespace, name = object_key(obj)
                _log.info("garbage-collecting %s %s/%s", obj.get("kind", "object"), namespace, name)
                path = "/" + plural.format(ns=namespace) + f"/{name}"
                self._write(informer, partial(self.rest.delete, path))
                if informer is not self.caches.pods:  # pods: the kubelet finishes them
                    informer.note_deleted(obj)

    # --- the kubelet -----------------------------------------------------------------------

    def _kubelet(self) -> None:
        bound = {
            p["metadata"]["uid"]: p
            for p in self.caches.pods.items()
            if p.get("spec", {}).get("nodeName") == NODE_NAME
        }
        for uid, runtime in list(self.runtimes.items()):
            pod = bound.get(uid)
            if pod is None or _terminating(pod):
                self._stop(runtime)
        for uid, pod in bound.items():
            if uid not in self.runtimes and not _terminating(pod):
                self._start(pod)

    def _start(self, pod: dict[str, Any]) -> None:
        runtime = PodRuntime(self.kubelet, pod)
        self.runtimes = {**self.runtimes, runtime.uid: runtime}
        try:
            runtime.launch()
        except Exception:
            _log.exception("pod %s/%s failed to start", runtime.namespace, runtime.name)
            runtime.shutdown()
            self.runtimes = {k: v for k, v in self.runtimes.items() if k != runtime.uid}
            raise
        _log.info(
            "pod %s/%s started at %s (uid %s)",
            runtime.namespace,
            runtime.name,
            runtime.url,
            runtime.uid,
        )

    def _stop(self, runtime: PodRuntime) -> None:
        runtime.stop_prober()
        runtime.stop_container()
        runtime.publish()
        runtime.shutdown()
        delete_now(self.rest, runtime)
        self.caches.pods.note_deleted(runtime.pod)
        self._ports.discard(runtime.port)
        self.runtimes = {k: v for k, v in self.runtimes.items() if k != runtime.uid}
        _log.info("pod %s/%s removed", runtime.namespace, runtime.name)

    def shutdown(self) -> None:
        """Stop every container at once (objects stay): what the testbed's stop does."""
        runtimes = list(self.runtimes.values())
        for runtime in runtimes:
            runtime.stop_prober()
            with runtime.lock:
                runtime.gone = True
                runtime.running = False
            if runtime.process is not None:
                runtime.process.terminate()
        for runtime in runtimes:
            runtime.shutdown()
        self.runtimes = {}


def _neg(pod: dict[str, Any]) -> str:
    """Sort key putting the newest pod first (creationTimestamp, then name, descending)."""
    stamp = pod["metadata"].get("creationTimestamp", "")
    return "".join(chr(0x10FFFF - ord(c)) for c in stamp + pod["metadata"]["name"])


@contextlib.contextmanager
def _deferred(obj: dict[str, Any]) -> Any:
    """Let one object's API error wait for the next pass instead of ending this one."""
    try:
        yield
    except _API_ERRORS as exc:
        namespace, name = object_key(obj)
        _log.debug("%s %s/%s deferred: %s", obj.get("kind"), namespace, name, exc)
