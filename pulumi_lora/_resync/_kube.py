"""The loop's cluster edge: list-then-watch with resumption, status, Events and Secrets.

Writes reuse the provider's blocking helpers (``pulumi_lora._kube._objects``) on a thread pool,
so both actors write the CR through the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from lightkube import ApiError, AsyncClient, Client, operators
from lightkube.core.generic_client import WatchDriver
from lightkube.core.selector import build_selector
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from pulumi_lora._core._llmkube import SERVICE_LABEL, PodEndpoint, pod_from_object
from pulumi_lora._errors import ClusterError, Forbidden
from pulumi_lora._http._retry import retry_apiserver_answers
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._kube import _rotation as rotation
from pulumi_lora._kube._auth import use_credentials
from pulumi_lora._kube._source import KubeSource, held_writes, resolve
from pulumi_lora._resync import _logs as logs
from pulumi_lora._resync._decide import WatchAction, after_watch_error, backoff_delay
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._settings import FIELD_MANAGER
from pulumi_lora._resync._views import SecretRef

T = TypeVar("T")

#: The longest one watch request may stay open before it is re-issued from its last version: a
#: connection that died without a FIN (a partition) is noticed within this time.
WATCH_SESSION = 300.0
#: Asked of the apiserver, a little shorter, so it usually ends the request itself, cleanly.
WATCH_SERVER_TIMEOUT = 280

Objects = list[dict[str, Any]]


def jitter() -> float:
    """A random fraction in [0, 1) for the pure backoff policies (spreading retries out)."""
    return random.random()  # noqa: S311 - jitter, not secrecy


def labelled_pod(obj: Mapping[str, Any]) -> PodEndpoint | None:
    """A pod as the loop tracks it (the provider's own ``pod_from_object``); None without the
    ``inference.llmkube.dev/service`` label."""
    pod = pod_from_object(obj)
    return pod if pod.service else None


#: The resources the loop watches, with the selector that narrows each. ReplicaSets and
#: Deployments are the links of the pods' controller chain (``_core._ownership``): the Deployment
#: controller copies the pod template's labels to its ReplicaSets, and LLMKube labels its
#: Deployment as it labels the pods.
WATCHED: dict[str, tuple[Any, dict[str, Any] | None]] = {
    "inferenceservices": (k8s.InferenceServiceResource, None),
    "deployments": (k8s.DeploymentResource, {SERVICE_LABEL: operators.exists()}),
    "replicasets": (k8s.ReplicaSetResource, {SERVICE_LABEL: operators.exists()}),
    "loraadapters": (k8s.LoRAAdapterResource, None),
    "pods": (k8s.PodResource, {SERVICE_LABEL: operators.exists()}),
}


async def watch_once(
    client: AsyncClient,
    resource: Any,
    *,
    namespace: str,
    labels: Mapping[str, Any] | None,
    resource_version: str | None,
    server_timeout: int,
) -> AsyncIterator[tuple[str, Any]]:
    """One watch request, as lightkube's ``AsyncClient.watch`` sends it, with its events split on
    newline bytes only (`event_lines`); errors are lightkube's (``ApiError``, httpx2's).

    lightkube reads watch lines with httpx2's ``aiter_lines``, which splits as ``str.splitlines``
    does: also on U+0085, U+2028 and U+2029. The apiserver sends U+0085 raw inside JSON strings,
    so one CR whose annotation held it broke every LoRAAdapter watch of the loop, for good (found
    by ``tests/resync/test_hostile_crs.py``). This reuses lightkube's request building and event
    decoding (``WatchDriver``), and makes one request: `Kube.follow` resumes.
    """
    generic: Any = client._client  # lightkube's GenericAsyncClient: request building, sending
    request = generic.prepare_request(
        "list",
        res=resource,
        namespace=namespace,
        watch=True,
        params={
            "timeoutSeconds": server_timeout,
            "resourceVersion": resource_version,
            "labelSelector": build_selector(dict(labels)) if labels else None,
        },
    )
    driver: Any = WatchDriver(request, generic._client.build_request)  # lightkube: untyped
    response = await generic.send(driver.get_request(timeout=generic._watch_timeout), stream=True)
    try:
        if response.is_error:
            await response.aread()
            generic.raise_for_status(response)
        async for line in event_lines(response.aiter_bytes()):
            yield driver.process_one_line(line)
    finally:
        await response.aclose()


async def event_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The non-empty lines of a newline-delimited JSON stream: split on ``\\n`` bytes only (in
    JSON a raw ``\\n`` is never inside a string; other line breaks may be)."""
    pending = bytearray()
    async for chunk in chunks:
        start = len(pending)
        pending += chunk
        end = pending.find(b"\n", start)
        while end >= 0:
            line = bytes(pending[:end])
            del pending[: end + 1]
            if line.strip():
                yield line
            end = pending.find(b"\n")
    if bytes(pending).strip():
        yield bytes(pending)


