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
from pulumi_lora._kube._objects import PodResource, _read_as_dicts, as_dict, cluster_error

EndpointSliceResource = _read_as_dicts("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")
#: The label the EndpointSlice controller puts on every slice of a Service.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def get_pod(client: Client, namespace: str, name: str) -> PodEndpoint | None:
    """The pod as it is now, or None when it is gone."""
    try:
        return pod_from_object(as_dict(client.get(PodResource, name, namespace=namespace)))
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise cluster_error(f"reading pod {namespace}/{name}", exc) from exc


def patch_pod_status(client: Client, namespace: str, name: str, body: Mapping[str, Any]) -> bool:
    """A strategic merge patch of ``pods/NAME/status`` (the gate's condition, merged by type: the
    kubelet's conditions stay). False on 409 (a ``resourceVersion`` the pod has moved past) or
    404 (the pod is gone); a refusal (403: ``pulumi-lora rbac -n NS`` grants it) raises."""
    try:
        client.patch(
            Pod.Status, name, dict(body), namespace=namespace, patch_type=PatchType.STRATEGIC
        )
    except ApiError as exc:
        if exc.status.code in (404, 409):
            return False
        raise cluster_error(f"writing the readiness gate of pod {namespace}/{name}", exc) from exc
    return True


def list_endpoint_slices(client: Client, namespace: str, service: str) -> list[dict[str, Any]]:
    """The EndpointSlices of Service ``namespace/service``, as dicts."""
    try:
        listed = client.list(
            EndpointSliceResource, namespace=namespace, labels={SERVICE_NAME_LABEL: service}
        )
        return [as_dict(item) for item in listed]
    except ApiError as exc:
        raise cluster_error(f"listing the EndpointSlices of {namespace}/{service}", exc) from exc
