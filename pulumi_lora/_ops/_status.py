"""``pulumi-lora status``'s verdicts, pure: one LoRAAdapter CR and what each pod serves → a line.

Ok, drift, error or deleting; and the pods the readiness gate holds unready (:func:`held_pods`,
doctor's too). No I/O and no clock (``now`` is passed in); ``_gather`` does the reading.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from msgspec import ValidationError

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._llmkube import GATE_CONDITION, PodEndpoint
from pulumi_lora._core._readback import read_annotations
from pulumi_lora._models import (
    LLMKUBE_FINALIZER,
    UNLOAD_FINALIZER,
    ConditionKind,
    ConditionStatus,
    LoRAAdapterStatus,
    Transport,
    written_by_llmkube,
)

__all__ = [
    "COEXISTENCE_FIX",
    "HELD_AFTER",
    "HELD_RUNBOOK",
    "AdapterLine",
    "AdapterVerdict",
    "HeldPod",
    "PodLine",
    "ServedReport",
    "ServedState",
    "StatusReport",
    "adapter_line",
    "args_from_cr",
    "deleting_line",
    "held_pods",
    "llmkube_signs",
    "loop_verdicts",
    "pod_line",
    "with_gates",
]

#: Seconds a gated pod's containers may be ready while its gate is not True before ``status``
#: and ``doctor`` report it held (the loop loads a pod's adapters in seconds; the alert
#: ``PulumiLoRAPodHeldUnready`` waits 5 minutes).
HELD_AFTER = 120
#: The alert's runbook entry.
HELD_RUNBOOK = "docs/operations.md#pulumilorapodheldunready"


class ServedReport(Protocol):
    """What one pod serves, as observed (``_lifecycle.PodReport`` is one): read-only fields."""

    @property
    def pod(self) -> str:
        """The pod's name."""

    @property
    def ready(self) -> bool:
        """Whether the pod is Ready."""

    @property
    def loaded(self) -> bool:
        """Whether it serves the adapter (at any path)."""

    @property
    def path(self) -> str | None:
        """The path it serves the adapter from, if it does."""

    @property
    def error(self) -> str:
        """Why its ``/v1/models`` could not be read ("" when it could)."""


class ServedState(StrEnum):
    """What one pod of the target serves, measured against the CR's declaration."""

    OK = "ok"  # Ready, serves the adapter at the declared path
    MISSING = "missing"  # Ready and reachable, adapter not loaded (drift)
    WRONG_PATH = "wrong-path"  # Ready, serves the adapter at another path (drift)
    UNREACHABLE = "unreachable"  # Ready, but its /v1/models could not be read (error)
    NOT_READY = "not-ready"  # not Ready: not counted, nothing is expected of it yet
    STILL_SERVED = "still-served"  # CR being deleted: Ready, still serves the adapter
    UNLOADED = "unloaded"  # CR being deleted: Ready, no longer serves the adapter


class AdapterVerdict(StrEnum):
    """One CR's verdict; the command's exit code is 0 only when every CR is ``ok``."""

    OK = "ok"  # loaded at the declared path on every Ready pod
    DRIFT = "drift"  # some Ready pod lacks it or serves another path
    ERROR = "error"  # the truth could not be read (target, Secret, pod unreachable, no Ready pod)
    DELETING = "deleting"  # being deleted (a failed destroy holds it until every pod unloaded)


@dataclass(frozen=True)
class PodLine:
    """One pod's line under a CR."""

    pod: str
    ready: bool
    state: ServedState
    path: str | None = None  # the path the pod serves the adapter from, if it does
    error: str = ""  # why the state is not ok, in words
    gated: bool = False  # the pod carries the readiness gate (its ``ready``: ContainersReady)


