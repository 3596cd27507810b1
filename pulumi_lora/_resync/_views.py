"""Small frozen views of the LoRAAdapter CRs the loop reacts to, built from the watch's dicts.

Pure, and free of any I/O library even transitively. Pods and targets are ``_core._llmkube``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_lora._core._readback import read_annotations
from pulumi_lora._core._reconcile import Desired
from pulumi_lora._models import DEFAULT_DRAIN_SECONDS, DEFAULT_MAX_UNAVAILABLE, Policy

#: ``(namespace, name)`` of a namespaced object.
Key = tuple[str, str]


@dataclass(frozen=True)
class SecretRef:
    """``pulumi-lora.dev/api-key-secret``: a key of a Secret in the target's namespace."""

    namespace: str
    name: str
    key: str


@dataclass(frozen=True)
class AdapterCR:
    """One LoRAAdapter CR as the loop needs it (``raw``: the watch's last copy of its kind,
    metadata and spec)."""

    namespace: str
    name: str
    uid: str
    generation: int
    created: str
    adapter_name: str
    path: str
    target: Key
    pinned: bool = False
    policy: Policy = Policy.ALL_READY_PODS
    transport: str = "direct"
    api_key: SecretRef | None = None
    operation: str | None = None
    smoke: bool = True
    max_unavailable: int = DEFAULT_MAX_UNAVAILABLE  # a swap's pods out of rotation at once
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    status: Mapping[str, Any] = field(default_factory=dict, compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> Key:
        """``(namespace, name)`` of the CR."""
        return (self.namespace, self.name)

    @property
    def desired(self) -> Desired:
        """The adapter this CR declares, as the decision core takes it."""
        return Desired(self.adapter_name, self.path, self.pinned, self.smoke)

    def declaration(self) -> tuple[object, ...]:
        """Everything whose change means "act again" (a status-only update is not one)."""
        return (
            self.uid,
            self.generation,
            self.adapter_name,
            self.path,
            self.target,
            self.pinned,
            self.policy,
            self.api_key,
            self.operation,
        )


def adapter_from_object(obj: Mapping[str, Any]) -> AdapterCR | None:
    """Pure: read a CR; None when its spec lacks what the loop needs (the schema requires it)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ref = spec.get("inferenceServiceRef") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not (namespace and name and spec.get("name") and spec.get("path") and ref.get("name")):
        return None
    notes = read_annotations(meta.get("annotations"))
    target = (str(ref.get("namespace") or namespace), str(ref["name"]))
    secret = notes.api_key_secret
    return AdapterCR(
        namespace=str(namespace),
        name=str(name),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 1),
        created=str(meta.get("creationTimestamp") or ""),
        adapter_name=str(spec["name"]),
        path=str(spec["path"]),
        target=target,
        pinned=notes.pinned,
        policy=notes.readiness_policy,
        transport=notes.transport,
        api_key=SecretRef(target[0], *secret) if secret else None,
        operation=notes.operation,
        smoke=notes.smoke_test,
        max_unavailable=notes.max_unavailable,
        drain_seconds=notes.drain_seconds,
        status=dict(obj.get("status") or {}),
        raw=_reference(obj),
    )


def _reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What Events about a CR need of it (kind, identity, spec): its status and
    ``managedFields`` are left out, as a thousand cached CRs would carry them for nothing."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": meta,
        "spec": obj.get("spec") or {},
    }


def object_key(obj: Mapping[str, Any]) -> Key:
    """``(namespace, name)`` of any namespaced object dict."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))
