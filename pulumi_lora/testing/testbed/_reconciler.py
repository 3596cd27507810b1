"""LLMKube's ``LoRAAdapterReconciler.Reconcile``, played step for step from its source.

:class:`LoRAAdapterReconciler` is a base class of ``_llmkube.LLMKubeLoRAController``, which adds
controller-runtime's queue and watch; :class:`LLMKubeStats` counts what the two did.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2

from pulumi_lora._models import GROUP, LLMKUBE_FINALIZER, PLURAL, VERSION
from pulumi_lora.testing.testbed._informer import Informer, object_key
from pulumi_lora.testing.testbed._kubeproxy import ServiceProxy
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest
from pulumi_lora.testing.testbed._workloads import service_name

__all__ = ["LLMKubeStats", "LoRAAdapterReconciler", "SentRequest"]

_log = logging.getLogger("pulumi_lora.testing.testbed.llmkube")

REQUEUE_SECONDS = 30.0
SKIP_WINDOW_SECONDS = 120.0
_ADAPTERS = f"/apis/{GROUP}/{VERSION}"


@dataclass(frozen=True)
class SentRequest:
    """One request LLMKube's controller sent through a Service, and where it landed."""

    at: float  # time.monotonic()
    route: str  # /load_lora_adapter or /unload_lora_adapter
    adapter: str  # "namespace/name" of the CR
    lora_name: str
    pod: str | None  # the pod kube-proxy picked (None: refused before any pod)
    status: int | None  # HTTP status (None: transport error)


@dataclass
class LLMKubeStats:
    """What the played controller did, counted (thread-safe through the controller's lock)."""

    reconciles: int = 0
    errors: int = 0
    requests: list[SentRequest] = field(default_factory=list)
    status_writes: int = 0
    status_refused: int = 0
    finalizer_adds: int = 0
    finalizer_refused: int = 0
    finalizer_removals: int = 0


