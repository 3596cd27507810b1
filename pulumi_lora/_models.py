"""The LoRAAdapter custom resource as pydantic models: the one source of truth for its schema.

The models mirror LLMKube's CRD (``inference.llmkube.dev/v1alpha1``, seed in
``pulumi_lora/crds/loraadapter.schema.json``) field for field, pattern for pattern, so that what
``check`` accepts the apiserver accepts too. Three rules are deliberately stricter than the schema
and documented as such: the InferenceService and CR names must be DNS-1123 subdomains and
namespaces DNS-1123 labels (the apiserver refuses anything else at the reference's target, so
the schema's plain ``string`` would only defer the error to create time), and a path must be
printable characters only (server-side apply's YAML body cannot carry control characters).
tests/e2e/test_check_vs_apiserver.py holds these rules against the real apiserver.

Pure: no I/O, no HTTP or Kubernetes client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

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

AdapterName = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=ADAPTER_NAME_PATTERN)
]
#: A path: non-empty (the CRD's rule) and, a project rule, printable characters only (no real
#: container path has control characters, and server-side apply's YAML body cannot carry them).
PATH_PATTERN = "^[\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]+$"
AdapterPath = Annotated[str, StringConstraints(min_length=1, pattern=PATH_PATTERN)]
ObjectName = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
]
NamespaceName = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)
]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)]
ConditionType = Annotated[str, StringConstraints(max_length=316, pattern=CONDITION_TYPE_PATTERN)]


class _Model(BaseModel):
    """Shared config: camelCase on the wire, snake_case in Python, unknown keys refused."""

    model_config = ConfigDict(
        populate_by_name=True, extra="forbid", frozen=True, str_strip_whitespace=False
    )


class InferenceServiceRef(_Model):
    """``spec.inferenceServiceRef``: the InferenceService whose pods serve the adapter."""

    name: ObjectName
    namespace: NamespaceName | None = None


class LoRAAdapterSpec(_Model):
    """``spec``: which adapter, from where, into which InferenceService."""

    inference_service_ref: InferenceServiceRef = Field(alias="inferenceServiceRef")
    name: AdapterName
    path: AdapterPath

    def wire(self) -> dict[str, Any]:
        """The spec as the apiserver stores it (camelCase, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True)


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


class Condition(_Model):
    """One ``metav1.Condition`` as the CRD constrains it."""

    type: ConditionType
    status: ConditionStatus
    reason: Reason
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    last_transition_time: datetime = Field(alias="lastTransitionTime")
    observed_generation: Annotated[int, Field(ge=0)] | None = Field(
        default=None, alias="observedGeneration"
    )

    @field_validator("last_transition_time")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    def wire(self) -> dict[str, Any]:
        """The condition as the apiserver stores it (RFC 3339, seconds, ``Z``)."""
        data = self.model_dump(by_alias=True, exclude_none=True, mode="json")
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


class LoRAAdapterStatus(_Model):
    """``status``: conditions plus the last accepted path and load time."""

    conditions: list[Condition] | None = None
    loaded_path: str | None = Field(default=None, alias="loadedPath")
    last_loaded_at: datetime | None = Field(default=None, alias="lastLoadedAt")

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


#: The settings of a staged adapter, meaningless without ``source``.
STAGING_SETTINGS = (
    "digests",
    "allow_mutable",
    "source_endpoint",
    "source_secret_name",
    "source_service_account",
    "volume_claim",
)