@dataclass(frozen=True)
class AdapterLine:
    """One LoRAAdapter CR with its verdict and the pods it was measured on."""

    namespace: str
    name: str
    adapter: str
    path: str
    target_namespace: str
    target_name: str
    transport: Transport
    observed: str  # "pods" (each pod's /v1/models) or "conditions" (the CR's status only)
    verdict: AdapterVerdict
    last_loaded_at: str | None = None
    error: str = ""
    pods: tuple[PodLine, ...] = ()
    llmkube: str = ""  # signs that LLMKube's own LoRA controller acts on the CR (llmkube_signs)
    not_served_since: str | None = None  # the loop's Loaded=False, since (loop_verdicts)
    capacity: str = ""  # the loop's OverCapacity=True message (loop_verdicts)

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md)."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "adapter": self.adapter,
            "path": self.path,
            "target": {"namespace": self.target_namespace, "name": self.target_name},
            "transport": str(self.transport),
            "observed": self.observed,
            "verdict": self.verdict.value,
            "last_loaded_at": self.last_loaded_at,
            "error": self.error,
            "llmkube": self.llmkube,
            "not_served_since": self.not_served_since,
            "capacity": self.capacity,
            "pods": [
                {
                    "pod": p.pod,
                    "ready": p.ready,
                    "state": p.state.value,
                    "loaded": p.state in (ServedState.OK, ServedState.STILL_SERVED),
                    "path": p.path,
                    "error": p.error,
                    "gated": p.gated,
                }
                for p in self.pods
            ],
        }


@dataclass(frozen=True)
class HeldPod:
    """A gated pod whose containers are ready but whose gate is not True, past ``HELD_AFTER``."""

    namespace: str
    pod: str
    inference_service: str
    since: str  # UTC, the later of the gate's lastTransitionTime and the container's start
    seconds: int  # how long, until the ``now`` it was judged at
    message: str  # the gate's message (it names what is missing)

    @property
    def held_for(self) -> str:
        """How long, in words: ``7 min``, ``3 h``."""
        minutes = self.seconds // 60
        return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h"

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md): the fields."""
        return asdict(self)


@dataclass(frozen=True)
class StatusReport:
    """Every CR looked at, in namespace/name order."""

    adapters: tuple[AdapterLine, ...]
    held: tuple[HeldPod, ...] = ()  # pods of their targets the readiness gate holds unready

    @property
    def ok(self) -> bool:
        """Whether every declared adapter is loaded on every Ready pod of its target."""
        return all(a.verdict is AdapterVerdict.OK for a in self.adapters)

    @property
    def exit_code(self) -> int:
        """0 when all is ok, 1 when drift or errors were found (2 is for usage/cluster errors)."""
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        """How many CRs have each verdict, plus the total."""
        counts = {v.value: 0 for v in AdapterVerdict}
        for line in self.adapters:
            counts[line.verdict.value] += 1
        return {"adapters": len(self.adapters), **counts}

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md)."""
        return {
            "ok": self.ok,
            "summary": self.counts(),
            "adapters": [a.to_json() for a in self.adapters],
            "held": [h.to_json() for h in self.held],
        }


def args_from_cr(cr: Mapping[str, Any], transport: Transport | None = None) -> AdapterArgs:
    """Pure: the resource arguments a CR stands for, so ``observe`` can read it as refresh does.

    The transport and API key Secret come from the CR's ``pulumi-lora.dev/*`` annotations (a CR
    made by someone else reads as ``direct``, unkeyed); ``transport`` overrides the recorded one.
    Raises msgspec's ``ValidationError`` for a CR whose spec breaks the CRD's rules.
    """
    meta = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    notes = read_annotations(meta.get("annotations"))
    ref = spec.get("inferenceServiceRef") or {}
    values: dict[str, Any] = {
        "adapter_name": spec.get("name"),
        "path": spec.get("path"),
        "inference_service": ref.get("name"),
        "inference_service_namespace": ref.get("namespace") or None,
        "namespace": meta.get("namespace"),
        "resource_name": meta.get("name"),
        "transport": transport or notes.transport or Transport.DIRECT,
        "api_key_secret_name": notes.api_key_secret[0] if notes.api_key_secret else None,
    }
    if notes.api_key_secret:
        values["api_key_secret_key"] = notes.api_key_secret[1]
    if found := AdapterArgs.failures(values):  # every broken rule, in check's words
        raise ValidationError("; ".join(message for _input, message in found))
    return AdapterArgs.parse(values)


