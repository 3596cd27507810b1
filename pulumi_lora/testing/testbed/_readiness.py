"""The played kubelet's ``Ready``, as the kubelet computes it: from ``ContainersReady`` and every
readiness gate (``GeneratePodReadyCondition``, ``pkg/kubelet/status/generate.go`` at v1.36).

Pure. A pod whose containers are ready is Ready only when each condition its
``spec.readinessGates`` names is present and True; otherwise Ready is False with reason
``ReadinessGatesNotReady`` and the kubelet's own message. The kubelet owns a fixed set of
condition types and keeps every other writer's conditions (``kubelet_pods.go``
``generateAPIPodStatus``); a gate's condition changed by someone else makes it compute Ready
again (``NeedToReconcilePodReadiness``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["KUBELET_CONDITIONS", "gates_of", "needs_reconcile", "pod_ready"]

#: The condition types the kubelet writes (``pkg/kubelet/types/pod_status.go``); the rest are
#: other writers', kept as they are.
KUBELET_CONDITIONS = frozenset(
    {"PodScheduled", "Ready", "Initialized", "ContainersReady", "PodReadyToStartContainers"}
)
#: The kubelet's reasons (``generate.go``).
CONTAINERS_NOT_READY = "ContainersNotReady"
GATES_NOT_READY = "ReadinessGatesNotReady"


def gates_of(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Pure: the condition types ``spec.readinessGates`` names (fixed at the pod's creation)."""
    gates = (pod.get("spec") or {}).get("readinessGates") or ()
    return tuple(str(g.get("conditionType", "")) for g in gates if g.get("conditionType"))


def pod_ready(
    containers_ready: bool,
    container: str,
    gates: Sequence[str],
    conditions: Sequence[Mapping[str, Any]],
) -> tuple[str, str, str]:
    """Pure: ``(status, reason, message)`` of the pod's Ready condition, in the kubelet's words.

    ``conditions`` are the pod's current ones (only the gates' are read)."""
    if not containers_ready:
        return "False", CONTAINERS_NOT_READY, f"containers with unready status: [{container}]"
    by_type = {str(c.get("type")): c for c in conditions}
    unready = []
    for gate in gates:
        found = by_type.get(gate)
        if found is None:
            unready.append(
                f'corresponding condition of pod readiness gate "{gate}" does not exist.'
            )
        elif found.get("status") != "True":
            unready.append(
                f'the status of pod readiness gate "{gate}" is not "True", '
                f"but {found.get('status')}"
            )
    if unready:
        return "False", GATES_NOT_READY, ", ".join(unready)
    return "True", "", ""


def needs_reconcile(pod: Mapping[str, Any], containers_ready: bool, container: str) -> bool:
    """Pure: whether a gated pod's stored Ready differs from what its conditions now make it
    (another writer changed a gate's condition): the kubelet then writes Ready again."""
    gates = gates_of(pod)
    if not gates:
        return False
    conditions = (pod.get("status") or {}).get("conditions") or ()
    status, _reason, message = pod_ready(containers_ready, container, gates, conditions)
    stored = next((c for c in conditions if c.get("type") == "Ready"), None)
    if stored is None:
        return True
    return stored.get("status") != status or (stored.get("message") or "") != message
