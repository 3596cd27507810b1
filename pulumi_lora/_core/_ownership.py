"""Whose pod is it: the controller chain from a pod up to its InferenceService.

A label proves nothing; the provider and the loop act only on pods whose ``controller: true``
ownerReferences, followed by UID, reach the target. No I/O library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_lora._models import GROUP, ISVC_KIND

#: API group of ReplicaSets and Deployments.
APPS_GROUP = "apps"
#: Whether the provider and the loop require the chain (off: every labelled pod is trusted).
REQUIRE_CONTROLLER_CHAIN = True


@dataclass(frozen=True)
class ControllerRef:
    """The ``controller: true`` ownerReference of an object."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return self.api_version.rpartition("/")[0]

    def describe(self) -> str:
        """``Kind name`` for messages."""
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Owned:
    """A ReplicaSet or Deployment as the chain needs it: identity and its own controller."""

    namespace: str
    name: str
    uid: str
    controller: ControllerRef | None


def controller_of(obj: Mapping[str, Any]) -> ControllerRef | None:
    """Pure: the object's ``controller: true`` ownerReference (the first; the apiserver allows
    only one), or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") is True:
            return ControllerRef(
                api_version=str(ref.get("apiVersion", "")),
                kind=str(ref.get("kind", "")),
                name=str(ref.get("name", "")),
                uid=str(ref.get("uid", "")),
            )
    return None


def owned_from_object(obj: Mapping[str, Any]) -> Owned:
    """Pure: a ReplicaSet or Deployment object as :class:`Owned`."""
    meta = obj.get("metadata") or {}
    return Owned(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        controller=controller_of(obj),
    )


def by_uid(objects: Any) -> dict[str, Owned]:
    """Pure: ReplicaSet or Deployment objects (dicts) keyed by UID."""
    found = (owned_from_object(o) for o in objects)
    return {o.uid: o for o in found if o.uid}


def controller_chain(
    pod_namespace: str,
    pod_controller: ControllerRef | None,
    replicasets_by_uid: Mapping[str, Owned],
    deployments_by_uid: Mapping[str, Owned],
    isvc_uid: str,
) -> str | None:
    """Pure: None when the pod's controller chain ends at the InferenceService ``isvc_uid``;
    else why the pod is not trusted (a phrase that follows "the pod is ..." / "pod X: ...").

    Owners are looked up by UID among the ReplicaSets and Deployments given (those of the pod's
    namespace labelled as the InferenceService's); one in another namespace counts as missing,
    as ownerReferences never cross namespaces.
    """
    if not isvc_uid:
        return "the InferenceService's UID is unknown"
    if pod_controller is None:
        return "has no controller (no ownerReference with controller: true)"
    if pod_controller.kind != "ReplicaSet" or pod_controller.group != APPS_GROUP:
        return f"is controlled by {pod_controller.describe()}, not by a ReplicaSet"
    rs = replicasets_by_uid.get(pod_controller.uid)
    if rs is None or rs.namespace != pod_namespace:
        return (
            f"is controlled by ReplicaSet {pod_controller.name} (uid {pod_controller.uid}), "
            "which is not among the InferenceService's ReplicaSets"
        )
    rs_controller = rs.controller
    if rs_controller is None:
        return f"is controlled by ReplicaSet {rs.name}, which has no controller"
    if rs_controller.kind != "Deployment" or rs_controller.group != APPS_GROUP:
        return (
            f"is controlled by ReplicaSet {rs.name}, whose controller "
            f"{rs_controller.describe()} is not a Deployment"
        )
    deployment = deployments_by_uid.get(rs_controller.uid)
    if deployment is None or deployment.namespace != pod_namespace:
        return (
            f"is controlled by ReplicaSet {rs.name}, whose Deployment {rs_controller.name} "
            f"(uid {rs_controller.uid}) is not among the InferenceService's Deployments"
        )
    top = deployment.controller
    if top is None:
        return f"belongs to Deployment {deployment.name}, which has no controller"
    if top.kind != ISVC_KIND or top.group != GROUP:
        return (
            f"belongs to Deployment {deployment.name}, controlled by {top.describe()}, "
            "not by an InferenceService"
        )
    if top.uid != isvc_uid:
        return (
            f"belongs to Deployment {deployment.name}, controlled by InferenceService "
            f"{top.name} (uid {top.uid}), not the target (uid {isvc_uid})"
        )
    return None


#: How :func:`controller_chain` says an owner was not among those given (it may be on its way).
_MISSING = "is not among the InferenceService's"


def awaits_owner(why: str) -> bool:
    """Pure: whether a verdict of :func:`controller_chain` is only that a ReplicaSet or
    Deployment is unknown (a watch may not have delivered it yet), not a wrong link."""
    return _MISSING in why


#: Reason of the Warning Event naming a labelled pod outside its target's controller chain (the
#: provider's and the loop's alike).
UNTRUSTED_EVENT = "UntrustedPodIgnored"


def untrusted_message(service: str, untrusted: Mapping[str, str], limit: int = 10) -> str:
    """Pure: one sentence naming the labelled pods outside the chain, and why (for conditions
    and Events)."""
    if not untrusted:
        return ""
    items = sorted(untrusted.items())
    shown = "; ".join(f"pod {name} {why}" for name, why in items[:limit])
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return (
        f"ignored {len(items)} pod{'s' if len(items) > 1 else ''} labelled "
        f"inference.llmkube.dev/service={service} that the InferenceService does not control "
        f"(no request, no API key): {shown}{more}"
    )
