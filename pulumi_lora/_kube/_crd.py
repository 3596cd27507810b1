"""LLMKube's CustomResourceDefinitions, as plain manifests built from the seed schema.

Pure, no I/O library. The LoRAAdapter schema is converted from the seed, never hand-copied;
regenerate with ``python -m pulumi_lora._kube._crd`` (a test checks).
"""

from __future__ import annotations

import copy
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pulumi_lora._models import GROUP, ISVC_PLURAL, PLURAL, VERSION

__all__ = [
    "GROUP",
    "INFERENCE_SERVICE_PLURAL",
    "LORA_ADAPTER_PLURAL",
    "MANIFEST_FILES",
    "VERSION",
    "SchemaConversionError",
    "all_crds",
    "inference_service_crd",
    "load_seed_schema",
    "lora_adapter_crd",
    "render_manifest",
    "structural_schema",
    "write_manifests",
]

#: The API group, version and plural resource names are ``_models``' (``GROUP``, ``VERSION``,
#: ``PLURAL``, ``ISVC_PLURAL``), under the names this module has always exported.
LORA_ADAPTER_PLURAL = PLURAL
INFERENCE_SERVICE_PLURAL = ISVC_PLURAL

MANIFEST_FILES = {
    f"{LORA_ADAPTER_PLURAL}.{GROUP}": "loraadapter.yaml",
    f"{INFERENCE_SERVICE_PLURAL}.{GROUP}": "inferenceservice.yaml",
}
"""CRD name → file name of its rendered manifest in ``pulumi_lora/crds/``."""

_SEED_FILE = "loraadapter.schema.json"

# JSON-Schema keywords whose value is one sub-schema, a list of them, or a name → schema map.
_SUBSCHEMA_KEYS = ("items", "not")
_SUBSCHEMA_LIST_KEYS = ("allOf", "anyOf", "oneOf")
_SUBSCHEMA_MAP_KEYS = ("properties",)


class SchemaConversionError(ValueError):
    """The seed uses a JSON-Schema construct that has no structural-schema equivalent."""


def load_seed_schema() -> dict[str, Any]:
    """Read the seed LoRAAdapter JSON schema shipped inside the package."""
    text = resources.files("pulumi_lora").joinpath("crds", _SEED_FILE).read_text(encoding="utf-8")
    seed: dict[str, Any] = json.loads(text)
    return seed


def _convert_type(node: dict[str, Any], out: dict[str, Any], where: str) -> None:
    """Translate a JSON-Schema ``type`` (a name or a list of names) into ``type``/``nullable``."""
    if "type" not in node:
        return
    declared = node["type"]
    names = [declared] if isinstance(declared, str) else list(declared)
    nullable = "null" in names
    names = [name for name in names if name != "null"]
    if sorted(names) == ["integer", "string"]:
        out["x-kubernetes-int-or-string"] = True
    elif len(names) == 1:
        out["type"] = names[0]
    else:
        raise SchemaConversionError(f"{where}: type {declared!r} has no structural equivalent")
    if nullable:
        out["nullable"] = True


def _convert(node: dict[str, Any], where: str) -> dict[str, Any]:
    """Convert one schema node and, recursively, its sub-schemas (pure)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            _convert_type(node, out, where)
        elif key == "additionalProperties":
            if value is False or value is True:
                # false: refused by the apiserver, pruning closes the object instead.
                # true: an open object, spelled the structural way.
                if value is True and "properties" not in node:
                    out["x-kubernetes-preserve-unknown-fields"] = True
                continue
            out[key] = _convert(value, f"{where}.additionalProperties")
        elif key in _SUBSCHEMA_MAP_KEYS:
            out[key] = {name: _convert(sub, f"{where}.{name}") for name, sub in value.items()}
        elif key in _SUBSCHEMA_KEYS and isinstance(value, dict):
            out[key] = _convert(value, f"{where}.{key}")
        elif key in _SUBSCHEMA_LIST_KEYS:
            out[key] = [_convert(sub, f"{where}.{key}[{i}]") for i, sub in enumerate(value)]
        else:
            out[key] = copy.deepcopy(value)
    return out


def structural_schema(seed: dict[str, Any]) -> dict[str, Any]:
    """Convert a JSON-Schema rendering of a CRD's root into a structural ``openAPIV3Schema``.

    Pure: the input is not modified. Raises :class:`SchemaConversionError` for a construct that
    cannot be expressed (a union of two non-null types other than integer-or-string).
    """
    out = _convert(seed, "$")
    properties = out.get("properties", {})
    if "metadata" in properties:
        # The apiserver owns ObjectMeta; a CRD may only say that it is an object.
        properties["metadata"] = {"type": "object"}
    # The root of a stored object can never be null.
    out.pop("nullable", None)
    out.setdefault("type", "object")
    return out


def _crd(
    *,
    kind: str,
    plural: str,
    singular: str,
    short_names: list[str],
    schema: dict[str, Any],
    subresources: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    """Assemble one namespaced, single-version ``apiextensions.k8s.io/v1`` CRD (pure)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": short_names,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                }
            ],
        },
    }


