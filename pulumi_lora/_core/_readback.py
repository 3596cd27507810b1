"""A CR read back, pure: this project's annotations on it, and the arguments that declare it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_lora._args import default_resource_name
from pulumi_lora._models import (
    ANNOTATION_API_KEY_SECRET,
    ANNOTATION_DRAIN_SECONDS,
    ANNOTATION_MANAGED_BY,
    ANNOTATION_MAX_UNAVAILABLE,
    ANNOTATION_OPERATION,
    ANNOTATION_PINNED,
    ANNOTATION_POLICY,
    ANNOTATION_SMOKE_TEST,
    ANNOTATION_TRANSPORT,
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_UNAVAILABLE,
    MOST_DRAIN_SECONDS,
    MOST_UNAVAILABLE,
    Policy,
    Transport,
)


@dataclass(frozen=True)
class AdapterNotes:
    """The ``pulumi-lora.dev/`` annotations of one CR, read back (:meth:`AdapterArgs.annotations`
    writes them): the one reader, for the re-sync loop and the operator commands alike.

    What a reader does not know reads as its default (CHANGELOG.md, version skew): ``pinned``
    anything but ``true`` is not pinned, ``smoke-test`` anything but ``false`` smokes, an unknown
    readiness policy is ``AllReadyPods``, an ``api-key-secret`` that is not ``NAME/KEY`` is no
    key. ``transport`` is kept as written (``direct`` when absent), so each reader decides what
    an unknown one means.
    """

    managed: bool = False  # ``managed-by`` is set: a pulumi-lora stack made the CR
    pinned: bool = False
    transport: str = Transport.DIRECT.value
    readiness_policy: Policy = Policy.ALL_READY_PODS
    api_key_secret: tuple[str, str] | None = None  # (Secret name, key), in the target's namespace
    operation: str | None = None  # ``update@<time>`` / ``delete@<time>``, see docs/protocol.md
    smoke_test: bool = True  # a smoke generation after each load
    max_unavailable: int = DEFAULT_MAX_UNAVAILABLE  # a swap's pods out of rotation at once
    drain_seconds: float = DEFAULT_DRAIN_SECONDS  # a gated pod's drain before it swaps


def read_annotations(annotations: Mapping[str, str] | None) -> AdapterNotes:
    """Pure: the ``pulumi-lora.dev/`` annotations of a CR (its ``metadata.annotations``)."""
    notes = annotations or {}
    try:
        policy = Policy(notes.get(ANNOTATION_POLICY) or Policy.ALL_READY_PODS.value)
    except ValueError:
        policy = Policy.ALL_READY_PODS
    secret = notes.get(ANNOTATION_API_KEY_SECRET) or ""
    name, _, key = secret.partition("/")
    return AdapterNotes(
        managed=ANNOTATION_MANAGED_BY in notes,
        pinned=notes.get(ANNOTATION_PINNED, "false").lower() == "true",
        transport=notes.get(ANNOTATION_TRANSPORT, Transport.DIRECT.value),
        readiness_policy=policy,
        api_key_secret=(name, key) if name and key else None,
        operation=notes.get(ANNOTATION_OPERATION) or None,
        smoke_test=notes.get(ANNOTATION_SMOKE_TEST, "true").lower() != "false",
        max_unavailable=_number(
            notes.get(ANNOTATION_MAX_UNAVAILABLE), DEFAULT_MAX_UNAVAILABLE, int, 1, MOST_UNAVAILABLE
        ),
        drain_seconds=_number(
            notes.get(ANNOTATION_DRAIN_SECONDS), DEFAULT_DRAIN_SECONDS, float, 0, MOST_DRAIN_SECONDS
        ),
    )


def _number(text: str | None, default: Any, kind: type, low: float, high: float) -> Any:
    """Pure: ``text`` as a ``kind`` within [low, high], else ``default`` (what a reader does
    not understand reads as its default)."""
    try:
        value = kind(text) if text is not None else default
    except ValueError:
        return default
    return value if low <= value <= high else default


def declared_by_cr(cr: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the arguments a resource must declare to be this CR (``pulumi import``): its spec,
    its name when it is not the adapter name's default, and the settings this project's
    annotations record (``read_annotations``; a CR made by kubectl or Helm has none: the
    defaults).

    Only what differs from a default is given, so the imported state's inputs are what a
    program minimally writes; the CR's spec is taken as is (``AdapterArgs`` checks it later).
    """
    meta = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    ref = spec.get("inferenceServiceRef") or {}
    notes = read_annotations(meta.get("annotations"))
    declared: dict[str, Any] = {
        "adapter_name": spec.get("name"),
        "path": spec.get("path"),
        "inference_service": ref.get("name"),
        "namespace": meta.get("namespace") or "default",
    }
    if ref.get("namespace") and ref.get("namespace") != declared["namespace"]:
        declared["inference_service_namespace"] = ref["namespace"]
    if meta.get("name") != default_resource_name(str(declared["adapter_name"] or "")):
        declared["resource_name"] = meta.get("name")
    if notes.pinned:
        declared["pinned"] = True
    if notes.transport != Transport.DIRECT.value:
        declared["transport"] = notes.transport
    if notes.readiness_policy is not Policy.ALL_READY_PODS:
        declared["readiness_policy"] = notes.readiness_policy.value
    if not notes.smoke_test:
        declared["smoke_test"] = False
    if notes.max_unavailable != DEFAULT_MAX_UNAVAILABLE:
        declared["max_unavailable"] = notes.max_unavailable
    if notes.drain_seconds != DEFAULT_DRAIN_SECONDS:
        declared["drain_seconds"] = notes.drain_seconds
    if notes.api_key_secret is not None:
        declared["api_key_secret_name"], key = notes.api_key_secret
        if key != "api-key":
            declared["api_key_secret_key"] = key
    return declared
