"""LLMKube's own LoRAAdapter controller, played from its source, and the Service path it loads by.

Every LLMKube install runs this controller: ``cmd/main.go`` (defilantech/LLMKube 907ac8d8)
registers ``LoRAAdapterReconciler`` unconditionally beside the InferenceService controller. So
every testbed runs it too unless told not to (``Testbed(llmkube_lora_controller=False)``), under
LLMKube's identity (:data:`LLMKUBE_CONTROLLER_USER`, a real ServiceAccount token) and RBAC
(:data:`LLMKUBE_RULES`, the LoRA part of ``llmkube-manager-role``).

Played step for step from ``internal/controller/loraadapter_controller.go``:

* controller-runtime's queue (``_workqueue.py``): one worker; every watch event of a LoRAAdapter
  (its own writes included: the controller sets no predicate) queues the key at once; an error
  requeues it rate-limited by controller-runtime's default limiter (``SetupWithManager`` sets
  none): the larger of the per-item back-off (5 ms doubling per failure up to 1000 s) and the
  overall bucket's wait (10 per second, a burst of 100, shared by every key); a
  ``RequeueAfter`` forgets the failures and requeues after the delay; success forgets them.
* Reconcile: a CR being deleted that carries the finalizer is unloaded through the Service when
  the InferenceService is sglang and has ``status.endpoint`` (errors only noted in status, whose
  write's error is ignored), then the finalizer is removed (a plain Update). A CR without the
  finalizer gets it (a plain Update of the object as cached), then seeded conditions
  (``FinalizerAdded``, ``Status().Update``). Otherwise: InferenceService missing → NotFound
  conditions, requeue 30 s; runtime not sglang → ``RuntimeMismatch``, requeue 30 s; the Service's
  ``ports[0].port`` unresolvable → ``InvalidPort``, requeue 30 s; ``status.loadedPath ==
  spec.path`` and ``lastLoadedAt`` under 2 minutes old → ``AlreadyLoaded`` conditions, no
  requeue; else POST ``/load_lora_adapter`` through the Service: any non-2xx or transport error
  → ``LoadUnsuccessful`` (Loaded False, Error True), requeue 30 s; success → ``loadedPath``,
  ``lastLoadedAt``, ``ReconcileSuccess``. Every status write is ``Status().Update``: a PUT of
  the whole status read from the cache (a conflict is an error, requeued rate-limited).

The Service path is ``_kubeproxy.ServiceProxy``'s (DNS and kube-proxy, played).

``time_scale`` shrinks the controller's clocks (the 30 s requeue, the 2 minute skip window, the
rate limiter) for tests that need many of its cycles; 1.0 is LLMKube's own timing.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2

from pulumi_lora._models import (
    ANNOTATION_MANAGED_BY,
    GROUP,
    LLMKUBE_CONTROLLER_USER,
    LLMKUBE_FINALIZER,
    PLURAL,
    VERSION,
)
from pulumi_lora.testing.testbed._informer import Informer, object_key
from pulumi_lora.testing.testbed._kubeproxy import ServiceProxy
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest, grant_cluster_role
from pulumi_lora.testing.testbed._workloads import service_name
from pulumi_lora.testing.testbed._workqueue import WorkQueue

__all__ = [
    "LLMKUBE_CONTROLLER_USER",
    "LLMKUBE_NAMESPACE",
    "LLMKUBE_ROLE",
    "LLMKUBE_RULES",
    "LLMKUBE_SERVICE_ACCOUNT",
    "LLMKubeLoRAController",
    "LLMKubeStats",
    "SentRequest",
    "grant_identity",
    "held_off",
]

_log = logging.getLogger("pulumi_lora.testing.testbed.llmkube")

LLMKUBE_NAMESPACE = "llmkube-system"
LLMKUBE_SERVICE_ACCOUNT = "llmkube-controller-manager"
LLMKUBE_ROLE = "llmkube-manager-role"
LLMKUBE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [GROUP],
        "resources": ["inferenceservices", PLURAL],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {
        "apiGroups": [GROUP],
        "resources": ["inferenceservices/status", f"{PLURAL}/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": [GROUP],
        "resources": ["inferenceservices/finalizers", f"{PLURAL}/finalizers"],
        "verbs": ["update"],
    },
    {
        "apiGroups": [""],
        "resources": ["services"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]
"""The rules of LLMKube's ``llmkube-manager-role`` (``config/rbac/role.yaml``) that its LoRA
controller and its Service lookups use."""

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


class LLMKubeLoRAController:
    """LLMKube's ``LoRAAdapterReconciler`` with controller-runtime's queue, as one thread."""

    def __init__(
        self,
        rest: KubeRest,
        proxy: ServiceProxy,
        *,
        time_scale: float = 1.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.rest = rest
        self.proxy = proxy
        self.time_scale = time_scale
        self._now = now
        self.stats = LLMKubeStats()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.informer = Informer(rest, f"{_ADAPTERS}/{PLURAL}", self._wake.set)
        self._seen: dict[tuple[str, str], str] = {}
        self.queue = WorkQueue(time_scale)
        self._current: tuple[str, str] | None = None  # the key a reconcile is working on
        self._running = threading.Event()  # cleared: the worker takes no key (``paused``)
        self._running.set()
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the watch and the worker."""
        self.informer.start()
        self._thread = threading.Thread(target=self._run, name="llmkube-lora", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the worker and the watch."""
        self._stop.set()
        self._wake.set()
        self.informer.stop()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.proxy.close()

    def requests(self, route: str | None = None) -> list[SentRequest]:
        """The requests sent through Services so far (``route``: only those)."""
        with self._lock:
            return [r for r in self.stats.requests if route is None or r.route == route]

    def let_go(self, namespace: str, name: str) -> bool:
        """Whether the controller can send nothing more for the CR ``namespace/name``.

        Its cache no longer holds the CR and no reconcile of it is running. Until then a deleted
        CR can still be unloaded again: a reconcile queued by the controller's own status write
        reads the cache before the watch delivered the deletion, sees the finalizer still there,
        and unloads through the Service once more (controller-runtime's cache lags the same way).
        The cache is read first: a reconcile that starts after it is empty does nothing.
        """
        if self.informer.get(namespace, name) is not None:
            return False
        with self._lock:
            return self._current != (namespace, name)

    def reads(self, namespace: str, name: str, check: Callable[[dict[str, Any]], bool]) -> bool:
        """Whether every reconcile of the CR from now on reads a copy that ``check`` accepts.

        Its cache holds such a copy and no reconcile begun on an older one is running: a
        reconcile that started before the watch delivered a change works from the stale copy
        and can still act on it (send a load for a CR whose finalizer was just taken away).
        """
        cached = self.informer.get(namespace, name)
        if cached is None or not check(cached):
            return False
        with self._lock:
            return self._current != (namespace, name)

    def caught_up(self, namespace: str, name: str, resource_version: str) -> bool:
        """Whether the controller is done with the CR as it stands at ``resource_version``.

        Its cache holds that version, the worker has seen it, and no reconcile of the CR is
        running or queued (now or later): nothing it does can still write over what a test
        reads at that version. Queue, cache bookkeeping and the running key change together
        under the controller's lock, so no moment between them reads as idle.
        """
        key = (namespace, name)
        cached = self.informer.get(namespace, name)
        if cached is None or cached["metadata"].get("resourceVersion") != resource_version:
            return False
        with self._lock:
            return (
                self._seen.get(key) == resource_version
                and self._current != key
                and not self.queue.holds(key)
            )

    @contextlib.contextmanager
    def paused(self, timeout: float = 60.0) -> Iterator[None]:
        """Keep the worker from taking keys meanwhile (a controller busy with other keys, or
        backing off: on a loaded cluster it reaches an event late). Events queue up and are
        reconciled, in order, once it resumes; a reconcile under way finishes first."""
        self._running.clear()
        deadline = time.monotonic() + timeout
        try:
            while True:
                with self._lock:
                    if self._current is None:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError("LLMKube's controller did not finish its reconcile")
                time.sleep(0.01)
            yield
        finally:
            self._running.set()
            self._wake.set()

    # --- the queue -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:  # ``paused`` clears ``_running`` and then reads ``_current`` here
                running = self._running.is_set()
                if running:
                    self._collect_events()
                key = self._current = self.queue.get() if running else None
            if not running:
                self._running.wait(0.1)
                continue
            if key is None:
                self._wake.wait(self.queue.idle_for(1.0))
                self._wake.clear()
                continue
            requeue: float | None = None
            failed = False
            try:
                requeue = self._reconcile(key)
            except Exception as exc:  # what controller-runtime does with a returned error
                failed = True
                _log.debug("llmkube: reconcile %s/%s failed: %s", *key, exc)
            with self._lock:
                if failed:
                    self.stats.errors += 1
                    self.queue.add_rate_limited(key)
                else:
                    self.queue.forget(key)
                    if requeue:
                        self.queue.add_after(key, requeue)
                self._current = None

    def _collect_events(self) -> None:
        """Queue every CR whose resourceVersion changed since last seen (a watch event)."""
        for obj in self.informer.items():
            key = object_key(obj)
            version = str(obj["metadata"].get("resourceVersion", ""))
            if self._seen.get(key) != version:
                self._seen[key] = version
                self.queue.add(key)

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


def grant_identity(admin: KubeRest) -> str:
    """Create LLMKube's namespace, ServiceAccount, ClusterRole and binding; return a token for it.

    The token comes from the TokenRequest API, so the apiserver authenticates the controller as
    :data:`LLMKUBE_CONTROLLER_USER` with the ServiceAccount groups, as it would in a cluster.
    """
    admin.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LLMKUBE_NAMESPACE}},
        allow=(409,),
    )
    admin.request(
        "POST",
        f"/api/v1/namespaces/{LLMKUBE_NAMESPACE}/serviceaccounts",
        body={
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": LLMKUBE_SERVICE_ACCOUNT, "namespace": LLMKUBE_NAMESPACE},
        },
        allow=(409,),
    )
    account = {
        "kind": "ServiceAccount",
        "name": LLMKUBE_SERVICE_ACCOUNT,
        "namespace": LLMKUBE_NAMESPACE,
    }
    grant_cluster_role(
        admin,
        LLMKUBE_ROLE,
        LLMKUBE_RULES,
        account,
        "testbed-llmkube-install",
        binding="llmkube-manager-rolebinding",
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 86400},
    }
    path = f"/api/v1/namespaces/{LLMKUBE_NAMESPACE}/serviceaccounts/{LLMKUBE_SERVICE_ACCOUNT}/token"
    answer = admin.create(path, request)
    return str(answer["status"]["token"])


def held_off(admin: KubeRest, llmkube: KubeRest, timeout: float) -> float:
    """Seconds until an admission policy refuses ``llmkube`` (LLMKube's identity) a status write
    on a CR pulumi-lora manages: a server-side dry run on a scratch CR in ``llmkube-system``,
    removed afterwards. :class:`TimeoutError` when nothing refuses it within ``timeout``."""
    base = f"{_ADAPTERS}/namespaces/{LLMKUBE_NAMESPACE}/{PLURAL}"
    name = f"coexistence-probe-{secrets.token_hex(3)}"
    probe = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LoRAAdapter",
        "metadata": {
            "name": name,
            "namespace": LLMKUBE_NAMESPACE,
            "annotations": {ANNOTATION_MANAGED_BY: "pulumi"},
        },
        "spec": {"name": "probe", "path": "/probe", "inferenceServiceRef": {"name": "none"}},
    }
    admin.create(base, probe)
    started = time.monotonic()
    try:
        while True:
            try:
                llmkube.request(
                    "PATCH",
                    f"{base}/{name}/status",
                    body={"status": {"loadedPath": "/probe"}},
                    content_type="application/merge-patch+json",
                    params={"dryRun": "All"},
                )
            except ApiRequestError as exc:
                if exc.status in (403, 422):
                    return time.monotonic() - started
                raise
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"no policy held LLMKube's controller off in {timeout}s")
            time.sleep(0.05)
    finally:
        admin.merge_patch(f"{base}/{name}", {"metadata": {"finalizers": None}}, allow=(404,))
        admin.delete(f"{base}/{name}")
