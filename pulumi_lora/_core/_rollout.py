"""The rolling swap's decisions (issue 54, items 3 and 5): which pods swap together, when a pod is
out of rotation (and back), and what a failed swap puts back. Pure; the provider drives them
(``_lifecycle._rolling``).

A swap (a ``path`` or ``source`` change) unloads the old revision and loads the new one. On a pod
that serves requests, the window between the two would meet requests, so a **gated** pod whose
gate is True (it is in rotation) swaps only once out of rotation: its gate False, its endpoint
not ready in every EndpointSlice of the Service, ``drain_seconds`` passed. Such pods go in waves
of ``max_unavailable``. Everything else runs at once: loads (nothing serves the adapter there
yet), keeps, pods out of rotation already (gate not True) and pods without the gate (nothing can
take them out of rotation: the README says what that costs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._core._reconcile import ActionKind, Desired, PodAction, PodOutcome


@dataclass(frozen=True)
class Rollout:
    """A plan's actions in the order they run: ``at_once`` together, then each wave in turn."""

    at_once: tuple[PodAction, ...]
    waves: tuple[tuple[PodAction, ...], ...] = ()


def in_rotation(pod: PodEndpoint) -> bool:
    """Pure: whether requests may reach ``pod`` through its Service: gated, with the gate True."""
    return pod.gated and (pod.gate or {}).get("status") == "True"


def rollout(
    actions: Sequence[PodAction], pods: Mapping[str, PodEndpoint], max_unavailable: int
) -> Rollout:
    """Pure: the swaps on gated pods in rotation go in waves of ``max_unavailable`` (pods in
    name order, as ``plan`` gives them); every other action runs at once."""
    rolling = [
        a
        for a in actions
        if a.kind is ActionKind.SWAP and a.pod in pods and in_rotation(pods[a.pod])
    ]
    at_once = tuple(a for a in actions if a not in rolling)
    size = max(1, max_unavailable)
    waves = tuple(tuple(rolling[i : i + size]) for i in range(0, len(rolling), size))
    return Rollout(at_once, waves)


# --- rotation, as the Service's EndpointSlices say ---------------------------------------------


class Rotation(StrEnum):
    """Where a pod stands in its Service's EndpointSlices."""

    IN = "in"  # listed ready in at least one slice: kube-proxy sends it requests
    OUT = "out"  # listed, ready in none
    ABSENT = "absent"  # in no slice (a Service that does not select it, an address not routed)


def rotation(slices: Sequence[Mapping[str, Any]], pod: PodEndpoint) -> Rotation:
    """Pure: ``pod``'s standing in ``slices`` (``discovery.k8s.io/v1`` objects), matched by its
    ``targetRef`` (the pod's name, and uid when the slice gives one) or, without one, its IP.
    An endpoint's ``ready`` absent counts as ready, as the API defines it."""
    listed = False
    for item in slices:
        for endpoint in item.get("endpoints") or ():
            ref = endpoint.get("targetRef") or {}
            if ref:
                mine = ref.get("kind", "Pod") == "Pod" and ref.get("name") == pod.name
                mine = mine and ref.get("uid", pod.uid) in (pod.uid, "")
            else:
                mine = bool(pod.ip) and pod.ip in (endpoint.get("addresses") or ())
            if not mine:
                continue
            listed = True
            if (endpoint.get("conditions") or {}).get("ready", True) is not False:
                return Rotation.IN
    return Rotation.OUT if listed else Rotation.ABSENT


# --- a failed swap, put back ---------------------------------------------------------------------


def failures(outcomes: Sequence[PodOutcome]) -> tuple[PodOutcome, ...]:
    """Pure: the pods where the swap failed (a pod that was not Ready is no failure)."""
    return tuple(o for o in outcomes if not o.loaded and not o.waiting)


def said(failed: Sequence[PodOutcome]) -> str:
    """Pure: where a swap failed and how, in SGLang's words (``pod NAME: words; ...``)."""
    return "; ".join(f"pod {o.pod}: {o.error or o.reason}" for o in failed)


def rollback_message(
    name: str,
    new_path: str,
    old_path: str,
    failure: str,
    restored: Sequence[PodOutcome],
    *,
    unsettled: Sequence[str] = (),
) -> str:
    """Pure: what a user reads when a swap was rolled back: where it failed (``failure``, see
    :func:`said`); where the old revision serves again; where it could not be put back; and
    the pods where a call that got no answer may still land (``unsettled``)."""
    back = sorted(o.pod for o in restored if o.loaded and o.path in (old_path, None))
    lost = sorted(
        f"{o.pod} ({o.error or o.reason})" for o in restored if not o.loaded and not o.waiting
    )
    text = f"swapping {name} to {new_path!r} failed ({failure}); rolled back to {old_path!r}"
    if back:
        text += f": it serves again on {', '.join(back)}"
    if lost:
        text += f"; NOT restored on {', '.join(lost)} (the re-sync loop retries it)"
    if unsettled:
        text += (
            f"; on {', '.join(sorted(unsettled))} a call got no answer and may still land: if it "
            "does, the re-sync loop (or the next `pulumi up`) puts the old revision back"
        )
    return text


def replaced(spec: Mapping[str, Any], desired: Desired) -> Desired | None:
    """Pure: the revision a swap to ``desired`` replaces, from the CR's spec before the change
    (same adapter, another path), with ``desired``'s settings; None when nothing is replaced."""
    path = spec.get("path")
    if not path or spec.get("name") != desired.name or path == desired.path:
        return None
    return Desired(desired.name, str(path), desired.pinned, desired.smoke)
