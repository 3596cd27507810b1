"""The README's code blocks are true: its Python runs (under Pulumi's mocks), its commands exist.

The two shell commands are run for real by CI (`.ci/run` calls the test command) and by
`scripts/demo.sh` itself; here we hold the README to them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pulumi

from pulumi_lora import RESOURCE_TYPE

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.types: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.types.append(args.typ)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


def test_the_readme_names_the_two_commands_and_ci_runs_the_test_one() -> None:
    commands = [line for block in blocks("bash") for line in block.splitlines() if line]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert all((ROOT / c.split()[1]).is_file() for c in commands)
    assert "bash scripts/test.sh" in (ROOT / ".ci/run").read_text()


@pulumi.runtime.test
def test_every_python_block_runs() -> pulumi.Output[None]:
    python = blocks("python")
    assert python, "the README has a quickstart"
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, preview=False)
    made: list[pulumi.Resource] = []
    for code in python:
        namespace: dict[str, Any] = {"__name__": "readme"}
        exec(compile(code, "README.md", "exec"), namespace)
        for value in namespace.values():
            values = value if isinstance(value, list) else [value]
            made += [v for v in values if isinstance(v, pulumi.Resource)]

    def check(_: object) -> None:
        # The quickstart declares one adapter; the platform stack three, its InferenceService
        # and the re-sync loop.
        assert len(python) == 2
        assert recorder.types.count(RESOURCE_TYPE) == 4
        assert "kubernetes:inference.llmkube.dev/v1alpha1:InferenceService" in recorder.types
        assert "pulumi-lora:index:ResyncDeployment" in recorder.types

    return pulumi.Output.all(*(r.urn for r in made)).apply(check)
