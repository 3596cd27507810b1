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
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from pulumi_lora._models import (
    ANNOTATION_MANAGED_BY,
    GROUP,
    LLMKUBE_CONTROLLER_USER,
    PLURAL,
    VERSION,
)
from pulumi_lora.testing.testbed._informer import Informer, object_key
from pulumi_lora.testing.testbed._kubeproxy import ServiceProxy
from pulumi_lora.testing.testbed._reconciler import (
    LLMKubeStats,
    LoRAAdapterReconciler,
    SentRequest,
)
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest, grant_cluster_role
from pulumi_lora.testing.testbed._workqueue import WorkQueue

__all__ = [
    "LLMKUBE_CONTROLLER_USER",
    "LLMKUBE_NAMESPACE",
    "LLMKUBE_ROLE",
    "LLMKUBE_RULES",
    "LLMKUBE_SERVICE_ACCOUNT",
    "LLMKubeLoRAController",
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

_ADAPTERS = f"/apis/{GROUP}/{VERSION}"


class LLMKubeLoRAController(LoRAAdapterReconciler):
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
