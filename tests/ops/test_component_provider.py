"""`provider/`: the plugin that serves LoRAAdapter to other Pulumi languages, checked in-process
(fast tier; ``tests/cli/test_yaml_provider.py`` runs it under the real engine).

The schema the plugin serves (one custom resource, inferred by the SDK's own analyzer) is
compared with the committed ``provider/schema.json``; the plugin starts as an executable and
prints its port first; its environment pulls in no Pulumi provider SDK; the YAML example is
validated against the schema property by property.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from pulumi_lora import TYPE_TOKEN, ConditionInfo, PodStatus
from pulumi_lora._pulumi._component import COMPONENT_OUTPUTS
from pulumi_lora._pulumi._properties import INPUT_KEYS, OUTPUT_KEYS
from pulumi_lora._pulumi._resource import AdapterInputs

ROOT = Path(__file__).resolve().parents[2]
PROVIDER = ROOT / "provider"
YAML_EXAMPLE = ROOT / "examples" / "yaml" / "Pulumi.yaml"


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def writer() -> ModuleType:
    return load(PROVIDER / "write_schema.py", "pulumi_lora_write_schema")


@pytest.fixture(scope="module")
def schema(writer: ModuleType) -> dict[str, Any]:
    served: dict[str, Any] = writer.served_schema()
    return served


@pytest.fixture(scope="module")
def resource(schema: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = schema["resources"][TYPE_TOKEN]
    return found


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def py_pack(namespace: str | None, name: str) -> str:
    """Pulumi's Python SDK package name for a schema (pkg/codegen/python ``PyPack``)."""
    prefix = (namespace or "pulumi").replace("-", "_")
    return f"{prefix}_{name.replace('-', '_')}"


# --- the schema ---------------------------------------------------------------------------------


def test_committed_schema_is_what_the_host_serves(
    writer: ModuleType, schema: dict[str, Any]
) -> None:
    committed = (PROVIDER / "schema.json").read_text(encoding="utf-8")
    assert committed == writer.render(schema), "stale: run python provider/write_schema.py"


def test_package_name_token_and_sdk_names(schema: dict[str, Any]) -> None:
    assert schema["name"] == "pulumi-lora"
    assert list(schema["resources"]) == [TYPE_TOKEN] == ["pulumi-lora:index:LoRAAdapter"]
    assert "isComponent" not in schema["resources"][TYPE_TOKEN]  # one custom resource
    assert py_pack(schema.get("namespace"), schema["name"]) != "pulumi_lora"
    assert py_pack(schema["namespace"], schema["name"]) == "pulumilora_pulumi_lora"
    assert schema["namespace"] != "pulumi"  # not Pulumi's own npm scope
    assert schema["dependencies"] == []  # no provider SDK behind it


INPUT_TYPES = {
    "adapterName": "string",
    "path": "string",
    "inferenceService": "string",
    "inferenceServiceNamespace": "string",
    "namespace": "string",
    "resourceName": "string",
    "pinned": "boolean",
    "readinessPolicy": "ReadinessPolicy",
    "readyTimeoutSeconds": "number",
    "transport": "Transport",
    "apiKeySecretName": "string",
    "apiKeySecretKey": "string",
    "kubeContext": "string",
    "kubeconfigPath": "string",
    "kubeconfig": "string",
    "adopt": "boolean",
    "smokeTest": "boolean",
    "maxUnavailable": "integer",
    "drainSeconds": "number",
    "source": "string",
    "digests": "object",
    "allowMutable": "boolean",
    "sourceEndpoint": "string",
    "sourceSecretName": "string",
    "sourceServiceAccount": "string",
    "sourcePublic": "boolean",
    "volumeClaim": "string",
}
"""Every input of the Python resource, camelCase, with its schema type (an enum's name)."""


def kind(spec: dict[str, Any]) -> str | None:
    """A property's type, or the name of the enum type it refers to."""
    return spec.get("type") or spec.get("$ref", "").rpartition(":")[2] or None


def test_every_input_with_its_type_and_requiredness(resource: dict[str, Any]) -> None:
    inputs = {key: kind(spec) for key, spec in resource["inputProperties"].items()}
    assert inputs == INPUT_TYPES
    assert sorted(resource["requiredInputs"]) == [
        "adapterName",
        "inferenceService",
    ]  # + path|source
    # ... and exactly AdapterInputs (what LoRAAdapterArgs takes): a new argument can't be
    # forgotten in the schema.
    assert set(inputs) == {camel(k) for k in AdapterInputs.__annotations__}
    assert set(resource["requiredInputs"]) == {camel(k) for k in AdapterInputs.__required_keys__}
    assert all(spec.get("description") for spec in resource["inputProperties"].values())


