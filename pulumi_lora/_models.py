"""The LoRAAdapter custom resource as typed models: the one source of truth for its schema.

The msgspec models mirror LLMKube's CRD field for field, so what ``check`` accepts the apiserver
accepts; names and paths are stricter than the schema (DNS-1123, printable), as the apiserver
is at the reference's target (tests/e2e/test_check_vs_apiserver.py). ``parse`` validates (the
constructor does not); ``failures`` names every broken rule at once. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Self

import msgspec
from msgspec import Meta, Struct

GROUP = "inference.llmkube.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LoRAAdapter"
PLURAL = "loraadapters"
ISVC_KIND = "InferenceService"
ISVC_PLURAL = "inferenceservices"

#: LLMKube's own LoRA controller (it runs in every LLMKube install; docs/protocol.md) marks
#: every LoRAAdapter it acts on with this finalizer.
LLMKUBE_FINALIZER = "loraadapter.inference.llmkube.dev/finalizer"
#: The user LLMKube's controller manager acts as with LLMKube's kustomize and Helm defaults
#: (ServiceAccount ``llmkube-controller-manager`` in ``llmkube-system``).
LLMKUBE_CONTROLLER_USER = "system:serviceaccount:llmkube-system:llmkube-controller-manager"
#: Condition reasons only LLMKube's LoRA controller writes (pulumi-lora never uses them; both
#: write ``LoadUnsuccessful``, so it tells nothing).
LLMKUBE_REASONS = frozenset(
    {
        "AlreadyLoaded",
        "FinalizerAdded",
        "InvalidPort",
        "ReconcileSuccess",
        "ReconcilerError",
        "UnloadUnsuccessful",
    }
)

#: The SGLang handle: the CRD's pattern and length.
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: Condition reasons: the CRD's pattern (metav1.Condition).
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
#: Condition types: the CRD's pattern.
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
#: DNS-1123 subdomain (object names), a project rule beyond the schema.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: DNS-1123 label (namespaces), a project rule beyond the schema.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _whole(pattern: str) -> str:
    """``pattern`` anchored at the very end: Python's ``$`` also matches before a final newline,
    the apiserver's (Go, like pydantic's Rust) does not."""
    return pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern


def bounded_text(
    min_length: int = 0, max_length: int | None = None, pattern: str | None = None
) -> Meta:
    """The constraints of a string field."""
    return Meta(
        min_length=min_length or None,
        max_length=max_length,
        pattern=_whole(pattern) if pattern else None,
    )


AdapterName = Annotated[str, bounded_text(1, 63, ADAPTER_NAME_PATTERN)]
#: A path: non-empty (the CRD's rule) and, a project rule, printable characters only (no real
#: container path has control characters, and server-side apply's YAML body cannot carry them).
PATH_PATTERN = "^[\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]+$"
AdapterPath = Annotated[str, bounded_text(1, pattern=PATH_PATTERN)]
ObjectName = Annotated[str, bounded_text(1, 253, DNS_SUBDOMAIN_PATTERN)]
NamespaceName = Annotated[str, bounded_text(1, 63, DNS_LABEL_PATTERN)]
Reason = Annotated[str, bounded_text(1, 1024, REASON_PATTERN)]
ConditionType = Annotated[str, bounded_text(0, 316, CONDITION_TYPE_PATTERN)]
Generation = Annotated[int, Meta(ge=0)]


class Model(Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Shared behaviour: wire names (camelCase) where a model renames, unknown keys refused."""

    @classmethod
    def parse(cls, data: Any) -> Self:
        """``data`` (wire names, JSON values) validated into the model; raises ValidationError.

        Lax as JSON from the engine needs: ``3.0`` is an int, ``"true"`` a bool."""
        return msgspec.convert(data, cls, strict=False)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (field names), not validated again."""
        return msgspec.structs.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The model as JSON values under its wire names (enums as values, times as text)."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data


class InferenceServiceRef(Model, kw_only=True, frozen=True):
    """``spec.inferenceServiceRef``: the InferenceService whose pods serve the adapter."""

    name: ObjectName
    namespace: NamespaceName | None = None


class LoRAAdapterSpec(Model, rename="camel", kw_only=True, frozen=True):
    """``spec``: which adapter, from where, into which InferenceService."""

    inference_service_ref: InferenceServiceRef
    name: AdapterName
    path: AdapterPath

    def wire(self) -> dict[str, Any]:
        """The spec as the apiserver stores it (camelCase, no nulls)."""
        return _without_nulls(self.to_dict())


class ConditionStatus(StrEnum):
    """``metav1.ConditionStatus``."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionKind(StrEnum):
    """The condition types this project writes."""

    AVAILABLE = "Available"
    LOADED = "Loaded"
    ERROR = "Error"
    READY = "Ready"
    OVER_CAPACITY = "OverCapacity"
    RESYNC_LOOP = "ResyncLoop"
    """The re-sync loop's own: which Lease its leader holds (:func:`served_by_message`)."""


