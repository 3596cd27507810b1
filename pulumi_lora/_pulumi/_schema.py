"""The Pulumi package schema as the reference users read: what the analyzer infers, completed.

Defaults come from ``AdapterArgs``, the one place they live. Pure: a dict in, a new dict out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from pulumi_lora._args import AdapterArgs
from pulumi_lora._lifecycle import TIMEOUT_KEYS
from pulumi_lora._lifecycle._config import STAGING_GRACE_SECONDS
from pulumi_lora._models import Policy, Transport
from pulumi_lora._settings import ClientTimeouts

PACKAGE = "pulumi-lora"
REPOSITORY = "https://github.com/pulumi-lora/pulumi-lora"
"""Where the source and the releases live (the schema's ``repository``): set before a release."""

SECRET_PROPERTIES = frozenset({"kubeconfig"})
"""The resource's credentials: secret in the schema (the SDKs wrap them) and in the state."""

LANGUAGES: dict[str, dict[str, Any]] = {
    "nodejs": {"packageName": "@pulumi-lora/pulumi-lora", "respectSchemaVersion": True},
    "go": {
        "importBasePath": "github.com/pulumi-lora/pulumi-lora/sdk/go/lora",
        "generateResourceContainerTypes": True,
        "respectSchemaVersion": True,
    },
    "csharp": {"rootNamespace": "PulumiLora", "respectSchemaVersion": True},
    "java": {"basePackage": "dev.pulumilora", "respectSchemaVersion": True},
    # Python programs use the pulumi-lora distribution itself (``import pulumi_lora``): a
    # generated Python SDK would be a second, thinner way in, under another name.
    "python": {"packageName": "pulumi_lora_sdk", "respectSchemaVersion": True},
}
"""Each language's package name: what a user types after npm install, go get, dotnet add."""

ENUMS: dict[str, tuple[str, dict[str, str]]] = {
    "transport": (
        "Transport",
        {
            Transport.DIRECT: "Pod IP and container port: the engine runs in the cluster or the "
            "pod network is routed to it.",
            Transport.PROXY: "The apiserver's pod proxy (`pods/NAME:PORT/proxy`): a laptop or CI "
            "runner with any kubeconfig (token, client certificate, exec plugin as EKS, GKE and "
            "AKS write, oidc) and unkeyed servers (the proxy strips `Authorization`).",
            Transport.DELEGATED: "Apply the CR and wait for the in-cluster re-sync loop's "
            "status: CI outside the cluster with keyed servers, or any managed cluster.",
        },
    ),
    "readinessPolicy": (
        "ReadinessPolicy",
        {
            Policy.ALL_READY_PODS: "Loaded when every Ready pod serves the adapter.",
            Policy.ANY_READY_POD: "Loaded when at least one Ready pod serves it.",
        },
    ),
}
"""Inputs with a closed set of values: the enum type's name and each value's description."""

OUTPUT_ONLY = {
    "crUid": "The CR's `metadata.uid` (a new one means the CR was replaced).",
    "generation": "The CR's `metadata.generation` the outputs describe.",
}
"""Descriptions of outputs no docstring describes."""

CONFIG: dict[str, dict[str, Any]] = {
    "kubeconfig": {
        "type": "string",
        "description": "A kubeconfig's content or path, for adapters that give neither "
        "`kubeconfig` nor `kubeconfigPath` (default: `KUBECONFIG`, its files merged as kubectl "
        "merges them, then `~/.kube/config`, then in-cluster); `kubeContext` picks a context "
        "in it.",
    },
    "context": {"type": "string", "description": "The kubeconfig context to use."},
    "image": {
        "type": "string",
        "description": "The project's image (where you pushed what `tools/image.py` builds), "
        "which staging Jobs run (default: `localhost/pulumi-lora:VERSION`, the local build).",
    },
    "stagingGraceSeconds": {
        "type": "number",
        "default": STAGING_GRACE_SECONDS,
        "description": "Seconds a staged directory no LoRAAdapter names any more stays on its "
        "claim after its last staging, reuse or release; a later command on the claim removes "
        "it (a replacement, or another stack staging the same content meanwhile, finds it "
        "there). 0 removes it at once.",
    },
    "sglangApiKey": {
        "type": "string",
        "secret": True,
        "description": "SGLang's API key (`--api-key`), sent to every pod as a bearer token "
        "when an adapter names no `apiKeySecretName`. Set it with `pulumi config set --secret`.",
    },
}
_TIMEOUT_DOCS = {
    "connect": "to open a connection to a pod",
    "read": "for an SGLang answer other than a load or an unload",
    "load": "for `POST /load_lora_adapter` to answer",
    "unload": "for `POST /unload_lora_adapter` to answer",
    "smoke": "for the smoke generation after a load (`POST /generate`, one token) to answer",
}
for _key, _field in TIMEOUT_KEYS.items():
    CONFIG[_key] = {
        "type": "number",
        "default": getattr(ClientTimeouts(), _field),
        "description": f"Seconds to wait {_TIMEOUT_DOCS[_field]}.",
    }
"""The provider's configuration (``pulumi-lora:KEY`` in stack config)."""

METADATA = {
    "displayName": "LoRA adapters (LLMKube, SGLang)",
    "description": "LoRA adapters on SGLang in Kubernetes: LLMKube LoRAAdapter CRs loaded on "
    "every Ready replica, with drift seen by refresh.",
    "publisher": "pulumi-lora",
    "repository": REPOSITORY,
    "homepage": REPOSITORY,
    "license": "Apache-2.0",
    "keywords": ["lora", "sglang", "llmkube", "kubernetes", "llm", "category/cloud", "kind/native"],
}


def markdown(text: str) -> str:
    """Pure: a docstring as Markdown: paragraphs re-flowed (the source's indentation gone) and
    reStructuredText's ````code```` as ```code```."""
    paragraphs = re.split(r"\n\s*\n", text.strip())
    flowed = [" ".join(line.strip() for line in p.splitlines()) for p in paragraphs]
    return "\n\n".join(re.sub(r"``([^`]+)``", r"`\1`", p) for p in flowed)


def defaults() -> dict[str, Any]:
    """The inputs' defaults, camelCase, from ``AdapterArgs`` (``None`` ones are no default)."""
    found = {}
    for key, value in AdapterArgs.defaults().items():
        if value is None:
            continue
        head, *rest = key.split("_")
        found[head + "".join(r.capitalize() for r in rest)] = value
    return found


def _described(node: Any) -> None:
    """Rewrite every ``description`` inside ``node`` as Markdown, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = markdown(value)
            else:
                _described(value)
    elif isinstance(node, list):
        for item in node:
            _described(item)


def document(made: Mapping[str, Any], token: str, output_docs: Mapping[str, str]) -> dict[str, Any]:
    """Pure: the analyzer's schema ``made`` as the reference (see the module's doc).

    ``output_docs``: docstrings of outputs the analyzer left undescribed (camelCase keys), for
    instance those declared on base classes.
    """
    schema = copy.deepcopy(dict(made))
    schema.update(METADATA)
    schema["language"] = copy.deepcopy(LANGUAGES)
    schema["config"] = {"variables": copy.deepcopy(CONFIG)}
    schema["provider"] = {
        "description": "The provider's settings; every one may come from stack config.",
        "inputProperties": {k: dict(v) for k, v in CONFIG.items()},
    }
    # An explicit provider's inputs live in the state: its kubeconfig is a credential there.
    schema["provider"]["inputProperties"]["kubeconfig"]["secret"] = True
    resource = schema["resources"][token]
    inputs, outputs = resource["inputProperties"], resource["properties"]
    for name, default in defaults().items():
        if name in inputs:
            inputs[name]["default"] = default
    for name, (type_name, values) in ENUMS.items():
        ref = {"$ref": f"#/types/{PACKAGE}:index:{type_name}"}
        schema["types"][ref["$ref"].removeprefix("#/types/")] = {
            "type": "string",
            "description": f"The values of `{name}`.",
            "enum": [
                {"name": str(v).replace("-", ""), "value": str(v), "description": d}
                for v, d in values.items()
            ],
        }
        for properties in (inputs, outputs):
            if name in properties:
                old = properties[name]
                kept = {k: old[k] for k in ("description", "default") if k in old}
                properties[name] = {**kept, **ref}
    for prop in (*inputs.values(), *outputs.values()):
        # A map's element type is a type spec, which has no description (the analyzer copies
        # the property's there; the engine drops it when it serves the schema).
        if isinstance(prop.get("additionalProperties"), dict):
            prop["additionalProperties"].pop("description", None)
    for name in SECRET_PROPERTIES:
        for properties in (inputs, outputs):
            if name in properties:
                properties[name]["secret"] = True
    for name, prop in outputs.items():
        if "description" not in prop:
            text = (inputs.get(name) or {}).get("description") or output_docs.get(name)
            prop["description"] = text or OUTPUT_ONLY.get(name, "")
    _described(schema)
    return schema
