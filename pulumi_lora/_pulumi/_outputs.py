"""The resource's outputs: a lifecycle state as Pulumi properties, and the inputs read back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import ValidationError

from pulumi_lora import _lifecycle as lifecycle
from pulumi_lora._args import AdapterArgs
from pulumi_lora._models import Condition, ConditionKind
from pulumi_lora._pulumi._properties import (
    ECHOED,
    INPUT_KEYS,
    UNKNOWN,
)
from pulumi_lora._staging._errors import SourceRefused
from pulumi_lora._staging._source import content_key, declared_request


def outputs(args: AdapterArgs, state: lifecycle.AdapterState) -> dict[str, Any]:
    """The resource's outputs: the inputs echoed (live where refresh saw them) plus the truth.

    Inputs are echoed when they carry something: the identity always, a setting only when it is
    not its default (``diff`` and ``read`` apply the defaults again), nothing that is unset.
    """
    defaults = AdapterArgs.defaults()
    outs: dict[str, Any] = {
        k: v
        for k, v in args.to_dict().items()
        if v is not None and (k in ECHOED or k not in defaults or v != defaults[k])
    }
    outs.update(
        cr_name=args.cr_name,
        cr_uid=state.uid,
        generation=state.generation,
        conditions=[condition_output(c, state.generation) for c in state.conditions],
        loaded=state.condition(ConditionKind.LOADED),
        available=state.condition(ConditionKind.AVAILABLE),
        ready=state.condition(ConditionKind.READY),
        pods=[pod_output(p, args.load_path) for p in state.pods],
        loaded_path=state.loaded_path,
        last_loaded_at=state.last_loaded_at,
    )
    if args.source is not None:
        outs["content_key"] = content_key(declared_request(args.to_dict())[0])
    return outs


def with_staged_path(olds: Mapping[str, Any], news: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: ``news`` with the staged directory the old outputs record, when a staged adapter's
    content and claim are unchanged (so it is not staged again, and ``path`` is no change)."""
    if news.get("source") is None or news.get("path") is not None:
        return dict(news)
    if any(unknown(news.get(k)) for k in STAGING_INPUTS):  # known once previewed
        return dict(news)
    try:
        key = content_key(declared_request(news)[0])
    except SourceRefused:  # check says why
        return dict(news)
    same_claim = olds.get("volume_claim") == news.get("volume_claim")
    if olds.get("content_key") == key and same_claim and olds.get("path"):
        return {**news, "path": olds["path"]}
    return dict(news)


def refreshed_inputs(olds: Mapping[str, Any], outs: Mapping[str, Any]) -> dict[str, Any] | None:
    """Pure: the inputs a refresh hands the engine: ``None`` (keep the program's own) unless the
    CR's spec was edited out of band, then the live ``adapter_name``/``path`` over the inputs.

    The engine shows every key of these that differs from the program's inputs as added or
    removed (``refresh [diff: +pinned,...]``). A read cannot see which inputs the program set, so
    keeping the program's is the only way an undrifted refresh shows nothing; an edited CR shows
    as exactly the fields that moved (``[diff: ~path]``). Defaults are left out then, so only a
    setting given explicitly at its default value can still show as removed.
    """
    moved = {k: outs[k] for k in ("adapter_name", "path") if outs.get(k) != olds.get(k)}
    if not moved:
        return None
    defaults = AdapterArgs.defaults()
    kept = {k: v for k, v in inputs(outs).items() if k not in defaults or v != defaults[k]}
    return {**kept, **moved}


def reported_conditions(props: Mapping[str, Any]) -> list[Condition]:
    """Pure: the conditions the outputs last reported (``since`` as the transition time), so a
    refresh keeps each unchanged condition's ``since``; entries that don't parse are skipped."""
    found = []
    for entry in props.get("conditions") or []:
        try:
            found.append(
                Condition.parse(
                    {
                        "type": entry.get("type"),
                        "status": entry.get("status"),
                        "reason": entry.get("reason"),
                        "message": entry.get("message") or "",
                        "lastTransitionTime": entry.get("since"),
                        "observedGeneration": entry.get("generation"),
                    }
                )
            )
        except (ValidationError, AttributeError):
            continue
    return found


def condition_output(condition: Condition, generation: int) -> dict[str, Any]:
    """Pure: one entry of the ``conditions`` output: type, status, reason, ``since`` (its
    lastTransitionTime), and only what carries something: the message when there is one, the
    generation when it is not the CR's current one."""
    entry: dict[str, Any] = {
        "type": condition.type,
        "status": condition.status.value,
        "reason": condition.reason,
        "since": condition.wire()["lastTransitionTime"],
    }
    if condition.message:
        entry["message"] = condition.message
    if condition.observed_generation is not None and condition.observed_generation != generation:
        entry["generation"] = condition.observed_generation
    return entry


def pod_output(report: lifecycle.PodReport, path: str) -> dict[str, Any]:
    """Pure: one entry of the ``pods`` output: the pod, whether it serves the adapter, and only
    what differs from the plain case: ``ready: false``, ``path`` when it serves another path
    than the resource's, ``reason`` and ``error`` when it failed.

    Nothing in it moves unless the pod changed, so a heal rewrites only the pods it healed.
    """
    entry: dict[str, Any] = {"pod": report.pod, "loaded": report.loaded}
    if not report.ready:
        entry["ready"] = False
    if report.loaded and report.path != path:
        entry["path"] = report.path
    if report.reason:
        entry["reason"] = report.reason
    if report.error:
        entry["error"] = report.error
    return entry


def pod_path(pod: Mapping[str, Any], outs: Mapping[str, Any]) -> str | None:
    """Pure: the path a ``pods`` output entry serves (``None``: not loaded), read from either
    shape: 0.3's (``path`` only when it differs from the resource's) or 0.2's (always)."""
    if not pod.get("loaded"):
        return None
    found = pod.get("path", outs.get("path"))
    return None if found is None else str(found)


#: The inputs that say what a staged adapter is (``_staging.parse_source`` checks them together).
STAGING_INPUTS = frozenset(
    {"path", "source", "digests", "allow_mutable", "source_endpoint", "source_public"}
)


def inputs(props: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs among a resource's properties (outputs carry more keys)."""
    return {k: props[k] for k in INPUT_KEYS if k in props}


def unknown(value: Any) -> bool:
    """Whether ``value`` is the engine's placeholder for a value known only after apply."""
    return bool(value == UNKNOWN)
