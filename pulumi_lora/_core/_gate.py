"""The readiness gate's decision: what ``pulumi-lora.dev/adapters-loaded`` should say of one pod
(issue 54). Pure, shared by the re-sync loop and the provider; their writes sit at the edges.

The kubelet turns a gated pod Ready only while the gate's condition is True, so the condition
says whether requests for the declared adapters may reach the pod:

- **False as soon as the container stops** (``ContainersReady`` False) **or is a new one** (its
  id differs from the one the True was written for): a restarted SGLang has lost every adapter,
  and must never turn Ready on a stale True;
- **False while the pod swaps** an adapter's revision (the rolling swap drains it first); while
  a swap holds it (``Swapping``), no other False replaces the swapper's words;
- **True once every required adapter is served at its declared path** on the pod; the message
  names the container the loads were made on;
- **no True → False for a merely missing adapter** on a pod that serves: a newly declared
  adapter (nobody sends it requests yet), or one unloaded out of band (the loop heals it), must
  not take serving pods out of rotation;
- False otherwise, naming what is missing.

``required`` holds the *established* adapters of the pod's InferenceService: those whose CR
recorded a load (``status.loadedPath``), so a new CR, or one whose path never loaded, never
holds new pods unready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_lora._core._llmkube import GATE_CONDITION, PodEndpoint

__all__ = ["GATE_CONDITION", "GateVerdict", "condition_patch", "established", "verdict"]

ADAPTERS_LOADED = "AdaptersLoaded"
ADAPTERS_LOADING = "AdaptersLoading"
CONTAINER_STOPPED = "ContainerStopped"
SWAPPING = "Swapping"
#: How much of a container id a message shows (enough to tell two apart).
_ID_CHARS = 12


@dataclass(frozen=True)
class GateVerdict:
    """What the gate's condition should say of one pod."""

    status: bool
    reason: str
    message: str


def established(crs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pure: adapter name → path of the CRs whose adapter was loaded once (``status.loadedPath``
    set), at their declared path: what a pod of their InferenceService must serve to be Ready."""
    found: dict[str, str] = {}
    for cr in crs:
        spec = cr.get("spec") or {}
        status = cr.get("status") or {}
        if (cr.get("metadata") or {}).get("deletionTimestamp") or not status.get("loadedPath"):
            continue
        if spec.get("name") and spec.get("path"):
            found[str(spec["name"])] = str(spec["path"])
    return found


def _short(container_id: str) -> str:
    return container_id.rpartition("://")[2][:_ID_CHARS]


def verdict(
    pod: PodEndpoint,
    required: Mapping[str, str],
    served: Mapping[str, str] | None,
    *,
    swapping: str | None = None,
) -> GateVerdict | None:
    """Pure: what the gate should say of ``pod`` given the adapters ``required`` of it and those
    it ``served`` (name → path from its ``/v1/models``; None: not read), or None when the
    condition it has already says it (no write). ``swapping`` names the adapter the pod is
    swapping, if it is."""
    current = pod.gate or {}
    was_true = current.get("status") == "True"
    same_container = bool(pod.container_id) and _short(pod.container_id) in str(
        current.get("message") or ""
    )
    found: GateVerdict | None
    if not pod.ready:  # a gated pod's ``ready`` is ContainersReady
        found = GateVerdict(False, CONTAINER_STOPPED, "the sglang container is not ready")
    elif was_true and not same_container:
        found = GateVerdict(
            False, CONTAINER_STOPPED, f"a new sglang container ({_short(pod.container_id)})"
        )
    elif swapping is not None:
        found = GateVerdict(False, SWAPPING, f"swapping {swapping}")
    elif served is None:
        return None  # unread: nothing is known that would change what it says
    else:
        missing = sorted(n for n, p in required.items() if served.get(n) != p)
        if not missing:
            count = len(required)
            found = GateVerdict(
                True,
                ADAPTERS_LOADED,
                f"{count} adapter{'s' if count != 1 else ''} loaded "
                f"(container {_short(pod.container_id)})",
            )
        elif was_true:
            return None  # serving: a missing adapter is healed, not a reason to stop serving
        else:
            shown = ", ".join(f"{n} ({required[n]})" for n in missing)
            found = GateVerdict(
                False,
                ADAPTERS_LOADING,
                f"waiting for {len(missing)} of {len(required)} adapters: {shown}",
            )
    said = (current.get("status"), current.get("reason"), current.get("message"))
    if said == ("True" if found.status else "False", found.reason, found.message):
        return None
    if not found.status and said[:2] == ("False", SWAPPING) and swapping is None:
        return None  # a swap (the provider's, or the loop's) holds it out: its words stay
    return found


def condition_patch(
    found: GateVerdict,
    now: str,
    current: Mapping[str, Any] | None = None,
    resource_version: str = "",
) -> dict[str, Any]:
    """Pure: the ``pods/status`` strategic merge patch that writes ``found`` over ``current``
    (the condition the pod has), its transition time ``now`` only when the status changes. A
    True carries the pod's ``resourceVersion`` (the object the loads were decided on), so it
    can never land after a change its writer did not see (the apiserver answers 409)."""
    status = "True" if found.status else "False"
    if current and current.get("status") == status and current.get("lastTransitionTime"):
        now = str(current["lastTransitionTime"])
    body: dict[str, Any] = {
        "status": {
            "conditions": [
                {
                    "type": GATE_CONDITION,
                    "status": status,
                    "reason": found.reason,
                    "message": found.message,
                    "lastTransitionTime": now,
                }
            ]
        }
    }
    if found.status and resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return body