def pod_line(report: ServedReport, declared_path: str) -> PodLine:
    """Pure: one pod's state against the declared path."""
    if not report.ready:
        return PodLine(report.pod, False, ServedState.NOT_READY, report.path)
    if report.error:
        return PodLine(report.pod, True, ServedState.UNREACHABLE, None, report.error)
    if not report.loaded:
        return PodLine(report.pod, True, ServedState.MISSING, None, "not loaded")
    if report.path != declared_path:
        return PodLine(
            report.pod,
            True,
            ServedState.WRONG_PATH,
            report.path,
            f"serves path {report.path!r}, declared {declared_path!r}",
        )
    return PodLine(report.pod, True, ServedState.OK, report.path)


def adapter_line(
    cr: Mapping[str, Any],
    pods: Sequence[ServedReport] | None,
    *,
    transport: Transport = Transport.DIRECT,
    error: str = "",
) -> AdapterLine:
    """Pure: one CR's verdict from its pods (``pods`` None: not observed, judge its conditions).

    ``error`` is a problem found while reading (the target, a Secret, a CR that can't be read);
    it makes the verdict ``error``. With pods observed, any unreachable Ready pod is an error,
    any Ready pod missing the adapter or serving another path is drift, and no Ready pod at all
    is an error (the adapter is served nowhere). Not observed (the delegated transport: only the
    in-cluster loop talks to the pods), the CR's ``Loaded`` condition for its current generation
    is the verdict.
    """
    meta = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    ref = spec.get("inferenceServiceRef") or {}
    namespace = str(meta.get("namespace", ""))
    declared = str(spec.get("path", ""))
    last_loaded = _status(cr).get("lastLoadedAt")
    line = AdapterLine(
        namespace=namespace,
        name=str(meta.get("name", "")),
        adapter=str(spec.get("name", "")),
        path=declared,
        target_namespace=str(ref.get("namespace") or namespace),
        target_name=str(ref.get("name", "")),
        transport=transport,
        observed="pods" if pods is not None else "conditions",
        verdict=AdapterVerdict.OK,
        last_loaded_at=str(last_loaded) if last_loaded else None,
        pods=tuple(pod_line(p, declared) for p in pods or ()),
        llmkube=llmkube_signs(cr),
    )
    since, capacity = loop_verdicts(cr)
    line = replace(line, not_served_since=since, capacity=capacity)
    if error:
        return replace(line, verdict=AdapterVerdict.ERROR, error=error)
    if meta.get("deletionTimestamp"):
        return deleting_line(line, cr)
    if pods is None:
        verdict, problem = _verdict_from_conditions(cr)
        return replace(line, verdict=verdict, error=problem)
    states = [p.state for p in line.pods]
    drifted = sum(1 for s in states if s in (ServedState.MISSING, ServedState.WRONG_PATH))
    ready = sum(1 for p in line.pods if p.ready)
    if ServedState.UNREACHABLE in states:
        return replace(
            line, verdict=AdapterVerdict.ERROR, error="some Ready pods could not be read"
        )
    if not ready:
        problem = "no Ready pods: the adapter is served nowhere" if states else "no pods found"
        return replace(line, verdict=AdapterVerdict.ERROR, error=problem)
    if drifted:
        return replace(
            line, verdict=AdapterVerdict.DRIFT, error=f"drift on {drifted}/{ready} Ready pods"
        )
    return line