def lora_adapter_crd(seed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The LoRAAdapter CRD, its schema converted from ``seed`` (default: the shipped seed)."""
    schema = structural_schema(load_seed_schema() if seed is None else seed)
    return _crd(
        kind="LoRAAdapter",
        plural=LORA_ADAPTER_PLURAL,
        singular="loraadapter",
        short_names=["lora"],
        schema=schema,
        subresources={"status": {}},
        columns=[
            {"name": "Service", "type": "string", "jsonPath": ".spec.inferenceServiceRef.name"},
            {"name": "Adapter", "type": "string", "jsonPath": ".spec.name"},
            {
                "name": "Loaded",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Loaded")].status',
            },
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def _condition_schema() -> dict[str, Any]:
    """``metav1.Condition`` as a structural schema, taken from the converted seed (pure)."""
    status = lora_adapter_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"
    ]
    conditions: dict[str, Any] = status["properties"]["conditions"]
    return conditions


def _port(description: str) -> dict[str, Any]:
    return {
        "type": "integer",
        "format": "int32",
        "minimum": 1,
        "maximum": 65535,
        "description": description,
    }


def _inference_service_schema() -> dict[str, Any]:
    """The hand-written structural schema of InferenceService's fields that this project uses."""
    preserved_items = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "description": "InferenceService serves a Model with one of LLMKube's runtimes.",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["modelRef"],
                "properties": {
                    "modelRef": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Name of the Model resource to serve.",
                    },
                    "runtime": {
                        "type": "string",
                        "default": "llamacpp",
                        "enum": [
                            "llamacpp",
                            "llamacpp-router",
                            "personaplex",
                            "vllm",
                            "tgi",
                            "sglang",
                            "generic",
                        ],
                        "description": "Inference runtime; only sglang takes LoRA adapters.",
                    },
                    "replicas": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 0,
                        "maximum": 10,
                        "default": 1,
                        "description": "Number of inference pods.",
                    },
                    "endpoint": {
                        "type": "object",
                        "description": "How the Service exposes the runtime.",
                        "properties": {
                            "port": _port("Service port (8080 when omitted)."),
                            "path": {"type": "string", "description": "HTTP path prefix."},
                            "type": {
                                "type": "string",
                                "enum": ["ClusterIP", "NodePort", "LoadBalancer"],
                                "description": "Kubernetes Service type.",
                            },
                        },
                    },
                    "containerPort": _port(
                        "Container port of the runtime (30000 for sglang when omitted)."
                    ),
                    "extraArgs": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Extra command-line arguments for the runtime.",
                    },
                    "extraVolumes": {
                        "type": "array",
                        "items": preserved_items,
                        "description": "Extra pod volumes (core/v1 Volume).",
                    },
                    "extraVolumeMounts": {
                        "type": "array",
                        "items": preserved_items,
                        "description": "Extra runtime container mounts (core/v1 VolumeMount).",
                    },
                    "sglangConfig": {
                        "type": "object",
                        "description": "SGLang-specific settings.",
                        "properties": {
                            "maxLoraRank": {"type": "integer", "format": "int32", "minimum": 1},
                            "loraTargetModules": {"type": "array", "items": {"type": "string"}},
                            "loraAdapters": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["name", "path"],
                                    "properties": {
                                        "name": {"type": "string", "minLength": 1},
                                        "path": {"type": "string", "minLength": 1},
                                    },
                                },
                            },
                        },
                    },
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "phase": {
                        "type": "string",
                        "description": "Pending, Creating, Progressing, Ready, Failed, ...",
                    },
                    "readyReplicas": {"type": "integer", "format": "int32", "minimum": 0},
                    "desiredReplicas": {"type": "integer", "format": "int32", "minimum": 0},
                    "endpoint": {"type": "string", "description": "The Service URL."},
                    "conditions": _condition_schema(),
                },
            },
        },
    }


def inference_service_crd() -> dict[str, Any]:
    """The InferenceService CRD (status and scale subresources)."""
    return _crd(
        kind="InferenceService",
        plural=INFERENCE_SERVICE_PLURAL,
        singular="inferenceservice",
        short_names=["isvc"],
        schema=_inference_service_schema(),
        subresources={
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.readyReplicas",
            },
        },
        columns=[
            {"name": "Runtime", "type": "string", "jsonPath": ".spec.runtime"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


def all_crds() -> list[dict[str, Any]]:
    """Every CRD the project needs installed, in install order."""
    return [lora_adapter_crd(), inference_service_crd()]


class _ManifestDumper(yaml.SafeDumper):
    """Block style for multi-line strings, so descriptions read as they do in the seed."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not value.endswith((" ", "\t")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)


def render_manifest(crd: dict[str, Any]) -> str:
    """Render one CRD as the YAML committed in ``pulumi_lora/crds/`` (pure, deterministic)."""
    header = (
        "# Generated by pulumi_lora._kube._crd from loraadapter.schema.json; do not edit.\n"
        "# Regenerate with: python -m pulumi_lora._kube._crd\n"
    )
    body = yaml.dump(
        crd, Dumper=_ManifestDumper, sort_keys=False, default_flow_style=False, width=100
    )
    return header + body


def write_manifests(directory: Path | None = None) -> list[Path]:
    """Write every CRD's manifest into ``directory`` (default: the package's ``crds/``)."""
    target = Path(__file__).parents[1] / "crds" if directory is None else directory
    written = []
    for crd in all_crds():
        path = target / MANIFEST_FILES[crd["metadata"]["name"]]
        path.write_text(render_manifest(crd), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_manifests(Path(sys.argv[1]) if len(sys.argv) > 1 else None):
        sys.stdout.write(f"wrote {written_path}\n")
