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
        # and the re-sync loop; the adoption example one.
        assert len(python) == 3
        assert recorder.types.count(RESOURCE_TYPE) == 5
        assert "kubernetes:inference.llmkube.dev/v1alpha1:InferenceService" in recorder.types
        assert "pulumi-lora:index:ResyncDeployment" in recorder.types

    return pulumi.Output.all(*(r.urn for r in made)).apply(check)


def test_the_platform_snippet_starts_sglang_as_the_example_does() -> None:
    """The snippet's ``extraArgs`` are the example's: without --lora-target-modules, ``doctor``
    fails and loads of adapters with other target modules are refused."""
    example = (ROOT / "examples" / "platform" / "__main__.py").read_text()
    (extra_args,) = re.findall(r'"extraArgs": \[.*?\]', example)
    platform = next(code for code in blocks("python") if "ResyncDeployment" in code)
    assert extra_args in platform and "--lora-target-modules" in extra_args


def test_a_reader_installs_before_the_quickstart_and_learns_what_must_exist() -> None:
    headings = re.findall(r"^## (.+)$", README, re.M)
    order = ["Prerequisites", "Install", "Choose a transport", "Quickstart"]
    assert [h for h in headings if h in order] == order
    install = README.index("## Install")
    assert README.index("pip install pulumi-lora", install) < README.index("## Quickstart")
    assert "Both namespaces must exist" in README
    assert "kubectl create namespace models && kubectl create namespace pulumi-lora" in README


def test_every_relative_link_points_at_a_file() -> None:
    links = re.findall(r"\]\(((?:docs/|provider/|examples/|CHANGELOG|LICENSE)[^)#]*)", README)
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