class Kube:
    """API access for one run of the loop (one namespace, or all of them)."""

    def __init__(self, source: KubeSource, namespace: str | None, threads: int = 8) -> None:
        config, credentials = resolve(source)  # a credential plugin's, renewed on expiry
        self.namespace = namespace
        self.client = retry_apiserver_answers(
            use_credentials(AsyncClient(config=config, field_manager=FIELD_MANAGER), credentials)
        )
        sync = Client(config=config, field_manager=FIELD_MANAGER)
        self._sync = retry_apiserver_answers(held_writes(use_credentials(sync, credentials)))
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="resync-kube")

    async def close(self) -> None:
        """Close both clients and the thread pool."""
        await self.client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sync.close()

    async def _blocking(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    # --- reading ----------------------------------------------------------------------------

    async def list(self, kind: str) -> tuple[Objects, str | None]:
        """Every object of ``kind`` in scope, and the list's resourceVersion."""
        resource, labels = WATCHED[kind]
        listing = self.client.list(resource, namespace=self.namespace or "*", labels=labels)
        items = [k8s.as_dict(obj) async for obj in listing]
        return items, listing.resourceVersion

    async def follow(
        self,
        kind: str,
        version: str | None,
        on_snapshot: Callable[[Objects], None],
        on_event: Callable[[str, dict[str, Any]], None],
        metrics: Metrics,
    ) -> None:
        """Watch ``kind`` forever from ``version``, resuming after every break.

        A dropped stream is re-watched from the last resourceVersion seen (after a jittered
        backoff while the apiserver is away); 410 Gone means that version expired, so the
        objects are listed again and ``on_snapshot`` gets the whole set (the caller diffs it
        against its cache, which is how deletions missed meanwhile are noticed).
        """
        resource, labels = WATCHED[kind]
        handling = metrics.watch_seconds.labels(kind)
        failures = 0
        while True:
            if version is None:
                try:
                    items, version = await self.list(kind)
                except Exception as exc:  # the apiserver may be restarting: retry
                    failures += 1
                    delay = backoff_delay(failures, jitter(), base=0.2, cap=5.0)
                    logs.event("relist_failed", 30, resource=kind, error=_describe(exc))
                    await asyncio.sleep(delay)
                    continue
                failures = 0
                on_snapshot(items)
            code: int | None = None
            error = "the watch stream ended"
            try:
                async with asyncio.timeout(WATCH_SESSION):
                    stream = watch_once(
                        self.client,
                        resource,
                        namespace=self.namespace or "*",
                        labels=labels,
                        resource_version=version,
                        server_timeout=WATCH_SERVER_TIMEOUT,
                    )
                    async with contextlib.aclosing(stream) as events:  # type: ignore[type-var]
                        async for event_type, obj in events:
                            started = time.perf_counter()
                            data = k8s.as_dict(obj)
                            version = (data.get("metadata") or {}).get("resourceVersion") or version
                            failures = 0
                            on_event(event_type, data)
                            handling.inc(time.perf_counter() - started)
            except TimeoutError:
                metrics.watch_restarts.labels(kind, WatchAction.REWATCH.value).inc()
                continue  # a routine re-issue: nothing broke
            except ApiError as exc:
                code = exc.status.code
                error = _describe(exc)
            except Exception as exc:  # connection reset, apiserver gone, bad chunk
                error = _describe(exc)
            failures += 1
            action, delay = after_watch_error(code, failures, jitter())
            metrics.watch_restarts.labels(kind, action.value).inc()
            logs.event(
                "watch_broken",
                30,
                resource=kind,
                action=action.value,
                retry_in=round(delay, 3),
                error=error,
            )
            if action is WatchAction.RELIST:
                version = None
            await asyncio.sleep(delay)

    # --- writing (the provider's own helpers, off the event loop) ---------------------------

    async def apply_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Server-side apply of the CR's status as ``pulumi-lora-resync``."""
        return await self._blocking(
            partial(k8s.apply_adapter_status, self._sync, namespace, name, status, FIELD_MANAGER)
        )

    async def release_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        """Remove ``finalizer`` from a CR (a tested JSON patch); whether this call removed it."""
        return await self._blocking(
            partial(k8s.release_finalizer, self._sync, namespace, name, finalizer)
        )

    async def has_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        """Whether the CR (read afresh) carries ``finalizer``; False when it is gone."""
        cr = await self._blocking(partial(k8s.get_adapter, self._sync, namespace, name))
        return finalizer in (((cr or {}).get("metadata") or {}).get("finalizers") or [])

    async def patch_pod_status(self, namespace: str, name: str, body: Mapping[str, Any]) -> bool:
        """A strategic merge patch of ``pods/NAME/status`` (the readiness gate's condition, merged
        by type: the kubelet's conditions stay); False on 409 Conflict (a ``resourceVersion``
        precondition the pod has moved past) or 404 (the pod is gone). Other errors raise."""
        try:
            await self.client.patch(
                Pod.Status, name, dict(body), namespace=namespace, patch_type=PatchType.STRATEGIC
            )
        except ApiError as exc:
            if exc.status.code in (404, 409):
                return False
            raise
        return True

    async def endpoint_slices(self, namespace: str, service: str) -> Objects:
        """The EndpointSlices of Service ``namespace/service`` (the rolling swap's waits)."""
        return await self._blocking(
            partial(
                rotation.list_endpoint_slices,
                self._sync,
                namespace,
                service,
                grant=rotation.LOOP_GRANT,
            )
        )

    async def emit_event(
        self, cr: Mapping[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Record an Event on the CR (best effort, as ``emit_event`` itself is)."""
        await self._blocking(
            partial(
                k8s.emit_event,
                self._sync,
                cr,
                reason=reason,
                message=message,
                warning=warning,
                component=FIELD_MANAGER,
            )
        )

    async def read_secret(self, ref: SecretRef) -> str:
        """The API key a CR references. The value goes to the SGLang client only. Any failure
        is a `ClusterError` (no answer from the apiserver included: a retryable one)."""
        try:
            return await self._blocking(
                partial(k8s.read_secret_value, self._sync, ref.namespace, ref.name, ref.key)
            )
        except Forbidden as exc:
            raise Forbidden(f"{secret_refused(ref.namespace, ref.name)} ({exc})") from exc
        except ClusterError:
            raise
        except Exception as exc:
            raise ClusterError(
                f"reading Secret {ref.namespace}/{ref.name} failed: {type(exc).__name__}"
            ) from exc


def secret_refused(namespace: str, name: str) -> str:
    """Pure: what to set when the loop may not read Secret ``namespace/name`` (first: a log
    line keeps only the start of a failure)."""
    return (
        f"the loop may not read Secret {namespace}/{name}: add {namespace!r} to "
        "secret_namespaces of resync_manifests or ResyncDeployment (a Role with get on secrets "
        "there, bound to the loop's ServiceAccount) and apply them again"
    )


def _describe(exc: BaseException) -> str:
    """A one-line description of a cluster error (lightkube's carry no credentials)."""
    if isinstance(exc, ApiError):
        return f"HTTP {exc.status.code} {exc.status.reason}: {exc.status.message}"
    return f"{type(exc).__name__}: {exc}"[:500]
