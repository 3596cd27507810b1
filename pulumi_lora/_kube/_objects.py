"""The calls on the cluster's objects: InferenceServices, pods, LoRAAdapter CRs, Events, Secrets.

API objects become ``_core._llmkube``'s frozen values (``Target``, ``PodEndpoint``) right here, and
lightkube's ``ApiError`` becomes the project's errors: nothing above handles raw API objects.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.generic_resource import (
    GenericNamespacedResource,
    create_api_info,
    create_namespaced_resource,
)
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Secret
from lightkube.types import PatchType

from pulumi_lora._core import _ownership
from pulumi_lora._core._llmkube import (
    SERVICE_LABEL,
    PodEndpoint,
    PodListing,
    Target,
    all_ready,
    pod_from_object,
    split_pods,
    target_from_object,
)
from pulumi_lora._errors import (
    ApiserverUnreachable,
    ClusterError,
    Forbidden,
    InferenceServiceNotFound,
)
from pulumi_lora._http._retry import retried
from pulumi_lora._kube._source import SPEC_MANAGER
from pulumi_lora._models import API_VERSION, GROUP, ISVC_KIND, ISVC_PLURAL, KIND, PLURAL, VERSION

LoRAAdapterResource = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)
InferenceServiceResource = create_namespaced_resource(GROUP, VERSION, ISVC_KIND, ISVC_PLURAL)


def _read_as_dicts(group: str, version: str, kind: str, plural: str) -> Any:
    """A read-only resource of Kubernetes' own (list, get, watch) whose objects arrive as plain
    dicts, as every caller reads them (`as_dict`).

    lightkube's typed classes (``Pod``...) build a decoder for the whole schema on first use
    (tens of milliseconds per process: a ``pulumi up`` pays it) and every object is then
    converted back to a dict; only a few fields are read. Not registered in lightkube's registry,
    so its typed classes stay what every other user of lightkube gets.
    """
    verbs = ["get", "list", "watch", "global_list", "global_watch"]

    class Resource(GenericNamespacedResource):
        _api_info = create_api_info(group, version, kind, plural, verbs=verbs)

    Resource.__name__ = Resource.__qualname__ = kind
    return Resource


PodResource = _read_as_dicts("", "v1", "Pod", "pods")
ReplicaSetResource = _read_as_dicts("apps", "v1", "ReplicaSet", "replicasets")
DeploymentResource = _read_as_dicts("apps", "v1", "Deployment", "deployments")

#: What lightkube raises when the apiserver gives no answer at all: its HTTP library's transport
#: errors (lightkube 1.x sends with httpx2, the one HTTP stack of the package).
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx2.TransportError,)


@contextmanager
def apiserver_errors() -> Iterator[None]:
    """Re-raise lightkube's transport errors as ``ApiserverUnreachable`` (chained)."""
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        raise ApiserverUnreachable(f"{type(exc).__name__}: {exc}{_at(exc)}") from exc


def _at(exc: Exception) -> str:
    """Where the request went (scheme, host, port: never a path, query or credential), so the
    user sees which endpoint of which kubeconfig did not answer."""
    try:
        url = exc.request.url if isinstance(exc, httpx2.RequestError) else None
    except RuntimeError:  # raised before a request existed
        return ""
    if url is None:
        return ""
    return f" at {url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")


# --- the target ---------------------------------------------------------------------------------


