"""`provider/` from another language: `examples/yaml` through the plugin, on the testbed.

The YAML program names the plugin folder in ``packages:``; the engine runs the folder's
executable ``pulumi-resource-pulumi-lora``, which serves ``LoRAAdapter`` with the Python SDK's
component-provider host. Its Python, and the one the engine gives the component's dynamic child
(pulumi/pulumi#5455), is ``PULUMI_PYTHON_CMD``: the fresh project's venv, where ``pulumi_lora``
is installed as a user installs it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import BinaryNotFoundError, Testbed, find_binary

from .conftest import EXAMPLES, ROOT, UserVenv

pytestmark = pytest.mark.full

PROVIDER = ROOT / "provider"


@pytest.fixture
def yaml_engine(tmp_path: Path, user_venv: UserVenv) -> LocalEngine:
    """A private installation whose shell names the Python of the plugin (``PULUMI_PYTHON_CMD``)."""
    try:
        find_binary("pulumi-language-yaml")
        return LocalEngine(
            tmp_path / "engine",
            extra_env={
                "PULUMI_PYTHON_CMD": str(user_venv.path / "bin" / "python"),
                # The plugin comes from a local folder; nothing to resolve in a registry.
                "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
            },
        )
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))


def test_the_plugin_serves_the_committed_schema(yaml_engine: LocalEngine, tmp_path: Path) -> None:
    runner = yaml_engine.project(tmp_path)
    entry = PROVIDER / "pulumi-resource-pulumi-lora"  # the folder needs a PulumiPlugin.yaml
    served = json.loads(runner.pulumi("package", "get-schema", str(entry)).stdout)
    committed = json.loads((PROVIDER / "schema.json").read_text())
    assert served["resources"] == committed["resources"]
    assert served["types"] == committed["types"]
    assert served["name"] == "pulumi-lora"


def adapters_on(pods: list[Any]) -> dict[str, dict[str, str]]:
    result = {}
    for pod in pods:
        body: dict[str, Any] = httpx.get(f"{pod.url}/v1/models", timeout=5).json()
        result[pod.name] = {m["id"]: m["root"] for m in body["data"] if m.get("parent")}
    return result


def test_yaml_example_up_drift_heal_destroy(
    yaml_engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    path = testbed.make_adapter("sql-lora")
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=60)
    # The example as shipped, at the same distance from provider/ (its `packages:` path).
    folder = tmp_path / "examples" / "yaml"
    shutil.copytree(EXAMPLES / "yaml", folder, ignore=shutil.ignore_patterns("Pulumi.*.yaml"))
    (tmp_path / "provider").symlink_to(PROVIDER, target_is_directory=True)
    runner = yaml_engine.project(folder)
    runner.pulumi("stack", "init", "dev")
    runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
    runner.pulumi("config", "set", "namespace", namespace)

    try:
        runner.pulumi("up", "--yes", "--skip-preview")
        outputs = runner.outputs()
        assert outputs["loaded"] is True
        by_pod = {p["pod"]: p["path"] for p in outputs["pods"] if p["loaded"]}
        assert by_pod == {pod.name: path for pod in handle.ready_pods()}
        assert all(a == {"sql-lora": path} for a in adapters_on(handle.ready_pods()).values())

        first = handle.ready_pods()[0]
        httpx.post(f"{first.url}/unload_lora_adapter", json={"lora_name": "sql-lora"}, timeout=10)
        drift = runner.pulumi("preview", "--refresh", "--expect-no-changes", check=False)
        assert drift.returncode != 0, drift.stdout

        runner.pulumi("up", "--yes", "--skip-preview")
        assert all(a == {"sql-lora": path} for a in adapters_on(handle.ready_pods()).values())
        assert runner.pulumi("preview", "--refresh", "--expect-no-changes").returncode == 0
    finally:
        runner.pulumi("destroy", "--yes", "--skip-preview")
    assert all(a == {} for a in adapters_on(handle.ready_pods()).values())
    listed = testbed.kubectl("get", "loraadapters", "-n", namespace, "-o", "name")
    assert listed.returncode == 0 and listed.stdout.strip() == "", listed.stderr
