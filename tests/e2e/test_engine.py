"""Proof that the real Pulumi engine runs dynamic resources here: up, refresh, destroy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pulumi import automation as auto

from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.engine_probe import ProbeFile


def test_versions_of_the_real_engine(engine: LocalEngine) -> None:
    print(f"\nreal components: pulumi {engine.pulumi.version} at {engine.pulumi.path}")
    assert engine.pulumi.version.lstrip("v").startswith("3.")


def test_up_refresh_destroy_with_a_dynamic_resource(engine: LocalEngine, tmp_path: Path) -> None:
    target = tmp_path / "probe.txt"

    def program() -> None:
        ProbeFile("probe", path=str(target), content="hello")

    stack = engine.inline_stack("engine-proof", "dev", program)
    up = stack.up(on_output=None)
    assert up.summary.result == "succeeded"
    assert up.summary.resource_changes == {"create": 2}
    assert target.read_text() == "hello"

    state = json.loads(json.dumps(stack.export_stack().deployment))
    probes = [r for r in state["resources"] if r["type"] == "pulumi-python:dynamic:Resource"]
    assert len(probes) == 1 and probes[0]["outputs"]["observed"] == "hello"

    # Out-of-band change: refresh reads it, and a refreshing preview sees the drift.
    target.write_text("drifted")
    refresh = stack.refresh()
    assert refresh.summary.result == "succeeded"
    outputs = next(
        r
        for r in stack.export_stack().deployment["resources"]
        if r["type"] == "pulumi-python:dynamic:Resource"
    )["outputs"]
    assert outputs["observed"] == "drifted"
    with pytest.raises(auto.errors.CommandError):
        stack.preview(expect_no_changes=True)

    healed = stack.up()
    assert healed.summary.resource_changes.get("update") == 1
    assert target.read_text() == "hello"
    assert stack.preview(expect_no_changes=True).change_summary.get("same") == 2

    destroyed = stack.destroy()
    assert destroyed.summary.result == "succeeded"
    assert not target.exists()
    assert [
        r
        for r in stack.export_stack().deployment.get("resources", [])
        if r["type"] == "pulumi-python:dynamic:Resource"
    ] == []