class LoRAAdapterReconciler:
    """The Reconcile of :class:`~pulumi_lora.testing.testbed._llmkube.LLMKubeLoRAController` (a
    base class of it, which sets these attributes and calls :meth:`_reconcile` per key)."""

    rest: KubeRest
    proxy: ServiceProxy
    time_scale: float
    stats: LLMKubeStats
    informer: Informer
    _now: Callable[[], datetime]
    _lock: threading.Lock

    # --- Reconcile -------------------------------------------------------------------------

    def _reconcile(self, key: tuple[str, str]) -> float | None:
        """One Reconcile; returns RequeueAfter in LLMKube seconds (None: none), raises on error."""
        with self._lock:
            self.stats.reconciles += 1
        cached = self.informer.get(*key)
        if cached is None:
            return None
        adapter = _copy(cached)
        finalizers = list(adapter["metadata"].get("finalizers") or [])
        if adapter["metadata"].get("deletionTimestamp"):
            if LLMKUBE_FINALIZER not in finalizers:
                return None
            self._reconcile_delete(adapter)
            return None
        if LLMKUBE_FINALIZER not in finalizers:
            self._add_finalizer(adapter)
            return None
        return self._reconcile_load(adapter)

    def _reconcile_load(self, adapter: dict[str, Any]) -> float | None:
        isvc = self._get_isvc(adapter)
        ns, name = _isvc_key(adapter)
        if isvc is None:
            text = f'inferenceservices.{GROUP} "{name}" not found'
            self._set(adapter, "Available", "False", "InferenceServiceNotFound", text)
            self._set(
                adapter,
                "Loaded",
                "False",
                "InferenceServiceNotFound",
                "waiting for the referenced InferenceService to exist",
            )
            self._set(adapter, "Error", "True", "InferenceServiceNotFound", text)
            self._update_status(adapter)
            return REQUEUE_SECONDS
        runtime = str(isvc.get("spec", {}).get("runtime") or "llamacpp")
        if runtime != "sglang":
            self._set(
                adapter,
                "Available",
                "False",
                "RuntimeMismatch",
                f'referenced InferenceService/{ns}/{name} runtime="{runtime}", expected sglang',
            )
            skipped = "skipped: target runtime is not sglang"
            self._set(adapter, "Loaded", "False", "RuntimeMismatch", skipped)
            self._set(
                adapter,
                "Error",
                "True",
                "RuntimeMismatch",
                "load cannot proceed against a non-sglang runtime",
            )
            self._update_status(adapter)
            return REQUEUE_SECONDS
        try:
            host, port = self._resolve(isvc)
        except LookupError as exc:
            self._set(
                adapter,
                "Available",
                "True",
                "ReconcilerError",
                "spec is well-formed but port resolution failed",
            )
            self._set(adapter, "Loaded", "False", "InvalidPort", str(exc))
            self._set(adapter, "Error", "True", "InvalidPort", str(exc))
            self._update_status(adapter)
            return REQUEUE_SECONDS
        spec = adapter.get("spec", {})
        if self._should_skip(adapter):
            ok = "InferenceService exists and is sglang"
            self._set(adapter, "Available", "True", "ReconcileSuccess", ok)
            skip = "skip: already loaded within safety window"
            self._set(adapter, "Loaded", "True", "AlreadyLoaded", skip)
            self._set(adapter, "Error", "False", "ReconcileSuccess", "no error")
            self._update_status(adapter)
            return None
        body = {"lora_name": str(spec.get("name")), "lora_path": str(spec.get("path"))}
        failure = self._send(adapter, host, port, "/load_lora_adapter", body)
        ok = "InferenceService exists and is sglang"
        self._set(adapter, "Available", "True", "ReconcileSuccess", ok)
        if failure is not None:
            self._set(adapter, "Loaded", "False", "LoadUnsuccessful", failure)
            self._set(adapter, "Error", "True", "LoadUnsuccessful", failure)
            self._update_status(adapter)
            return REQUEUE_SECONDS
        status = adapter.setdefault("status", {})
        status["loadedPath"] = spec.get("path")
        status["lastLoadedAt"] = _time(self._now())
        self._set(
            adapter,
            "Loaded",
            "True",
            "ReconcileSuccess",
            f'loaded as "{spec.get("name")}" at {spec.get("path")}',
        )
        self._set(adapter, "Error", "False", "ReconcileSuccess", "no error")
        self._update_status(adapter)
        return None

    def _reconcile_delete(self, adapter: dict[str, Any]) -> None:
        isvc = self._get_isvc(adapter) or {}
        if isvc.get("spec", {}).get("runtime") == "sglang" and isvc.get("status", {}).get(
            "endpoint"
        ):
            try:
                host, port = self._resolve(isvc)
            except LookupError:
                pass
            else:
                body = {"lora_name": str(adapter.get("spec", {}).get("name"))}
                failure = self._send(adapter, host, port, "/unload_lora_adapter", body)
                if failure is not None:
                    self._set(adapter, "Loaded", "False", "UnloadUnsuccessful", failure)
                    self._set(adapter, "Error", "True", "UnloadUnsuccessful", failure)
                    with contextlib.suppress(ApiRequestError):  # ``_ = r.Status().Update``
                        adapter = self._update_status(adapter)
        meta = adapter["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != LLMKUBE_FINALIZER]
        self._update(adapter)
        with self._lock:
            self.stats.finalizer_removals += 1

    def _add_finalizer(self, adapter: dict[str, Any]) -> None:
        meta = adapter["metadata"]
        meta["finalizers"] = [*(meta.get("finalizers") or []), LLMKUBE_FINALIZER]
        try:
            updated = self._update(adapter)
        except ApiRequestError:
            with self._lock:
                self.stats.finalizer_refused += 1
            raise
        with self._lock:
            self.stats.finalizer_adds += 1
        adopted = "first reconcile: adopted; waiting for load"
        self._set(updated, "Available", "False", "FinalizerAdded", adopted)
        self._set(updated, "Loaded", "False", "FinalizerAdded", "first reconcile: not yet loaded")
        self._set(updated, "Error", "False", "FinalizerAdded", "no error")
        self._update_status(updated)

    # --- pieces ----------------------------------------------------------------------------

    def _get_isvc(self, adapter: dict[str, Any]) -> dict[str, Any] | None:
        ns, name = _isvc_key(adapter)
        path = f"{_ADAPTERS}/namespaces/{ns}/inferenceservices/{name}"
        found: dict[str, Any] | None = self.rest.get(path, allow=(404,))
        return found

    def _resolve(self, isvc: dict[str, Any]) -> tuple[str, int]:
        """``defaultLoRAAdapterURLResolver``: the real Service's ``ports[0].port``."""
        ns, name = isvc["metadata"]["namespace"], service_name(isvc["metadata"]["name"])
        service = self.rest.get(f"/api/v1/namespaces/{ns}/services/{name}", allow=(404,))
        if service is None:
            raise LookupError(
                f"service {ns}/{name} not found yet (operator ordering); will retry: "
                f'services "{name}" not found'
            )
        ports = service.get("spec", {}).get("ports") or []
        if not ports:
            raise LookupError(f"service {ns}/{name} has no ports exposed")
        port = int(ports[0].get("port", 0))
        if port <= 0:
            raise LookupError(f"service {ns}/{name} port {port} is not a valid positive integer")
        return f"{name}.{ns}.svc", port

    def _should_skip(self, adapter: dict[str, Any]) -> bool:
        status = adapter.get("status") or {}
        loaded_path, last = status.get("loadedPath"), status.get("lastLoadedAt")
        if not loaded_path or not last or loaded_path != adapter.get("spec", {}).get("path"):
            return False
        try:
            when = datetime.fromisoformat(str(last))
        except ValueError:
            return False
        window = timedelta(seconds=SKIP_WINDOW_SECONDS * self.time_scale)
        return self._now() - when < window

    def _send(
        self, adapter: dict[str, Any], host: str, port: int, route: str, body: dict[str, str]
    ) -> str | None:
        """POST through the Service; None on 2xx, else the error text LLMKube records."""
        url = f"http://{host}:{port}{route}"
        pod: str | None = None
        code: int | None = None
        try:
            pod, response = self.proxy.post(host, port, route, body)
            code = response.status_code
            if code // 100 == 2:
                return None
            return f"sglang {url}: {code} {response.reason_phrase}: {response.text[:4096]}"
        except httpx2.HTTPError as exc:
            return f"post {url}: {exc}"
        finally:
            meta = adapter["metadata"]
            sent = SentRequest(
                time.monotonic(),
                route,
                f"{meta['namespace']}/{meta['name']}",
                body["lora_name"],
                pod,
                code,
            )
            with self._lock:
                self.stats.requests.append(sent)
            _log.info("llmkube: %s %s via %s -> pod %s: %s", route, sent.lora_name, host, pod, code)

    def _set(
        self, adapter: dict[str, Any], kind: str, status: str, reason: str, message: str
    ) -> None:
        """``meta.SetStatusCondition``: lastTransitionTime moves only when status flips."""
        generation = int(adapter["metadata"].get("generation", 1))
        conditions = adapter.setdefault("status", {}).setdefault("conditions", [])
        now = _time(self._now())
        for cond in conditions:
            if cond.get("type") == kind:
                if cond.get("status") != status:
                    cond["lastTransitionTime"] = now
                cond.update(
                    status=status, reason=reason, message=message, observedGeneration=generation
                )
                return
        conditions.append(
            {
                "type": kind,
                "status": status,
                "observedGeneration": generation,
                "lastTransitionTime": now,
                "reason": reason,
                "message": message,
            }
        )

    def _path(self, adapter: dict[str, Any]) -> str:
        ns, name = object_key(adapter)
        return f"{_ADAPTERS}/namespaces/{ns}/{PLURAL}/{name}"

    def _update(self, adapter: dict[str, Any]) -> dict[str, Any]:
        """``r.Update``: PUT the object (its resourceVersion guards it)."""
        updated: dict[str, Any] = self.rest.put(self._path(adapter), adapter)
        return updated

    def _update_status(self, adapter: dict[str, Any]) -> dict[str, Any]:
        """``r.Status().Update``: PUT the whole status."""
        try:
            updated: dict[str, Any] = self.rest.put(f"{self._path(adapter)}/status", adapter)
        except ApiRequestError:
            with self._lock:
                self.stats.status_refused += 1
            raise
        with self._lock:
            self.stats.status_writes += 1
        return updated


def _isvc_key(adapter: dict[str, Any]) -> tuple[str, str]:
    ref = adapter.get("spec", {}).get("inferenceServiceRef") or {}
    return str(ref.get("namespace") or adapter["metadata"]["namespace"]), str(ref.get("name", ""))


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy (controller-runtime hands the reconciler a copy of the cached object)."""
    return copy.deepcopy(obj)


def _time(value: datetime) -> str:
    """``metav1.Time`` on the wire: RFC 3339, seconds, UTC."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
