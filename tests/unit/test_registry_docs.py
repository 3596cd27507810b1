"""The schema as the reference: Markdown descriptions on every input, output and enum value,
defaults, the provider's config, the package's metadata; and the registry pages rendered from
it (``docs/registry/``), which fail here while stale."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pulumi_lora._pulumi._resource import TYPE_TOKEN
from pulumi_lora._pulumi._schema import markdown

ROOT = Path(__file__).resolve().parents[2]


def write_schema() -> ModuleType:
    path = ROOT / "provider" / "write_schema.py"
    spec = importlib.util.spec_from_file_location("write_schema", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "provider" / "schema.json").read_text())
    return loaded


def descriptions(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["description"]] if isinstance(node.get("description"), str) else []
        return own + [d for k, v in node.items() if k != "description" for d in descriptions(v)]
    if isinstance(node, list):
        return [d for item in node for d in descriptions(item)]
    return []


def test_the_registry_pages_are_rendered_from_the_committed_schema(
    committed: dict[str, Any],
) -> None:
    tool = write_schema()
    for path, text in tool.pages(committed).items():
        assert path.read_text() == text, f"{path} is stale: python provider/write_schema.py"


def test_every_input_output_and_enum_value_is_described_in_markdown(
    committed: dict[str, Any],
) -> None:
    resource = committed["resources"][TYPE_TOKEN]
    for props in (resource["inputProperties"], resource["properties"]):
        assert all(spec.get("description") for spec in props.values())
    for spec in committed["types"].values():
        assert all(e.get("description") for e in spec.get("enum", []))
    for text in descriptions(committed):
        assert "``" not in text and "\n " not in text, text  # no reST, no docstring indent
    page = (ROOT / "docs" / "registry" / "_index.md").read_text()
    assert all(d.split("\n")[0].replace("|", "\\|") in page for d in descriptions(resource))


def test_enums_defaults_config_and_names(committed: dict[str, Any]) -> None:
    inputs = committed["resources"][TYPE_TOKEN]["inputProperties"]
    transport = committed["types"]["pulumi-lora:index:Transport"]
    assert [e["value"] for e in transport["enum"]] == ["direct", "proxy", "delegated"]
    policy = committed["types"]["pulumi-lora:index:ReadinessPolicy"]
    assert [e["value"] for e in policy["enum"]] == ["AllReadyPods", "AnyReadyPod"]
    assert inputs["transport"]["$ref"] == "#/types/pulumi-lora:index:Transport"
    assert {k: v["default"] for k, v in inputs.items() if "default" in v} == {
        "namespace": "default",
        "pinned": False,
        "readinessPolicy": "AllReadyPods",
        "readyTimeoutSeconds": 300.0,
        "transport": "direct",
        "apiKeySecretKey": "api-key",
        "adopt": False,
        "smokeTest": True,
        "maxUnavailable": 1,
        "drainSeconds": 2.0,
        "allowMutable": False,
        "sourcePublic": False,
    }
    variables = committed["config"]["variables"]
    assert variables["sglangApiKey"]["secret"] is True
    assert set(variables) == {
        "kubeconfig",
        "context",
        "sglangApiKey",
        "image",
        "connectTimeoutSeconds",
        "readTimeoutSeconds",
        "loadTimeoutSeconds",
        "unloadTimeoutSeconds",
        "smokeTimeoutSeconds",
        "stagingGraceSeconds",
    }
    assert committed["license"] == "Apache-2.0" and committed["keywords"]
    assert committed["publisher"] and committed["repository"].startswith("https://")
    assert committed["language"]["nodejs"]["packageName"] == "@pulumi-lora/pulumi-lora"


def test_markdown_reflows_docstrings_and_turns_rest_literals_into_code() -> None:
    doc = "Take over a CR (``adopt``) when its spec\n    is what it declares.\n\n    More."
    assert markdown(doc) == ("Take over a CR (`adopt`) when its spec is what it declares.\n\nMore.")