def with_gates(line: AdapterLine, gated: Collection[str]) -> AdapterLine:
    """Pure: ``line`` with its pods named in ``gated`` (they carry the readiness gate) marked."""
    return replace(line, pods=tuple(replace(p, gated=p.pod in gated) for p in line.pods))


def held_pods(pods: Iterable[PodEndpoint], now: datetime) -> tuple[HeldPod, ...]:
    """Pure: the gated pods whose containers are ready while their gate (``GATE_CONDITION``) is
    not True, for more than ``HELD_AFTER`` seconds before ``now``: since the later of the gate's
    ``lastTransitionTime`` and the sglang container's start (a gate turned False when the old
    container stopped holds the new one only from its start). A pod with no gate condition yet
    is held since its container started; one where neither time is known is not judged."""
    held = []
    for pod in pods:
        gate = pod.gate or {}
        if not (pod.gated and pod.ready) or gate.get("status") == "True":
            continue
        times = [t for t in (_time(gate.get("lastTransitionTime")), _time(pod.started_at)) if t]
        if not times:
            continue
        since = max(times)
        seconds = int((now - since).total_seconds())
        if seconds <= HELD_AFTER:
            continue
        message = str(gate.get("message") or "") or (
            f"no {GATE_CONDITION} condition yet: no re-sync loop has written it (is one running "
            "for this namespace, with patch on pods/status?)"
        )
        at = since.strftime("%Y-%m-%dT%H:%M:%SZ")
        held.append(HeldPod(pod.namespace, pod.name, pod.service, at, seconds, message))
    return tuple(sorted(held, key=lambda h: (h.namespace, h.pod)))


def _time(text: object) -> datetime | None:
    """An RFC 3339 time as an aware UTC datetime, else None."""
    try:
        found = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return (found if found.tzinfo else found.replace(tzinfo=UTC)).astimezone(UTC)


def deleting_line(line: AdapterLine, cr: Mapping[str, Any]) -> AdapterLine:
    """Pure: the line of a CR being deleted: which Ready pods still serve its adapter (whatever
    the path) and what lets it go. Held by :data:`UNLOAD_FINALIZER`, it is what a failed
    ``pulumi destroy`` left (docs/operations.md, ``pulumi-lora finish-delete``)."""
    meta = cr.get("metadata") or {}
    held = UNLOAD_FINALIZER in (meta.get("finalizers") or [])
    pods = tuple(
        p
        if p.state in (ServedState.NOT_READY, ServedState.UNREACHABLE)
        else replace(p, state=ServedState.STILL_SERVED, error="still serves it")
        if p.state in (ServedState.OK, ServedState.WRONG_PATH)
        else replace(p, state=ServedState.UNLOADED, error="")
        for p in line.pods
    )
    serving = [p.pod for p in pods if p.state is ServedState.STILL_SERVED]
    finish = f"`pulumi-lora finish-delete {line.namespace}/{line.name}`"
    if not held:
        problem = "being deleted"
    elif serving:
        problem = (
            f"being deleted, held ({UNLOAD_FINALIZER}) while Ready pods still serve it: "
            f"{', '.join(serving)}; once they answer, `pulumi destroy` again or {finish}"
        )
    elif line.observed == "conditions":
        problem = f"being deleted, held ({UNLOAD_FINALIZER}): {finish} lets it go"
    else:
        problem = (
            f"being deleted, held ({UNLOAD_FINALIZER}); no Ready pod serves it any more: "
            f"{finish} lets it go"
        )
    return replace(line, verdict=AdapterVerdict.DELETING, error=problem, pods=pods)


COEXISTENCE_FIX = (
    "apply pulumi-lora's coexistence policy, which holds LLMKube's LoRA controller off the CRs "
    "pulumi-lora serves: `pulumi-lora coexistence-policy | kubectl apply -f -` (the re-sync "
    "loop's manifests include it; --llmkube-user if LLMKube runs under another ServiceAccount)"
)
"""What to do when LLMKube's own LoRA controller is seen acting on pulumi-lora's CRs."""