def test_every_output(resource: dict[str, Any]) -> None:
    """The Python resource's outputs, camelCase: every input (echoed when not at its default)
    and what the cluster reports."""
    outputs = {key: kind(spec) for key, spec in resource["properties"].items()}
    assert outputs == {
        **INPUT_TYPES,
        "crName": "string",
        "crUid": "string",
        "generation": "integer",
        "loaded": "boolean",
        "available": "boolean",
        "ready": "boolean",
        "conditions": "array",
        "pods": "array",
        "loadedPath": "string",
        "lastLoadedAt": "string",
        "contentKey": "string",
    }
    assert set(outputs) == {camel(k) for k in (*INPUT_KEYS, *OUTPUT_KEYS)}
    assert {camel(k) for k in COMPONENT_OUTPUTS} < set(outputs)  # what the component had
    assert resource["properties"]["conditions"]["items"] == {
        "$ref": "#/types/pulumi-lora:index:ConditionInfo"
    }
    assert resource["properties"]["pods"]["items"] == {
        "$ref": "#/types/pulumi-lora:index:PodStatus"
    }
    always = {"adapterName", "path", "inferenceService", "namespace", "crName", "crUid"}
    always |= {"generation", "conditions", "loaded", "available", "ready", "pods"}
    assert set(resource["required"]) == always


@pytest.mark.parametrize(
    ("token", "typed"), [("ConditionInfo", ConditionInfo), ("PodStatus", PodStatus)]
)
def test_list_item_keys_are_one_word(schema: dict[str, Any], token: str, typed: type) -> None:
    """The SDK leaves keys inside lists snake_case while the schema says camelCase: one-word keys
    are the same in both, so other languages read what Python writes."""
    properties = schema["types"][f"pulumi-lora:index:{token}"]["properties"]
    assert all(re.fullmatch(r"[a-z]+", key) for key in properties), sorted(properties)
    assert set(properties) == set(typed.__annotations__)


# --- the plugin folder --------------------------------------------------------------------------


def test_the_plugin_starts_as_an_executable() -> None:
    """The engine runs ``pulumi-resource-<schema name>`` itself (no language host, so it starts
    under any CLI and host); a ``PulumiPlugin.yaml`` would make it a host-run plugin instead."""
    entry = PROVIDER / "pulumi-resource-pulumi-lora"
    assert entry.stat().st_mode & 0o111 == 0o111
    assert not (PROVIDER / "PulumiPlugin.yaml").exists()
    text = entry.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert 'exec "$python" -u "$here" "$@"' in text  # runs __main__.py beside it


