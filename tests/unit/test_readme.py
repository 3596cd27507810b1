"""The README's code blocks are true: its Python runs (under Pulumi's mocks), its commands exist,
its reference names what the code has, and its quickstart is the example's program.

The two shell commands are run for real by CI (`.ci/run` calls the test command) and by
`scripts/demo.sh` itself; here we hold the README to them. The quickstart's shell lines are run
as written by ``tests/cli/test_python_stacks.py``.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from click.testing import CliRunner

from pulumi_lora import RESOURCE_TYPE
from pulumi_lora._args import AdapterArgs
from pulumi_lora._commands._main import cli
from pulumi_lora._core._topology import normalize_args
from pulumi_lora._lifecycle._config import CONFIG_KEYS, TIMEOUT_KEYS
from pulumi_lora._ops._checks import CheckStatus
from pulumi_lora._ops._spec import check_adapter_volumes, check_enable_lora
from pulumi_lora._pulumi._properties import INPUT_KEYS, OUTPUT_KEYS, REPLACE_KEYS
from pulumi_lora._pulumi._resource import AdapterInputs
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.testbed._handles import adapter_volume

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
QUICKSTART = ROOT / "examples" / "quickstart"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def section(heading: str) -> str:
    """The text under ``## heading`` up to the next ``## ``."""
    start = README.index(f"\n## {heading}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def table_rows(text: str, after: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table after the line starting ``after``."""
    lines = text[text.index(after) :].splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def quickstart_defaults() -> dict[str, str]:
    config = yaml.safe_load((QUICKSTART / "Pulumi.yaml").read_text())["config"]
    return {key: str(spec["default"]) for key, spec in config.items()}


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.types: list[str] = []
        self.inputs: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.types.append(args.typ)
        self.inputs[args.name] = dict(args.inputs)
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
    """Each block as written; a block that defines ``program()`` (the quickstart's, whose
    ``__main__`` guard keeps it from running here) is called, with the example's config
    defaults as the stack's config."""
    python = blocks("python")
    assert python, "the README has a quickstart"
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, preview=False)
    for key, value in quickstart_defaults().items():
        pulumi.runtime.set_config(f"{pulumi.get_project()}:{key}", value)
    made: list[pulumi.Resource] = []
    for code in python:
        namespace: dict[str, Any] = {"__name__": "readme"}
        exec(compile(code, "README.md", "exec"), namespace)
        if callable(namespace.get("program")):
            namespace["program"]()
        for value in namespace.values():
            values = value if isinstance(value, list) else [value]
            made += [v for v in values if isinstance(v, pulumi.Resource)]

    def check(_: object) -> None:
        # The quickstart declares one adapter; the staged example one; the platform stack
        # three, its InferenceService and the re-sync loop; the adoption example one.
        assert len(python) == 4
        assert recorder.types.count(RESOURCE_TYPE) == 6
        assert recorder.inputs["sql-staged"]["source"].startswith("hf://acme/sql-lora@")
        assert "kubernetes:inference.llmkube.dev/v1alpha1:InferenceService" in recorder.types
        assert "pulumi-lora:index:ResyncDeployment" in recorder.types
        assert recorder.inputs["adapter"]["transport"] == quickstart_defaults()["transport"]

    return pulumi.Output.all(*(r.urn for r in made)).apply(check)


def test_the_quickstart_program_is_the_examples() -> None:
    """The README shows ``examples/quickstart/__main__.py`` exactly, below its docstring: the
    same resource name, arguments and exports."""
    source = (QUICKSTART / "__main__.py").read_text()
    docstring = re.match(r'""".*?"""\n\n', source, re.S)
    assert docstring is not None
    quickstart = section("Quickstart")
    (shown,) = re.findall(r"```python\n(.*?)```", quickstart, re.S)
    assert shown == source[docstring.end() :]


def test_the_quickstart_lines_set_the_examples_config() -> None:
    """The quickstart's shell lines set a transport, and only keys the example declares; the
    config keys the README lists are the example's, with its defaults."""
    (lines,) = [b for b in blocks("sh") if b.startswith("cd examples/quickstart\n")]
    defaults = quickstart_defaults()
    set_keys = re.findall(r"^pulumi config set (\S+) ", lines, re.M)
    assert "transport" in set_keys
    assert "pulumi config set transport proxy" in lines
    assert all(key in defaults for key in set_keys if ":" not in key), set_keys
    listed = dict(re.findall(r"`(\w+)` \(`([^`]+)`", section("Quickstart")))
    assert listed == defaults


def test_every_input_in_the_reference_exists_and_every_input_is_in_it() -> None:
    rows = table_rows(README, "Inputs (`LoRAAdapterArgs`")
    names = [ticked(row[0])[0] for row in rows]
    assert names == list(INPUT_KEYS) or sorted(names) == sorted(INPUT_KEYS), names
    assert set(names) == set(AdapterInputs.__annotations__)
    defaults = AdapterArgs.defaults()
    for row in rows:
        name, default = ticked(row[0])[0], row[1]
        if default == "required":
            assert name not in defaults, name
            continue
        assert name in defaults, name
        literal = ticked(default)
        if literal and literal[0] != "namespace":  # `namespace`: the other input's value
            expected = defaults[name]
            text = str(expected).lower() if isinstance(expected, bool) else str(expected)
            assert literal[0] in (text, text.removesuffix(".0")), (name, literal, expected)
    replaced = re.search(r"A change of (.*?) replaces the resource", README, re.S)
    assert replaced is not None
    assert set(ticked(replaced.group(1))) == set(REPLACE_KEYS)


