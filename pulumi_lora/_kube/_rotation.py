"""The calls a rolling swap makes besides the CR's: one pod read, its gate condition written
(``pods/status``), the Service's EndpointSlices listed. Sync (the provider's); the loop has its
own async twins in ``_resync._kube``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from pulumi_lora._core._llmkube import PodEndpoint, pod_from_object
from pulumi_lora._errors import ClusterError, Forbidden
from pulumi_lora._kube._objects import PodResource, _read_as_dicts, as_dict, cluster_error

EndpointSliceResource = _read_as_dicts("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")
#: The label the EndpointSlice controller puts on every slice of a Service.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


#: What grants the provider's rolling swap its calls (``{namespace}``: the target's).
PROVIDER_GRANT = (
    "a rolling swap on gated pods needs patch on pods/status and list on endpointslices in "
    "{namespace}: `pulumi-lora rbac --readiness-gate -n {namespace}` prints the Role that "
    "grants them"
)
#: What grants the re-sync loop the same calls.
LOOP_GRANT = (
    "the re-sync loop needs patch on pods/status and list on endpointslices in {namespace} "
    "for the readiness gate: render its manifests with readiness_gate=True"
)


def _refused(action: str, namespace: str, exc: ApiError, grant: str) -> ClusterError:
    """``cluster_error``, saying what grants the call (``grant``) when the apiserver refused it
    (a role made before the gate, or without it)."""
    error = cluster_error(action, exc)
    if isinstance(error, Forbidden):
        return Forbidden(f"{error}; {grant.format(namespace=namespace)}")
    return error


def get_pod(client: Client, namespace: str, name: str) -> PodEndpoint | None:
    """The pod as it is now, or None when it is gone."""
    try:
        return pod_from_object(as_dict(client.get(PodResource, name, namespace=namespace)))
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise cluster_error(f"reading pod {namespace}/{name}", exc) from exc


def patch_pod_status(
    client: Client,
    namespace: str,
    name: str,
    body: Mapping[str, Any],
    *,
    grant: str = PROVIDER_GRANT,
) -> bool:
    """A strategic merge patch of ``pods/NAME/status`` (the gate's condition, merged by type: the
    kubelet's conditions stay). False on 409 (a ``resourceVersion`` the pod has moved past) or
    404 (the pod is gone); a refusal raises, saying ``grant``."""
    try:
        client.patch(
            Pod.Status, name, dict(body), namespace=namespace, patch_type=PatchType.STRATEGIC
        )
    except ApiError as exc:
        if exc.status.code in (404, 409):
            return False
        raise _refused(
            f"writing the readiness gate of pod {namespace}/{name}", namespace, exc, grant
        ) from exc
    return True


def list_endpoint_slices(
    client: Client, namespace: str, service: str, *, grant: str = PROVIDER_GRANT
) -> list[dict[str, Any]]:
    """The EndpointSlices of Service ``namespace/service``, as dicts (a refusal says ``grant``)."""
    try:
        listed = client.list(
            EndpointSliceResource, namespace=namespace, labels={SERVICE_NAME_LABEL: service}
        )
        return [as_dict(item) for item in listed]
    except ApiError as exc:
        raise _refused(
            f"listing the EndpointSlices of {namespace}/{service}", namespace, exc, grant
        ) from exc