def test_the_executable_serves_a_port_first(tmp_path: Path) -> None:
    """Started as the engine starts it, the plugin's first line of output is its port."""
    env = {"PULUMI_PYTHON_CMD": sys.executable, "PATH": "/usr/bin:/bin"}
    with subprocess.Popen(
        [str(PROVIDER / "pulumi-resource-pulumi-lora"), "127.0.0.1:1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    ) as plugin:
        try:
            assert plugin.stdout is not None
            first = plugin.stdout.readline().strip()
        finally:
            plugin.kill()
    assert first.isdigit() and 0 < int(first) < 65536, first


def requirement_lines() -> list[str]:
    text = (PROVIDER / "requirements.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_environment_pulls_in_no_pulumi_provider_sdk() -> None:
    assert requirement_lines() == ["-e .."]  # this package, no extras (no [kubernetes])
    assert (PROVIDER / ".." / "pyproject.toml").resolve() == ROOT / "pyproject.toml"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [
        re.split(r"[\s<>=!~\[;]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]
    ]
    pulumi_sdks = [n for n in names if n.replace("_", "-").startswith("pulumi-")]
    assert pulumi_sdks == [], "a Pulumi provider SDK makes `pulumi install` fetch its plugin"
    assert "pulumi" in names
    assert any(
        d.startswith("pulumi-kubernetes") for d in project["optional-dependencies"]["kubernetes"]
    )


def test_main_serves_only_under_the_guard() -> None:
    """Top level: docstring, imports, constants and the ``__main__`` guard that starts the host."""
    tree = ast.parse((PROVIDER / "__main__.py").read_text())
    calls_outside_guard = []
    guard = None
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
            guard = node
            continue
        allowed = ast.Import | ast.ImportFrom | ast.Assign | ast.AnnAssign | ast.Expr
        assert isinstance(node, allowed), ast.dump(node)
        if isinstance(node, ast.Expr):
            assert isinstance(node.value, ast.Constant)  # docstrings only
        calls_outside_guard += [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    assert guard is not None
    (call,) = guard.body
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    assert ast.unparse(call.value.func) == "serve"  # the SDK's provider server
    assert ast.unparse(call.value.args[1]).startswith("NativeProvider(__version__, ")
    assert [ast.unparse(c.func) for c in calls_outside_guard] == []


def test_import_prints_nothing_and_needs_no_kubernetes_sdk() -> None:
    """The host's port must be the plugin's first line of output."""
    code = (
        "import runpy, sys\n"
        f"runpy.run_path({str(PROVIDER / '__main__.py')!r}, run_name='plugin')\n"
        "sys.exit(3 if any(m.startswith('pulumi_kubernetes') for m in sys.modules) else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


# --- the YAML example, against the schema -------------------------------------------------------


INTERPOLATION = re.compile(r"^\$\{([^}]+)\}$")


def yaml_problems(program: dict[str, Any], schema: dict[str, Any], folder: Path) -> list[str]:
    """Every way ``program`` (a Pulumi YAML Pulumi.yaml) disagrees with ``schema``."""
    problems: list[str] = []
    package = schema["name"]
    location = (program.get("packages") or {}).get(package)
    if location is None:
        problems.append(f"packages has no {package!r} (the key must be the schema name)")
    elif not str(location).startswith(("./", "../", "/")):
        problems.append(f"package path {location!r} must start with ./, ../ or /")
    elif (folder / location).resolve() != PROVIDER:
        problems.append(f"package path {location!r} is not provider/")
    config = program.get("config") or {}
    resources = program.get("resources") or {}
    for name, declared in resources.items():
        token = str(declared.get("type", ""))
        if token.count(":") == 1:  # "pkg:Type" is short for "pkg:index:Type"
            token = token.replace(":", ":index:")
        spec = schema["resources"].get(token)
        if spec is None:
            problems.append(f"{name}: type {declared.get('type')!r} is not in the schema")
            continue
        properties = declared.get("properties") or {}
        for key in spec.get("requiredInputs", []):
            if key not in properties:
                problems.append(f"{name}: required input {key!r} is missing")
        for key, value in properties.items():
            prop = spec["inputProperties"].get(key)
            if prop is None:
                problems.append(f"{name}: {key!r} is not an input of {token}")
            elif not value_fits(value, prop.get("type", "string"), config):
                problems.append(f"{name}.{key}: {value!r} is not a {prop.get('type', 'string')}")
    for key, expression in (program.get("outputs") or {}).items():
        match = INTERPOLATION.match(str(expression))
        if match is None:
            continue
        resource_name, _, prop = match.group(1).partition(".")
        if resource_name not in resources:
            problems.append(f"outputs.{key}: {resource_name!r} is not a resource")
            continue
        token = resources[resource_name]["type"]
        token = token.replace(":", ":index:") if token.count(":") == 1 else token
        outputs = schema["resources"].get(token, {}).get("properties", {})
        if prop.split(".")[0].split("[")[0] not in outputs:
            problems.append(f"outputs.{key}: {prop!r} is not an output of {token}")
    return problems


def value_fits(value: Any, kind: str, config: dict[str, Any]) -> bool:
    match = INTERPOLATION.match(value) if isinstance(value, str) else None
    if match is not None:  # ${configKey}: its declared type must fit
        declared = config.get(match.group(1))
        return declared is not None and declared.get("type", "string") == kind
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, list if kind == "array" else dict)


def test_yaml_example_matches_the_schema(schema: dict[str, Any]) -> None:
    program = yaml.safe_load(YAML_EXAMPLE.read_text())
    assert program["runtime"] == "yaml"
    assert yaml_problems(program, schema, YAML_EXAMPLE.parent) == []
    assert sorted(p.name for p in YAML_EXAMPLE.parent.glob("*.yaml")) == ["Pulumi.yaml"]


def test_yaml_validation_catches_mistakes(schema: dict[str, Any]) -> None:
    program = yaml.safe_load(YAML_EXAMPLE.read_text())
    sql = program["resources"]["sql"]["properties"]
    sql["adapter_name"] = sql.pop("adapterName")  # snake_case: not the schema's name
    sql["pinned"] = "yes"
    sql["readyTimeoutSeconds"] = True
    program["outputs"]["nope"] = "${sql.loadedPaths}"
    program["packages"] = {"lora": "../../provider"}
    assert yaml_problems(program, schema, YAML_EXAMPLE.parent) == [
        "packages has no 'pulumi-lora' (the key must be the schema name)",
        "sql: required input 'adapterName' is missing",
        "sql.pinned: 'yes' is not a boolean",
        "sql.readyTimeoutSeconds: True is not a number",
        "sql: 'adapter_name' is not an input of pulumi-lora:index:LoRAAdapter",
        "outputs.nope: 'loadedPaths' is not an output of pulumi-lora:index:LoRAAdapter",
    ]