def llmkube_signs(cr: Mapping[str, Any]) -> str:
    """Pure: the signs that LLMKube's own LoRA controller acts on this CR, in words ("" if none).

    Its finalizer on the CR, and the conditions it wrote (``written_by_llmkube``). The pods stay
    the truth for the verdict; these say why ``kubectl get lora`` may disagree with it.
    """
    signs = []
    if LLMKUBE_FINALIZER in ((cr.get("metadata") or {}).get("finalizers") or []):
        signs.append(f"its finalizer {LLMKUBE_FINALIZER}")
    try:
        conditions = LoRAAdapterStatus.parse(_status(cr)).conditions or []
    except ValidationError:
        conditions = []
    written = [
        f"{c.type}={c.status.value} ({c.reason})" for c in conditions if written_by_llmkube(c)
    ]
    if written:
        signs.append("conditions it wrote: " + ", ".join(written))
    return "; ".join(signs)


def loop_verdicts(cr: Mapping[str, Any]) -> tuple[str | None, str]:
    """Pure: what the re-sync loop's alerts say about this CR, from the conditions it wrote.

    ``(not served since, capacity)``: the ``lastTransitionTime`` of a ``Loaded=False`` the loop
    wrote for the CR's current generation (the moment it stopped being served on every Ready
    pod; the ``PulumiLoRAAdapterNotServed`` alert), and the ``OverCapacity=True`` message (the
    server's ``--max-loaded-loras`` and what it evicted; ``PulumiLoRACapacityExhausted``).
    """
    generation = int((cr.get("metadata") or {}).get("generation", 1))
    try:
        conditions = LoRAAdapterStatus.parse(_status(cr)).conditions or []
    except ValidationError:
        return None, ""
    since, capacity = None, ""
    for condition in conditions:
        if written_by_llmkube(condition):
            continue
        current = condition.observed_generation in (None, generation)
        if (
            condition.type == ConditionKind.LOADED.value
            and condition.status is ConditionStatus.FALSE
            and current
        ):
            since = condition.last_transition_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if condition.type == ConditionKind.OVER_CAPACITY.value and (
            condition.status is ConditionStatus.TRUE
        ):
            capacity = condition.message
    return since, capacity


def _status(cr: Mapping[str, Any]) -> Mapping[str, Any]:
    status = cr.get("status")
    return status if isinstance(status, Mapping) else {}


def _verdict_from_conditions(cr: Mapping[str, Any]) -> tuple[AdapterVerdict, str]:
    """Pure: ok when ``Loaded`` is True for the CR's current generation, else drift (why)."""
    generation = int((cr.get("metadata") or {}).get("generation", 1))
    try:
        conditions = LoRAAdapterStatus.parse(_status(cr)).conditions or []
    except ValidationError:
        return AdapterVerdict.ERROR, "the CR's status cannot be read"
    loaded = next((c for c in conditions if c.type == ConditionKind.LOADED.value), None)
    if loaded is not None and written_by_llmkube(loaded):
        return (
            AdapterVerdict.ERROR,
            "the Loaded condition is LLMKube's LoRA controller's, not the re-sync loop's: "
            + COEXISTENCE_FIX,
        )
    if loaded is None:
        return AdapterVerdict.DRIFT, "no Loaded condition yet (is the re-sync loop running?)"
    if loaded.observed_generation is not None and loaded.observed_generation != generation:
        return (
            AdapterVerdict.DRIFT,
            f"the Loaded condition is for generation {loaded.observed_generation}, the spec is "
            f"at {generation} (is the re-sync loop running?)",
        )
    if loaded.status is not ConditionStatus.TRUE:
        return AdapterVerdict.DRIFT, f"Loaded={loaded.status.value} ({loaded.reason}): " + (
            loaded.message or "no message"
        )
    return AdapterVerdict.OK, ""
