"""One LoRAAdapter resource's arguments (``AdapterArgs``): every input, validated before anything
touches a cluster, and the rules across inputs. ``parse`` validates (the constructor checks only
the rules across inputs); ``failures`` names every broken rule at once, never quoting a
credential. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import Enum
from functools import cache
from typing import Annotated, Any, Self

import msgspec
from msgspec import Meta, Struct, ValidationError

from pulumi_lora._explain import CREDENTIAL_INPUTS, explain, quoted
from pulumi_lora._models import (
    ANNOTATION_API_KEY_SECRET,
    ANNOTATION_DRAIN_SECONDS,
    ANNOTATION_MANAGED_BY,
    ANNOTATION_MAX_UNAVAILABLE,
    ANNOTATION_PINNED,
    ANNOTATION_POLICY,
    ANNOTATION_SMOKE_TEST,
    ANNOTATION_SOURCE,
    ANNOTATION_TRANSPORT,
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_UNAVAILABLE,
    MOST_DRAIN_SECONDS,
    MOST_UNAVAILABLE,
    AdapterName,
    AdapterPath,
    InferenceServiceRef,
    LoRAAdapterSpec,
    Model,
    NamespaceName,
    ObjectName,
    Policy,
    Transport,
    bounded_text,
)

#: The settings of a staged adapter, meaningless without ``source``.
STAGING_SETTINGS = (
    "digests",
    "allow_mutable",
    "source_endpoint",
    "source_secret_name",
    "source_service_account",
    "source_public",
    "volume_claim",
)


class AdapterArgs(Model, kw_only=True, frozen=True):
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
    ready_timeout_seconds: Annotated[float, Meta(gt=0, le=3600)] = 300.0
    transport: Transport = Transport.DIRECT
    api_key_secret_name: ObjectName | None = None
    api_key_secret_key: Annotated[str, bounded_text(1, 253, r"^[-._a-zA-Z0-9]+$")] = "api-key"  # noqa: S105 - the key's name in the Secret, not a credential
    kube_context: str | None = None
    kubeconfig_path: str | None = None
    # A kubeconfig's content or path (the stack's cluster, as pulumi-kubernetes takes it): a
    # credential, so never in a repr (``__repr__``), a log or the CR.
    kubeconfig: str | None = None
    adopt: bool = False
    # One greedy generation through the adapter after each load; a failed one fails the load.
    smoke_test: bool = True
    # A swap (path or source change) on pods behind the readiness gate goes pod by pod: this
    # many pods out of rotation at once, each drained this long after it left the Service's
    # EndpointSlices (kube-proxy's and gateways' propagation) before it unloads.
    max_unavailable: Annotated[int, Meta(ge=1, le=MOST_UNAVAILABLE)] = DEFAULT_MAX_UNAVAILABLE
    drain_seconds: Annotated[float, Meta(ge=0, le=MOST_DRAIN_SECONDS)] = DEFAULT_DRAIN_SECONDS
    # Where the weights come from, when pulumi-lora stages them (docs/staging.md); the provider
    # checks the source itself (``_staging``) and sets ``path`` to the staged directory.
    source: Annotated[str, bounded_text(1, 2048)] | None = None
    digests: dict[str, str] | None = None
    allow_mutable: bool = False
    source_endpoint: Annotated[str, bounded_text(1, 2048)] | None = None
    source_secret_name: ObjectName | None = None
    source_service_account: ObjectName | None = None
    # An s3:// source in a bucket the user marked public: fetched without signing.
    source_public: bool = False
    volume_claim: ObjectName | None = None

    @classmethod
    def parse(cls, data: Any) -> Self:
        """``data`` validated into the model (``Model.parse``), a kubeconfig given as a mapping
        (pulumi-eks' ``Cluster.kubeconfig`` is an object) taken as its JSON text first."""
        return super().parse(as_text_kubeconfig(data) if isinstance(data, Mapping) else data)

    def __post_init__(self) -> None:
        """The rules across inputs (``declaration_rules``): the first broken one fails. The
        constructor checks nothing else (it trusts typed code); ``parse`` validates."""
        for _input, message in declaration_rules(msgspec.structs.asdict(self)):
            raise ValueError(message)

    def __repr__(self) -> str:
        shown = {
            k: "***" if k in CREDENTIAL_INPUTS and v is not None else v
            for k, v in msgspec.structs.asdict(self).items()
        }
        return f"AdapterArgs({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    @classmethod
    def failures(cls, values: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Pure: ``(input, message)`` for every rule ``values`` break, each input checked on its
        own (so all are named at once), then the rules across inputs."""
        fields = _fields(cls)
        found: list[tuple[str, str]] = []
        converted: dict[str, Any] = {}
        for name, value in as_text_kubeconfig(values).items():
            field = fields.get(name)
            if field is None:  # its value unquoted: a misspelt ``kubeconfig`` is a credential
                found.append((name, f"{name}: Extra inputs are not permitted"))
                continue
            try:
                converted[name] = msgspec.convert(value, field.type, strict=False)
            except ValidationError as exc:
                found.append((name, f"{quoted(name, value)}: {explain(field.type, str(exc))}"))
        found += [
            (n, f"{n} Field required") for n, f in fields.items() if f.required and n not in values
        ]
        return found or declaration_rules(converted)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The default of every input that has one (as its JSON value)."""
        return dict(_defaults(cls))

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
        if not self.smoke_test:  # absent is the default, so CRs made before it stay unchanged
            notes[ANNOTATION_SMOKE_TEST] = "false"
        if self.max_unavailable != DEFAULT_MAX_UNAVAILABLE:  # the loop's swaps read these two
            notes[ANNOTATION_MAX_UNAVAILABLE] = str(self.max_unavailable)
        if self.drain_seconds != DEFAULT_DRAIN_SECONDS:
            notes[ANNOTATION_DRAIN_SECONDS] = f"{self.drain_seconds:.3f}".rstrip("0").rstrip(".")
        return notes


#: The rule that a declaration names its weights, by ``path`` or by ``source``.
PATH_OR_SOURCE = (
    "path or source is required: path where the adapter already is in the SGLang container, "
    "or source where pulumi-lora stages it from (hf://, s3://, https://)"
)


@cache
def _fields(model: type[Struct]) -> dict[str, msgspec.structs.FieldInfo]:
    """A model's fields by name, once: msgspec resolves the annotations anew on every call."""
    return {f.name: f for f in msgspec.structs.fields(model)}


@cache
def _defaults(model: type[Struct]) -> dict[str, Any]:
    """A model's defaults by name, as JSON values (an enum's value)."""
    return {
        name: f.default.value if isinstance(f.default, Enum) else f.default
        for name, f in _fields(model).items()
        if not f.required
    }


def as_text_kubeconfig(values: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: ``values`` with a ``kubeconfig`` given as a mapping (a kubeconfig object, as
    pulumi-eks' ``Cluster.kubeconfig`` is) turned into its JSON text, which is kubeconfig content
    as YAML reads it; anything else as given."""
    kubeconfig = values.get("kubeconfig")
    if isinstance(kubeconfig, Mapping):
        return {**values, "kubeconfig": json.dumps(kubeconfig, sort_keys=True)}
    return dict(values)


def declaration_rules(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Pure: ``(input, message)`` for each rule across inputs that ``values`` (valid one by one)
    break: a path or a source, and the staging settings only with a source."""
    if values.get("path") is None and values.get("source") is None:
        return [("path", PATH_OR_SOURCE)]
    if values.get("source") is None:
        given = [name for name in STAGING_SETTINGS if values.get(name) not in (None, False)]
        if given:
            return [("source", f"{', '.join(given)} apply to a staged adapter: give source too")]
    return []


def default_resource_name(adapter_name: str) -> str:
    """A DNS-1123 CR name for an adapter handle (lowercase; ``_`` and ``.`` runs become ``-``)."""
    name = re.sub(r"[^a-z0-9-]+", "-", adapter_name.lower()).strip("-")
    return name[:63].rstrip("-") or "lora"