def get_target(client: Client, namespace: str, name: str) -> Target:
    """The InferenceService, or ``InferenceServiceNotFound`` naming namespace/name."""
    try:
        obj = client.get(InferenceServiceResource, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            raise InferenceServiceNotFound(namespace, name) from exc
        raise cluster_error(f"reading InferenceService {namespace}/{name}", exc) from exc
    return target_from_object(as_dict(obj))


# --- pods ---------------------------------------------------------------------------------------


def list_pods(client: Client, namespace: str, service: str) -> list[PodEndpoint]:
    """Every pod LLMKube labels as the InferenceService's, sorted by name."""
    try:
        pods = client.list(PodResource, namespace=namespace, labels={SERVICE_LABEL: service})
        found = [pod_from_object(as_dict(p)) for p in pods]
    except ApiError as exc:
        raise cluster_error(f"listing pods of {namespace}/{service}", exc) from exc
    return sorted(found, key=lambda p: p.name)


def list_owners(
    client: Client, namespace: str, service: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ReplicaSets and Deployments labelled as the InferenceService's (one LIST each).

    The Deployment controller copies the pod template's labels to its ReplicaSets, and LLMKube
    labels its Deployment as it labels the pods, so both carry ``inference.llmkube.dev/service``.
    """
    labels: dict[str, Any] = {SERVICE_LABEL: service}
    try:
        replicasets = [
            as_dict(o) for o in client.list(ReplicaSetResource, namespace=namespace, labels=labels)
        ]
        deployments = [
            as_dict(o) for o in client.list(DeploymentResource, namespace=namespace, labels=labels)
        ]
    except ApiError as exc:
        raise cluster_error(f"listing the workloads of {namespace}/{service}", exc) from exc
    return replicasets, deployments


def list_target_pods(
    client: Client, target: Target, pods: Sequence[PodEndpoint] | None = None
) -> PodListing:
    """The target's pods (``pods``, or listed now), split by their controller chain: one LIST
    of pods, and when there are any (and the chain is required), one LIST of ReplicaSets and one
    of Deployments."""
    if pods is None:
        pods = list_pods(client, target.namespace, target.name)
    if not (pods and _ownership.REQUIRE_CONTROLLER_CHAIN):
        return PodListing(tuple(pods))
    replicasets, deployments = list_owners(client, target.namespace, target.name)
    return split_pods(target, pods, replicasets, deployments)


def wait_for_pods(client: Client, target: Target, timeout: float, poll: float = 0.25) -> PodListing:
    """Wait until every desired replica is Ready (or the timeout); return the pods then seen.

    Polls the pods alone; their owners are listed only once enough of them are Ready for the
    trusted ones to be (and at the deadline).
    """
    deadline = time.monotonic() + timeout
    while True:
        pods = list_pods(client, target.namespace, target.name)
        late = time.monotonic() >= deadline
        if late or sum(1 for p in pods if p.ready) >= max(target.replicas, 1):
            listing = list_target_pods(client, target, pods)
            if late or all_ready(target, listing.pods):
                return listing
        time.sleep(poll)


# --- the CR -------------------------------------------------------------------------------------


def apply_adapter(client: Client, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply of the CR with the project's field manager; returns the stored object."""
    meta = manifest["metadata"]
    try:
        obj = client.apply(
            LoRAAdapterResource.from_dict(dict(manifest)), field_manager=SPEC_MANAGER, force=True
        )
    except ApiError as exc:
        raise cluster_error(
            f"applying LoRAAdapter {meta['namespace']}/{meta['name']}", exc
        ) from exc
    return as_dict(obj)


def apply_adapter_status(
    client: Client, namespace: str, name: str, status: Mapping[str, Any], field_manager: str
) -> dict[str, Any]:
    """Server-side apply of ``status`` through the status subresource."""
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": dict(status),
    }
    try:
        obj = client.apply(
            LoRAAdapterResource.Status.from_dict(body),
            field_manager=field_manager,
            force=True,
        )
    except ApiError as exc:
        raise cluster_error(f"writing the status of LoRAAdapter {namespace}/{name}", exc) from exc
    return as_dict(obj)


def get_adapter(client: Client, namespace: str, name: str) -> dict[str, Any] | None:
    """The CR as stored, or None when it does not exist."""
    return _stored(client, LoRAAdapterResource, "LoRAAdapter", namespace, name)


def get_lease(client: Client, namespace: str, name: str) -> dict[str, Any] | None:
    """A ``coordination.k8s.io/v1`` Lease as stored (the re-sync loop's heartbeat), or None."""
    return _stored(client, Lease, "Lease", namespace, name)


def _stored(
    client: Client, resource: Any, kind: str, namespace: str, name: str
) -> dict[str, Any] | None:
    """One namespaced object as stored, or None on 404; any other refusal a ClusterError."""
    try:
        obj = client.get(resource, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise cluster_error(f"reading {kind} {namespace}/{name}", exc) from exc
    return as_dict(obj)


def list_adapters(client: Client, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every LoRAAdapter CR (one namespace, or all when None)."""
    try:
        return [as_dict(o) for o in client.list(LoRAAdapterResource, namespace=namespace or "*")]
    except ApiError as exc:
        raise cluster_error("listing LoRAAdapters", exc) from exc


def release_finalizer(
    client: Client, namespace: str, name: str, finalizer: str, attempts: int = 3
) -> bool:
    """Remove ``finalizer`` from the CR, if it carries it; whether this call removed it.

    A JSON patch that tests the entry before removing it, so a concurrent change to the list
    fails the patch (and the CR is read again) instead of removing another finalizer.
    """
    for _ in range(attempts):
        obj = get_adapter(client, namespace, name)
        finalizers = list(((obj or {}).get("metadata") or {}).get("finalizers") or [])
        if finalizer not in finalizers:
            return False
        at = f"/metadata/finalizers/{finalizers.index(finalizer)}"
        ops = [{"op": "test", "path": at, "value": finalizer}, {"op": "remove", "path": at}]
        try:
            client.patch(
                LoRAAdapterResource, name, ops, namespace=namespace, patch_type=PatchType.JSON
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            if exc.status.code in (409, 422):  # the list changed under the test: read again
                continue
            raise cluster_error(
                f"removing {finalizer} from LoRAAdapter {namespace}/{name}", exc
            ) from exc
        return True
    return False


def remove_annotations(client: Client, namespace: str, name: str, keys: list[str]) -> None:
    """Remove the annotations ``keys`` from the CR (a merge patch; a missing CR is fine)."""
    patch = {"metadata": {"annotations": dict.fromkeys(keys)}}
    try:
        client.patch(
            LoRAAdapterResource, name, patch, namespace=namespace, patch_type=PatchType.MERGE
        )
    except ApiError as exc:
        if exc.status.code != 404:
            raise cluster_error(f"annotating LoRAAdapter {namespace}/{name}", exc) from exc


def begin_delete(client: Client, namespace: str, name: str) -> None:
    """Ask for the CR's deletion without waiting (its finalizers hold it meanwhile)."""
    try:
        client.delete(LoRAAdapterResource, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise cluster_error(f"deleting LoRAAdapter {namespace}/{name}", exc) from exc


def delete_adapter(
    client: Client,
    namespace: str,
    name: str,
    timeout: float = 60.0,
    poll: float = 0.2,
    *,
    release: Sequence[str] = (),
) -> None:
    """Delete the CR and wait until it is really gone (a finalizer could hold it).

    ``release`` names finalizers whose work this caller has already done (pulumi-lora's own and
    LLMKube's, after the provider unloaded from every pod): they are removed before the delete
    and while waiting.
    """
    for finalizer in release:
        release_finalizer(client, namespace, name, finalizer)
    begin_delete(client, namespace, name)
    deadline = time.monotonic() + timeout
    while (obj := get_adapter(client, namespace, name)) is not None:
        held = (obj.get("metadata") or {}).get("finalizers") or []
        mine = [f for f in release if f in held]
        # A release that took is looked at again at once; one refused (a webhook refusing every
        # update answers 409/422 each time) waits its turn like any other finalizer.
        if [f for f in mine if release_finalizer(client, namespace, name, f)]:
            continue
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"LoRAAdapter {namespace}/{name} still exists {timeout:.0f}s after its deletion"
                + (f"; finalizers {held} hold it" if held else "")
                + (f" (removing {mine} was refused each time)" if mine else "")
            )
        time.sleep(poll)


def read_secret_value(client: Client, namespace: str, name: str, key: str) -> str:
    """One key of a Secret, decoded. The value is returned, never logged or put in a message."""
    try:
        secret = client.get(Secret, name, namespace=namespace)
    except ApiError as exc:
        raise cluster_error(f"reading Secret {namespace}/{name}", exc) from exc
    data = secret.data or {}
    if key not in data:
        raise ClusterError(f"Secret {namespace}/{name} has no key {key!r} (keys: {sorted(data)})")
    return base64.b64decode(data[key]).decode()


def emit_event(
    client: Client,
    adapter: Mapping[str, Any],
    *,
    reason: str,
    message: str,
    warning: bool = False,
    component: str = SPEC_MANAGER,
) -> None:
    """Record a Kubernetes Event on the CR; best effort (an Event is never worth a failure)."""
    meta = adapter.get("metadata") or {}
    now = datetime.now(UTC)
    event = Event(
        metadata=ObjectMeta(
            generateName=f"{meta.get('name', 'lora')}.", namespace=meta.get("namespace")
        ),
        involvedObject=ObjectReference(
            apiVersion=API_VERSION,
            kind=KIND,
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            uid=meta.get("uid"),
        ),
        reason=reason,
        message=message[:1024],
        type="Warning" if warning else "Normal",
        source=EventSource(component=component),
        firstTimestamp=now,
        lastTimestamp=now,
        count=1,
    )
    try:
        client.create(event)
    except ApiError:
        return


def as_dict(obj: Any) -> dict[str, Any]:
    """A lightkube object as a plain camelCase dict (lightkube's ``to_dict`` is untyped)."""
    data: dict[str, Any] = obj.to_dict()
    return data


#: Answers of an apiserver that is starting, restarting or shedding load: try again later.
_UNAVAILABLE = frozenset({429, 503, 504})


def cluster_error(action: str, exc: ApiError) -> ClusterError:
    status = exc.status
    detail = f"{action} failed: HTTP {status.code} {status.reason}: {status.message}{retried(exc)}"
    if status.code == 403:
        return Forbidden(detail)
    return ApiserverUnreachable(detail) if status.code in _UNAVAILABLE else ClusterError(detail)