def test_the_stack_config_and_outputs_in_the_reference_are_the_codes() -> None:
    rows = table_rows(README, "Stack config (`pulumi-lora:*`")
    keys = [ticked(row[0])[0].removeprefix("pulumi-lora:") for row in rows]
    assert sorted(keys) == sorted(CONFIG_KEYS)
    timeouts = ClientTimeouts()
    for row in rows:
        key = ticked(row[0])[0].removeprefix("pulumi-lora:")
        if key in TIMEOUT_KEYS:
            seconds = getattr(timeouts, TIMEOUT_KEYS[key])
            assert ticked(row[1]) == [f"{seconds:g}"], key

    outputs = table_rows(README, "Outputs (Python names")
    named = {name for row in outputs for name in ticked(row[0])}
    assert named == set(OUTPUT_KEYS), named ^ set(OUTPUT_KEYS)
    pods = next(row[1] for row in outputs if ticked(row[0]) == ["pods"])
    assert "since" not in pods  # a pods entry has no such key (_provider.pod_output)


def test_the_loops_default_replica_count_is_the_codes() -> None:
    default = inspect.signature(resync_manifests).parameters["replicas"].default
    assert f"(default **{default}**" in README
    assert "two replicas" not in README.lower()


DOCUMENTED_COMMANDS = sorted(set(re.findall(r"(?:`|^)pulumi-lora ([a-z][a-z-]+)", README, re.M)))


def test_the_readme_documents_the_operator_commands() -> None:
    assert {
        "doctor",
        "status",
        "coexistence-policy",
        "finish-delete",
        "resync",
        "stage",
        "stage-serve",
        "unstage",
        "verify-staged",
    } <= set(DOCUMENTED_COMMANDS)


@pytest.mark.parametrize("command", DOCUMENTED_COMMANDS)
def test_every_documented_command_exists(command: str) -> None:
    """``pulumi-lora <cmd> --help`` exits 0 for every command the README names."""
    done = CliRunner().invoke(cli, [command, "--help"])
    assert done.exit_code == 0, done.output


def test_the_platform_snippet_starts_sglang_as_the_example_does() -> None:
    """The snippet's ``extraArgs`` are the example's: without --lora-target-modules, ``doctor``
    fails and loads of adapters with other target modules are refused."""
    example = (ROOT / "examples" / "platform" / "__main__.py").read_text()
    (extra_args,) = re.findall(r'"extraArgs": \[.*?\]', example)
    platform = next(code for code in blocks("python") if "ResyncDeployment" in code)
    assert extra_args in platform and "--lora-target-modules" in extra_args


def test_a_reader_meets_the_sections_in_the_order_they_need_them() -> None:
    headings = re.findall(r"^## (.+)$", README, re.M)
    order = [
        "Prerequisites",
        "Install",
        "Check the InferenceService: `pulumi-lora doctor`",
        "Coexistence with LLMKube's controller",
        "Quickstart",
        "Keep adapters loaded: the re-sync loop",
        "Reference: inputs, stack config, outputs",
        "Adopting running adapters",
        "Troubleshooting",
        "Operator commands",
        "Other Pulumi languages",
        "Compatibility",
    ]
    assert [h for h in headings if h in order] == order
    assert "### How will `pulumi` reach the pods?" in section("Prerequisites")
    coexistence = "pulumi-lora coexistence-policy | kubectl apply -f -"
    assert README.index(coexistence) < README.index("\n## Quickstart\n")
    assert "Both namespaces must exist" in README
    assert "kubectl create namespace models && kubectl create namespace pulumi-lora" in README


def test_the_install_is_what_exists() -> None:
    """Nothing is on PyPI: the README installs from a checkout or a wheel tools/release.py
    builds, and names no test-rig material on the user's path."""
    install = section("Install")
    assert "pip install /path/to/pulumi-lora" in install
    assert "python3 tools/release.py" in install and (ROOT / "tools" / "release.py").is_file()
    assert not re.search(r"pip install '?pulumi-lora[\[ '\n]", README)
    assert "tests/" not in README
    assert "source venv/bin/activate" not in README.replace(
        "python3 -m venv venv && venv/bin/pip install -r requirements.txt\nsource venv/bin/"
        "activate",
        "",
    )


def test_every_relative_link_points_at_a_file() -> None:
    links = re.findall(
        r"\]\(((?:docs/|provider/|examples/|deploy/|CHANGELOG|LICENSE)[^)#]*)", README
    )
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def test_every_anchor_names_a_heading() -> None:
    def anchor(heading: str) -> str:
        return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")

    anchors = {anchor(h) for h in re.findall(r"^#{2,3} (.+)$", README, re.M)}
    used = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert used <= anchors, used - anchors


def test_the_example_inference_service_mounts_the_claim_as_the_staged_tests_do() -> None:
    """The README's InferenceService with its adapter volume is the shape the staged tests run
    (the testbed's ``adapter_volume``) and passes doctor's volume check."""
    (text,) = [b for b in blocks("yaml") if "kind: InferenceService" in b]
    spec = yaml.safe_load(text)["spec"]
    expected = adapter_volume("adapters")
    assert {k: spec[k] for k in expected} == expected
    assert check_adapter_volumes(spec).status is CheckStatus.OK
    assert check_enable_lora(normalize_args(spec["extraArgs"]), False).status is CheckStatus.OK
