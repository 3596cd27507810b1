"""One pass of what the testbed plays over the informers' caches, and the writes it makes.

In order: LLMKube's operator (a Deployment and a Service per InferenceService, its status), the
scheduler's bind (``_scheduler.py``: every new pod to the testbed node) and the kubelet
(containers of the pods bound to that node). The Deployment and ReplicaSet controllers and the
garbage collector are kube-controller-manager's own (``_controller_manager.py``). Decisions
come from ``_workloads.py`` and ``_scheduler.py``; this module only reads the caches and sends
what differs, so an idle cluster costs no request. Each part writes as its own identity: the
operator as :data:`OPERATOR_USER`, the bind as kube-scheduler, the kubelet as the node.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx2

from pulumi_lora._kube._crd import GROUP, INFERENCE_SERVICE_PLURAL, VERSION
from pulumi_lora.testing.testbed._informer import Informer, object_key
from pulumi_lora.testing.testbed._kubelet import KubeletContext, PodRuntime, delete_now
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest
from pulumi_lora.testing.testbed._scheduler import bind, needs_binding
from pulumi_lora.testing.testbed._workloads import (
    NODE_NAME,
    controller_uid,
    deployment_is_current,
    isvc_status,
    render_deployment,
    render_service,
    service_is_current,
)

__all__ = ["OPERATOR_USER", "Caches", "ClusterPlay"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

_API_ERRORS = (httpx2.HTTPError, ApiRequestError)

OPERATOR_USER = "testbed:llmkube-operator"
"""Who the played LLMKube operator acts as (a static token; RBAC in ``_testbed.py``).

Its own user, apart from LLMKube's LoRA controller's ServiceAccount, so that what the played
operator writes is never counted as what LLMKube's LoRA controller sends."""

ISVC_COLLECTION = f"/apis/{GROUP}/{VERSION}/{INFERENCE_SERVICE_PLURAL}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch turning status ``old`` into ``new`` (fields gone are nulled)."""
    return {"status": {**dict.fromkeys((k for k in old if k not in new), None), **new}}


def _terminating(obj: dict[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def pre_stop_seconds(pod: dict[str, Any]) -> float:
    """Pure: how long the kubelet sleeps before stopping a deleted pod's containers: the longest
    ``lifecycle.preStop.sleep.seconds`` of its containers, within the deletion's grace period
    (``metadata.deletionGracePeriodSeconds``, else ``spec.terminationGracePeriodSeconds``, 30)."""
    spec = pod.get("spec") or {}
    sleeps = [
        float(((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds", 0))
        for c in spec.get("containers") or ()
    ]
    grace = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds", 30)
    return max(0.0, min(max(sleeps, default=0.0), float(grace)))


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


class ClusterPlay:
    """LLMKube's operator, the scheduler's bind and the kubelet, as one pass over the caches."""

    def __init__(
        self,
        rest: KubeRest,
        caches: Caches,
        kubelet: KubeletContext,
        *,
        scheduler: KubeRest | None = None,
    ) -> None:
        """``rest`` writes as the operator, ``scheduler`` (default: ``rest``) binds pods, the
        kubelet writes with its context's own client."""
        self.rest = rest
        self.scheduler = scheduler or rest
        self.caches = caches
        self.kubelet = kubelet
        self.runtimes: dict[str, PodRuntime] = {}  # by pod UID; replaced, never mutated
        self._stopping: dict[str, float] = {}  # pod UID → when its preStop sleep ends
        self.writes = 0

    # --- one pass --------------------------------------------------------------------------

    def run_pass(self) -> None:
        """Every controller once, each object on its own (one failure does not stop the rest)."""
        if not self.caches.synced():
            return
        for step in (self._operator, self._schedule, self._kubelet):
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

    # --- the scheduler's bind --------------------------------------------------------------

    def _schedule(self) -> None:
        for pod in self.caches.pods.items():
            if needs_binding(pod):
                with _deferred(pod):
                    self.writes += 1
                    bind(self.scheduler, pod)

    # --- the kubelet -----------------------------------------------------------------------

    def _kubelet(self) -> None:
        bound = {
            p["metadata"]["uid"]: p
            for p in self.caches.pods.items()
            if p.get("spec", {}).get("nodeName") == NODE_NAME
        }
        for uid, runtime in list(self.runtimes.items()):
            pod = bound.get(uid)
            if pod is None or (_terminating(pod) and self._pre_stop_done(uid, pod)):
                self._stop(runtime)
        for uid, pod in bound.items():
            if uid in self.runtimes:
                if self.runtimes[uid].observe(pod):  # a gate's condition changed: Ready again
                    self.writes += 1
                    self.runtimes[uid].publish()
                continue
            if _terminating(pod):
                # Deleted before its containers started: nothing to stop, so the kubelet
                # finishes the deletion at once (else it stays Terminating for good).
                self.writes += 1
                delete_now(self.kubelet.rest, pod)
                self.caches.pods.note_deleted(pod)
            else:
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

    def _pre_stop_done(self, uid: str, pod: dict[str, Any]) -> bool:
        """Whether a terminating pod's ``preStop`` sleep is over: the kubelet runs it, the
        containers still serving, before it stops them (at most the deletion's grace period)."""
        due = self._stopping.get(uid)
        if due is None:
            due = time.monotonic() + pre_stop_seconds(pod)
            self._stopping = {**self._stopping, uid: due}
        return time.monotonic() >= due

    def _stop(self, runtime: PodRuntime) -> None:
        self._stopping = {k: v for k, v in self._stopping.items() if k != runtime.uid}
        runtime.stop_prober()
        runtime.stop_container()
        runtime.publish()
        runtime.shutdown()
        delete_now(self.kubelet.rest, runtime.pod)
        self.caches.pods.note_deleted(runtime.pod)
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


@contextlib.contextmanager
def _deferred(obj: dict[str, Any]) -> Any:
    """Let one object's API error wait for the next pass instead of ending this one."""
    try:
        yield
    except _API_ERRORS as exc:
        namespace, name = object_key(obj)
        _log.debug("%s %s/%s deferred: %s", obj.get("kind"), namespace, name, exc)