class Condition(Model, rename="camel", kw_only=True, frozen=True):
    """One ``metav1.Condition`` as the CRD constrains it."""

    type: ConditionType
    status: ConditionStatus
    reason: Reason
    message: Annotated[str, Meta(max_length=32768)] = ""
    last_transition_time: datetime
    observed_generation: Generation | None = None

    def __post_init__(self) -> None:
        """A time without a zone is UTC, as the apiserver writes it."""
        if not self.last_transition_time.tzinfo:
            aware = self.last_transition_time.replace(tzinfo=UTC)
            msgspec.structs.force_setattr(self, "last_transition_time", aware)

    def wire(self) -> dict[str, Any]:
        """The condition as the apiserver stores it (RFC 3339, seconds, ``Z``)."""
        data = _without_nulls(self.to_dict())
        data["lastTransitionTime"] = format_time(self.last_transition_time)
        return data


def written_by_llmkube(condition: Condition) -> bool:
    """Pure: whether LLMKube's own LoRA controller wrote this condition (not pulumi-lora).

    By its reasons only it uses, or by the shape of its load errors (``sglang http://...`` and
    ``post http://...``, its HTTP client's words) under the ``LoadUnsuccessful`` both write.
    """
    if condition.reason in LLMKUBE_REASONS:
        return True
    return condition.reason in ("LoadUnsuccessful", "UnloadUnsuccessful") and (
        condition.message.startswith(("sglang http://", "post http://"))
    )


def served_by_message(lease_namespace: str, lease_name: str) -> str:
    """Pure: the ``ResyncLoop`` condition's message, naming the Lease of the loop that serves the
    CR: a delegated refresh reads that Lease to tell a live loop's verdict from a gone one's."""
    return f"served by the re-sync loop whose leader holds Lease {lease_namespace}/{lease_name}"


def served_by(conditions: Sequence[Condition]) -> tuple[str, str] | None:
    """Pure: ``(namespace, name)`` of the Lease a ``ResyncLoop`` condition names, or None."""
    for condition in conditions:
        if condition.type == ConditionKind.RESYNC_LOOP.value:
            found = re.search(
                r"Lease ([a-z0-9][-a-z0-9]*)/([a-z0-9][-.a-z0-9]*)$", condition.message
            )
            if found:
                return found.group(1), found.group(2)
    return None


class LoRAAdapterStatus(Model, rename="camel", kw_only=True, frozen=True):
    """``status``: conditions plus the last accepted path and load time."""

    conditions: list[Condition] | None = None
    loaded_path: str | None = None
    last_loaded_at: datetime | None = None

    def wire(self) -> dict[str, Any]:
        """The status as the apiserver stores it."""
        data: dict[str, Any] = {}
        if self.conditions is not None:
            data["conditions"] = [c.wire() for c in self.conditions]
        if self.loaded_path is not None:
            data["loadedPath"] = self.loaded_path
        if self.last_loaded_at is not None:
            data["lastLoadedAt"] = format_time(self.last_loaded_at)
        return data


