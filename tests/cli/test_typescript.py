"""TypeScript: `examples/typescript` through `provider/` (one custom resource) on the testbed.

The program runs under the built ``pulumi-language-nodejs`` (v3.68.0) with ``@pulumi/pulumi``
from npm (the example's ``package.json``, installed by ``npm install`` as a user does); the
engine runs the resource's operations in the plugin named by the example's ``Pulumi.yaml``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import Testbed

from .conftest import (
    assert_clean_refresh,
    assert_nothing_left,
    example_beside_provider,
    lora_resources,
    ready_service,
    require_program,
    served,
    stack_on_testbed,
)

pytestmark = pytest.mark.full


def test_typescript_example_up_and_destroy(
    consumer_engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    require_program("pulumi-language-nodejs")
    require_program("npm")
    path = "/adapters/sql-lora"
    handle = ready_service(testbed, namespace)
    folder = example_beside_provider("typescript", tmp_path, "node_modules")
    npm = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert npm.returncode == 0, npm.stdout + npm.stderr
    runner = consumer_engine.project(folder)
    stack_on_testbed(runner, testbed, namespace)
    try:
        runner.pulumi("up", "--yes", "--skip-preview")
        outputs = runner.outputs()
        assert outputs["loaded"] is True
        # one custom resource per adapter, its ID the CR's: no component, no dynamic child
        assert lora_resources(runner) == [
            ("pulumi-lora:index:LoRAAdapter", True, f"{namespace}/sql-lora")
        ]
        assert outputs["crName"] == "sql-lora"
        # a pod serving the resource's own path carries no ``path`` of its own
        by_pod = {p["pod"]: p.get("path", "declared") for p in outputs["pods"] if p["loaded"]}
        assert by_pod == {pod.name: "declared" for pod in handle.ready_pods()}
        assert all(a == {"sql-lora": path} for a in served(handle).values())
        assert_clean_refresh(runner)
    finally:
        runner.pulumi("destroy", "--yes", "--skip-preview")
    assert_nothing_left(testbed, [handle])
