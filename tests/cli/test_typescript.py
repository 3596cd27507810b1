"""TypeScript: `examples/typescript` through `provider/` (one custom resource) on the testbed,
by path and staged from a source.

The program runs under the built ``pulumi-language-nodejs`` (v3.68.0) with ``@pulumi/pulumi``
from npm (the example's ``package.json``, installed by ``npm install`` as a user does); the
engine runs the resource's operations in the plugin named by the example's ``Pulumi.yaml``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.testbed import Testbed

from .conftest import (
    assert_clean_refresh,
    assert_nothing_left,
    example_beside_provider,
    lora_resources,
    require_program,
    served,
    stack_on_testbed,
)


def test_typescript_example_up_stages_from_a_source_and_destroys(
    consumer_engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    """examples/typescript by ``path``, then with the config ``source`` set: the adapter is
    staged from a played Hub onto the claim and every pod swaps to the staged output ``path``;
    refresh is clean both times; destroy leaves no CR and no Job, and releases the staged
    directory (a later command on the claim removes it after the grace period)."""
    require_program("pulumi-language-nodejs")
    require_program("npm")
    path = "/adapters/sql-lora"
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=2, adapter_claim="adapters"
    )
    handle.wait_ready(timeout=60)
    claim = testbed.claim_directory(namespace, "adapters")
    write_adapter(claim / "sql-lora", seed="typescript")
    folder = example_beside_provider("typescript", tmp_path, "node_modules")
    npm = subprocess.run(
        # --prefer-offline: the packages npm already holds are not asked for again (24 s → 6 s)
        ["npm", "install", "--no-audit", "--no-fund", "--prefer-offline"],
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
        assert outputs["crName"] == "sql-lora" and outputs["path"] == path
        assert "contentKey" not in outputs
        # a pod serving the resource's own path carries no ``path`` of its own
        by_pod = {p["pod"]: p.get("path", "declared") for p in outputs["pods"] if p["loaded"]}
        assert by_pod == {pod.name: "declared" for pod in handle.ready_pods()}
        assert all(a == {"sql-lora": path} for a in served(handle).values())
        assert_clean_refresh(runner)

        with PlayedHub() as hub:
            files = {p.name: p.read_bytes() for p in (claim / "sql-lora").iterdir()}
            lfs = frozenset({"adapter_model.safetensors"})
            commit = hub.publish("acme/sql-lora", files, lfs=lfs)
            testbed.expose_to_pods(hub.port)
            runner.pulumi("config", "set", "source", f"hf://acme/sql-lora@{commit}")
            runner.pulumi("config", "set", "sourceEndpoint", hub.endpoint)
            up = runner.pulumi("up", "--yes", "--skip-preview").stdout
            assert "staging sql-lora (" in up and "fetched" in up
            staged = runner.outputs()
            key = staged["contentKey"]
            assert staged["path"] == f"/adapters/{key}" and staged["loaded"] is True
            assert (claim / key / "adapter_model.safetensors").read_bytes() == files[
                "adapter_model.safetensors"
            ]
            assert all(a == {"sql-lora": staged["path"]} for a in served(handle).values())
            assert_clean_refresh(runner)
    finally:
        runner.pulumi("destroy", "--yes", "--skip-preview")
    assert_nothing_left(testbed, [handle])
    assert testbed.jobs_left(namespace) == []  # the stager went with the command
    # the staged directory released (its in-use mark refreshed), removed by a later command on
    # the claim once unused for the grace period (600 s by default)
    assert sorted(p.name for p in claim.iterdir() if not p.name.startswith(".")) == sorted(
        ["sql-lora", key]
    )
    assert (claim / f".{key}.used").is_file()