class AdapterArgs(_Model):
    """Everything one LoRAAdapter resource declares, validated before anything touches a cluster.

    The CR fields carry the CRD's own rules; the rest are this project's settings, stored on the
    CR as ``pulumi-lora.dev/*`` annotations.
    """

    adapter_name: AdapterName
    path: AdapterPath | None = None
    inference_service: ObjectName
    inference_service_namespace: NamespaceName | None = None
    namespace: NamespaceName = "default"
    resource_name: ObjectName | None = None
    pinned: bool = False
    readiness_policy: Policy = Policy.ALL_READY_PODS
    ready_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 300.0
    transport: Transport = Transport.DIRECT
    api_key_secret_name: ObjectName | None = None
    api_key_secret_key: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    ] = "api-key"  # noqa: S105 - the key's name in the Secret, not a credential
    kube_context: str | None = None
    kubeconfig_path: str | None = None
    # A kubeconfig's content or path (the stack's cluster, as pulumi-kubernetes takes it): a
    # credential, so never in a repr, a log or the CR.
    kubeconfig: str | None = Field(default=None, repr=False)
    adopt: bool = False
    # Where the weights come from, when pulumi-lora stages them (docs/staging.md); the provider
    # checks the source itself (``_staging``) and sets ``path`` to the staged directory.
    source: Annotated[str, StringConstraints(min_length=1, max_length=2048)] | None = None
    digests: dict[str, str] | None = None
    allow_mutable: bool = False
    source_endpoint: Annotated[str, StringConstraints(min_length=1, max_length=2048)] | None = None
    source_secret_name: ObjectName | None = None
    source_service_account: ObjectName | None = None
    volume_claim: ObjectName | None = None

    @model_validator(mode="after")
    def _path_or_source(self) -> AdapterArgs:
        if self.path is None and self.source is None:
            raise PydanticCustomError(
                "path_or_source",
                "path or source is required: path where the adapter already is in the SGLang "
                "container, or source where pulumi-lora stages it from (hf://, s3://, https://)",
            )
        if self.source is None:
            given = [name for name in STAGING_SETTINGS if getattr(self, name) not in (None, False)]
            if given:
                raise PydanticCustomError(
                    "staged_only", f"{', '.join(given)} apply to a staged adapter: give source too"
                )
        return self

    @property
    def load_path(self) -> str:
        """The directory pods load: ``path``, or the staged one the provider set from ``source``."""
        if self.path is None:
            raise ValueError(f"adapter {self.adapter_name} from {self.source} is not staged yet")
        return self.path

    @property
    def cr_name(self) -> str:
        """The CR's name: given, else derived from the adapter name (DNS-1123 safe)."""
        return self.resource_name or default_resource_name(self.adapter_name)

    @property
    def target_namespace(self) -> str:
        """Where the InferenceService lives (defaults to the CR's namespace)."""
        return self.inference_service_namespace or self.namespace

    def spec(self) -> LoRAAdapterSpec:
        """The CR's spec."""
        return LoRAAdapterSpec(
            inference_service_ref=InferenceServiceRef(
                name=self.inference_service, namespace=self.inference_service_namespace
            ),
            name=self.adapter_name,
            path=self.load_path,
        )

    def annotations(self) -> dict[str, str]:
        """The project's annotations on the CR (never a secret value)."""
        notes = {
            ANNOTATION_MANAGED_BY: "pulumi",
            ANNOTATION_PINNED: "true" if self.pinned else "false",
            ANNOTATION_TRANSPORT: self.transport.value,
            ANNOTATION_POLICY: self.readiness_policy.value,
        }
        if self.api_key_secret_name:
            notes[ANNOTATION_API_KEY_SECRET] = (
                f"{self.api_key_secret_name}/{self.api_key_secret_key}"
            )
        if self.source:
            notes[ANNOTATION_SOURCE] = self.source
        return notes


@dataclass(frozen=True)
class AdapterNotes:
    """The ``pulumi-lora.dev/`` annotations of one CR, read back (:meth:`AdapterArgs.annotations`
    writes them): the one reader, for the re-sync loop and the operator commands alike.

    What a reader does not know reads as its default (CHANGELOG.md, version skew): ``pinned``
    anything but ``true`` is not pinned, an unknown readiness policy is ``AllReadyPods``, an
    ``api-key-secret`` that is not ``NAME/KEY`` is no key. ``transport`` is kept as written
    (``direct`` when absent), so each reader decides what an unknown one means.
    """

    managed: bool = False  # ``managed-by`` is set: a pulumi-lora stack made the CR
    pinned: bool = False
    transport: str = Transport.DIRECT.value
    readiness_policy: Policy = Policy.ALL_READY_PODS
    api_key_secret: tuple[str, str] | None = None  # (Secret name, key), in the target's namespace
    operation: str | None = None  # ``update@<time>`` / ``delete@<time>``, see docs/protocol.md


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
    )


def default_resource_name(adapter_name: str) -> str:
    """A DNS-1123 CR name for an adapter handle (lowercase; ``_`` and ``.`` runs become ``-``)."""
    name = re.sub(r"[^a-z0-9-]+", "-", adapter_name.lower()).strip("-")
    return name[:63].rstrip("-") or "lora"


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
    if notes.api_key_secret is not None:
        declared["api_key_secret_name"], key = notes.api_key_secret
        if key != "api-key":
            declared["api_key_secret_key"] = key
    return declared
