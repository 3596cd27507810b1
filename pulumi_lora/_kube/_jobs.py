"""Kubernetes Jobs, the calls the staging step makes: create (or find), read, their pods, delete.

Plain dicts; errors become ``ClusterError`` naming the Job. 429 and 503 are retried below
(``_http._retry``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError, Client
from lightkube.generic_resource import GenericNamespacedResource, create_api_info
from lightkube.types import CascadeType

from pulumi_lora._kube._objects import PodResource, as_dict, cluster_error

__all__ = ["JOB_NAME_LABEL", "JobResource", "create_job", "delete_job", "get_job", "job_pods"]

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""The label the Job controller puts on each of a Job's pods (Kubernetes 1.27 and later)."""


class JobResource(GenericNamespacedResource):
    """``batch/v1`` Jobs as plain dicts (lightkube's registry keeps its typed ``Job``)."""

    _api_info = create_api_info(
        "batch", "v1", "Job", "jobs", verbs=["post", "get", "list", "delete"]
    )


JobResource.__name__ = JobResource.__qualname__ = "Job"


def create_job(client: Client, manifest: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """Create the Job, or find the one of that name: ``(job, created)``."""
    meta = manifest["metadata"]
    where = f"Job {meta['namespace']}/{meta['name']}"
    try:
        made = client.create(JobResource.from_dict(dict(manifest)), namespace=meta["namespace"])
    except ApiError as exc:
        if exc.status.code != 409:
            raise cluster_error(f"creating {where}", exc) from exc
    else:
        return as_dict(made), True
    found = get_job(client, meta["namespace"], meta["name"])
    if found is None:  # deleted between the two calls: the caller creates it again
        return {}, False
    return found, False


def get_job(client: Client, namespace: str, name: str) -> dict[str, Any] | None:
    """The Job, or ``None`` when there is none."""
    try:
        return as_dict(client.get(JobResource, name, namespace=namespace))
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise cluster_error(f"reading Job {namespace}/{name}", exc) from exc


def job_pods(client: Client, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Job's pods (its controller's label), oldest first."""
    try:
        found = [
            as_dict(p)
            for p in client.list(PodResource, namespace=namespace, labels={JOB_NAME_LABEL: name})
        ]
    except ApiError as exc:
        raise cluster_error(f"listing the pods of Job {namespace}/{name}", exc) from exc
    return sorted(found, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")))


def delete_job(client: Client, namespace: str, name: str) -> None:
    """Delete the Job and its pods (background propagation); gone already is fine."""
    try:
        client.delete(JobResource, name, namespace=namespace, cascade=CascadeType.BACKGROUND)
    except ApiError as exc:
        if exc.status.code != 404:
            raise cluster_error(f"deleting Job {namespace}/{name}", exc) from exc