def _without_nulls(data: dict[str, Any]) -> dict[str, Any]:
    """Pure: ``data`` without its ``None`` values, at every depth (the apiserver stores none)."""
    return {
        k: _without_nulls(v) if isinstance(v, dict) else v for k, v in data.items() if v is not None
    }


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes ``metav1.Time``."""
    return value.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    """Parse a ``metav1.Time`` string (``...Z``); None stays None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- the resource's arguments and the CR annotations this project owns --------------------------


class Transport(StrEnum):
    """How the provider reaches each pod's SGLang server."""

    DIRECT = "direct"  # pod IP and container port: in-cluster, or a routed pod network
    # the apiserver's pod proxy: any kubeconfig (token, client certificate, exec plugin, oidc),
    # and no API key (the proxy strips Authorization)
    PROXY = "proxy"
    DELEGATED = "delegated"  # apply the CR and await the in-cluster re-sync loop's status

    @property
    def carries_key(self) -> bool:
        """Whether an SGLang API key reaches the server this way (:data:`PROXY_STRIPS_KEY`)."""
        return self is not Transport.PROXY


PROXY_STRIPS_KEY = (
    "the apiserver's pod proxy strips the Authorization header, so it cannot carry an SGLang "
    "API key"
)
"""Why the proxy transport cannot reach a keyed server: one sentence wherever it is refused."""


class Policy(StrEnum):
    """The readiness policy: what counts as loaded (the resource's ``readiness_policy``, the
    ``pulumi-lora.dev/readiness-policy`` annotation, the decision core's ``is_loaded``)."""

    ALL_READY_PODS = "AllReadyPods"  # every Ready pod serves the adapter (default)
    ANY_READY_POD = "AnyReadyPod"  # at least one Ready pod does


ANNOTATION_PREFIX = "pulumi-lora.dev/"
#: Settings the re-sync loop must know travel as annotations (spec and status are closed).
ANNOTATION_PINNED = ANNOTATION_PREFIX + "pinned"
ANNOTATION_TRANSPORT = ANNOTATION_PREFIX + "transport"
ANNOTATION_POLICY = ANNOTATION_PREFIX + "readiness-policy"
ANNOTATION_API_KEY_SECRET = ANNOTATION_PREFIX + "api-key-secret"  # "name/key", never the key
ANNOTATION_MANAGED_BY = ANNOTATION_PREFIX + "managed-by"
#: ``"false"``: loads are not followed by a smoke generation (``smoke_test=False``); absent, or
#: any other value, they are. A loop older than this annotation ignores it and smokes nothing.
ANNOTATION_SMOKE_TEST = ANNOTATION_PREFIX + "smoke-test"
#: A swap's pace on gated pods (``max_unavailable``, ``drain_seconds``), for the loop's swaps of
#: ``delegated`` adapters: written only when not the default (1 pod, 2 s), which a loop older
#: than these annotations uses whatever they say.
ANNOTATION_MAX_UNAVAILABLE = ANNOTATION_PREFIX + "max-unavailable"
ANNOTATION_DRAIN_SECONDS = ANNOTATION_PREFIX + "drain-seconds"
#: Those two settings' defaults and largest values (the inputs, the annotations' readers).
DEFAULT_MAX_UNAVAILABLE = 1
MOST_UNAVAILABLE = 1000
DEFAULT_DRAIN_SECONDS = 2.0
MOST_DRAIN_SECONDS = 600.0
#: Where a staged adapter's weights came from (its ``source``: a URI that carries no credential).
ANNOTATION_SOURCE = ANNOTATION_PREFIX + "source"
#: Set by the provider while it swaps or deletes, so the loop does not re-apply meanwhile.
ANNOTATION_OPERATION = ANNOTATION_PREFIX + "operation"
#: pulumi-lora's own finalizer: set by the provider's delete just before it marks the CR for
#: deletion, removed once every Ready pod has unloaded the adapter. A delete that fails on a pod
#: leaves it, so the CR (being deleted) outlives the adapter it declares, whatever LLMKube's
#: controller does with its own finalizer. Only a failed delete ever leaves it behind: a
#: retried ``pulumi destroy`` or ``pulumi-lora finish-delete`` takes it off (docs/protocol.md
#: rule 4).
UNLOAD_FINALIZER = ANNOTATION_PREFIX + "unload"
