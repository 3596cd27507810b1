"""The scheduler's one decision on a single-node testbed: bind every new pod to its node.

The real ReplicaSet controller creates pods without ``spec.nodeName``; kube-scheduler would
pick a node and ``POST pods/NAME/binding``. The testbed has one node, so the choice is played
and the bind is the real request, sent as :data:`SCHEDULER_USER` (whom the apiserver's
bootstrap RBAC allows ``pods/binding``). The apiserver sets ``nodeName`` and the
``PodScheduled`` condition itself.
"""

from __future__ import annotations

from typing import Any

from pulumi_lora.testing.testbed._rest import KubeRest
from pulumi_lora.testing.testbed._workloads import NODE_NAME

__all__ = ["DEFAULT_SCHEDULER", "SCHEDULER_USER", "bind", "binding_for", "needs_binding"]

SCHEDULER_USER = "system:kube-scheduler"
"""The user kube-scheduler signs in as (bootstrap RBAC: ClusterRole ``system:kube-scheduler``)."""

DEFAULT_SCHEDULER = "default-scheduler"
"""``spec.schedulerName`` of every pod that names no other scheduler."""


def needs_binding(pod: dict[str, Any]) -> bool:
    """Whether kube-scheduler would bind this pod now: no node yet, not being deleted, and it
    asks for the default scheduler (pure)."""
    spec = pod.get("spec", {})
    return (
        not spec.get("nodeName")
        and not pod.get("metadata", {}).get("deletionTimestamp")
        and spec.get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
    )


def binding_for(pod: dict[str, Any], node: str = NODE_NAME) -> dict[str, Any]:
    """The ``v1.Binding`` kube-scheduler posts for a pod (pure); the UID guards against a pod
    replaced under the same name meanwhile."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def bind(rest: KubeRest, pod: dict[str, Any]) -> None:
    """POST the pod's binding; a pod already bound or gone (409, 404) needs nothing more."""
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding"
    rest.request("POST", path, body=binding_for(pod), allow=(404, 409))
