"""Adapters that already run, brought under a YAML stack through the CLI (issue 24): ``pulumi
import`` of a CR made by kubectl, and a stack made by 0.2's component moved to the custom resource.

Every pod refuses every load and unload (``REFUSE``, armed for far more requests than a command
could send) and the faults' remaining count proves none reached a pod; LLMKube's own LoRA
controller, played by the testbed, sends nothing either (the session's coexistence policy holds
it off); the CR keeps its uid and its resourceVersion (no write at all). What the user reads, the
CLI's import and preview text, is asserted as printed.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from pulumi_lora.testing.engine import LocalEngine, ProjectDir
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

from .conftest import (
    ROOT,
    UserVenv,
    example_beside_provider,
    ready_service,
    require_program,
    served,
    stack_on_testbed,
)

TIMES = 1000
"""How many requests each armed fault answers: far more than a command could send."""
REFUSE = [
    f"/load_lora_adapter:status=500,times={TIMES}",
    f"/unload_lora_adapter:status=500,times={TIMES}",
]
OLD_PROVIDER = Path(__file__).resolve().parent / "component_provider_0_2"
"""``provider/`` as 0.1.0 to 0.2.0 shipped it: the component with a dynamic child."""
TOKEN = "pulumi-lora:index:LoRAAdapter"
CHILD = "pulumi-python:dynamic:Resource"


@contextmanager
def refusing(handle: InferenceServiceHandle) -> Iterator[None]:
    """Every Ready pod answers every load and unload with a 500 while inside; on leaving, each
    fault must still have all its ``TIMES`` left: no such request reached any pod."""
    pods = handle.ready_pods()
    for pod in pods:
        answer = httpx2.post(f"{pod.url}/_emulator/faults", json={"faults": REFUSE}, timeout=5)
        assert answer.status_code == 200, answer.text
    try:
        yield
        for pod in pods:
            armed = httpx2.get(f"{pod.url}/_emulator/faults", timeout=5).json()["faults"]
            assert [f["remaining"] for f in armed] == [TIMES, TIMES], (pod.name, armed)
    finally:
        for pod in pods:
            httpx2.delete(f"{pod.url}/_emulator/faults", timeout=5)


def cr_identity(testbed: Testbed, namespace: str, name: str) -> tuple[str, str]:
    """The CR's (uid, resourceVersion): the second moves on any write, status included."""
    done = testbed.kubectl("get", "loraadapter", name, "-n", namespace, "-o", "json")
    assert done.returncode == 0, done.stderr
    meta = json.loads(done.stdout)["metadata"]
    return meta["uid"], meta["resourceVersion"]


def kubectl_made(testbed: Testbed, handle: InferenceServiceHandle, path: str) -> None:
    """``sql-lora`` as a team runs it before Pulumi: a CR applied with kubectl, the adapter
    loaded on every pod by hand."""
    manifest = {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": "sql-lora", "namespace": handle.namespace},
        "spec": {"inferenceServiceRef": {"name": "llama"}, "name": "sql-lora", "path": path},
    }
    done = testbed.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    assert done.returncode == 0, done.stderr
    for pod in handle.ready_pods():
        body = {"lora_name": "sql-lora", "lora_path": path}
        assert httpx2.post(f"{pod.url}/load_lora_adapter", json=body, timeout=10).status_code == 200


def llmkube_sent(testbed: Testbed, namespace: str) -> list[Any]:
    """What LLMKube's played controller sent to pods for CRs of ``namespace``."""
    controller = testbed.llmkube
    assert controller is not None, "the testbed plays LLMKube's controller by default"
    return [r for r in controller.requests() if r.adapter.startswith(f"{namespace}/")]


def resources(runner: ProjectDir) -> list[dict[str, Any]]:
    """The stack's resources as ``pulumi stack export`` shows them."""
    exported = json.loads(runner.pulumi("stack", "export").stdout)
    found: list[dict[str, Any]] = exported["deployment"]["resources"]
    return found


def one_custom_resource(runner: ProjectDir, namespace: str) -> dict[str, Any]:
    """The stack's only LoRAAdapter: custom, of the schema's type, with the CR's ID."""
    adapters = [r for r in resources(runner) if TOKEN in r["type"] or r["type"] == CHILD]
    assert [(r["type"], r.get("custom", False)) for r in adapters] == [(TOKEN, True)], adapters
    assert adapters[0]["id"] == f"{namespace}/sql-lora"
    return adapters[0]


def test_pulumi_import_adopts_a_running_adapter_with_no_load_or_unload(
    consumer_engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    require_program("pulumi-language-yaml")
    handle = ready_service(testbed, namespace)
    path = "/adapters/sql-lora"
    kubectl_made(testbed, handle, path)
    before = cr_identity(testbed, namespace, "sql-lora")
    folder = example_beside_provider("yaml", tmp_path, "Pulumi.*.yaml")
    runner = consumer_engine.project(folder)
    stack_on_testbed(runner, testbed, namespace)
    sent_before = len(llmkube_sent(testbed, namespace))

    with refusing(handle):
        imported = runner.pulumi(
            "import", TOKEN, "sql", f"{namespace}/sql-lora", "--yes", "--protect=false"
        )
        text = imported.stdout
        assert f" =  {TOKEN} sql import \n" in text, text  # the preview's step
        assert f" =  {TOKEN} sql imported" in text and "    = 1 imported\n" in text, text
        # The code it prints for the program: the CR's spec, nothing at its default.
        assert "    type: pulumi-lora:LoRAAdapter\n" in text, text
        assert "      adapterName: sql-lora\n" in text and f"      path: {path}\n" in text
        assert "pinned" not in text.split("resources:")[-1], text
        one_custom_resource(runner, namespace)

        # The example declares the same adapter: the next up has nothing to do.
        same = runner.pulumi("preview", "--expect-no-changes")
        assert "LoRAAdapter" not in same.stdout, same.stdout
        up = runner.pulumi("up", "--yes", "--skip-preview")
        assert "1 unchanged" in up.stdout or "2 unchanged" in up.stdout, up.stdout

        # A program that differs from the CR: the preview proposes exactly that difference.
        program = folder / "Pulumi.yaml"
        shipped = program.read_text()
        program.write_text(shipped.replace("pinned: false", "pinned: true"))
        differs = runner.pulumi("preview").stdout
        lines = [line.rstrip() for line in differs.splitlines() if "LoRAAdapter sql" in line]
        assert lines == [f" ~  {TOKEN} sql update [diff: ~pinned]"], differs
        assert "    ~ 1 to update\n" in differs, differs
        detail = runner.pulumi("preview", "--diff").stdout
        changed = [
            line.strip() for line in detail.splitlines() if re.match(r"^\s+[-+~] \w+: ", line)
        ]
        assert changed == ["~ pinned: false => true"], detail
        program.write_text(shipped)

    assert cr_identity(testbed, namespace, "sql-lora") == before  # same uid, not even a write
    assert len(llmkube_sent(testbed, namespace)) == sent_before
    assert all(a == {"sql-lora": path} for a in served(handle).values())
    runner.pulumi("destroy", "--yes", "--skip-preview")
    assert all(a == {} for a in served(handle).values())


def test_a_stack_made_by_the_component_moves_to_the_custom_resource(
    consumer_engine: LocalEngine,
    user_venv: UserVenv,
    testbed: Testbed,
    namespace: str,
    tmp_path: Path,
) -> None:
    """0.2's component and dynamic child become the one custom resource with the commands
    docs/migration.md gives, with no load, no unload and no CR write; an alias cannot do it."""
    require_program("pulumi-language-yaml")
    handle = ready_service(testbed, namespace)
    path = "/adapters/sql-lora"
    folder = example_beside_provider("yaml", tmp_path, "Pulumi.*.yaml")
    old = tmp_path / "old-provider"
    shutil.copytree(OLD_PROVIDER, old)
    program = folder / "Pulumi.yaml"
    shipped = program.read_text()
    program.write_text(shipped.replace("pulumi-lora: ../../provider", f"pulumi-lora: {old}"))
    runner = consumer_engine.project(folder)
    stack_on_testbed(runner, testbed, namespace)
    runner.pulumi("up", "--yes", "--skip-preview")
    made = [(r["type"], r.get("custom", False)) for r in resources(runner)]
    assert (TOKEN, False) in made and (CHILD, True) in made  # the component, its dynamic child
    before = cr_identity(testbed, namespace, "sql-lora")
    sent_before = len(llmkube_sent(testbed, namespace))
    program.write_text(shipped)  # the plugin of this release

    with refusing(handle):
        # Not by an alias: the engine matches the custom resource to the component by URN
        # first, replaces it and deletes the child (an unload). The preview says so.
        replaced = runner.pulumi("preview").stdout
        assert f" +- {TOKEN} sql replace" in replaced, replaced
        assert f" -  {CHILD} sql delete" in replaced, replaced

        # The lines docs/migration.md gives: `pulumi stack export | pulumi-lora component-moves`,
        # then what it prints, as printed.
        exported = runner.pulumi("stack", "export").stdout
        printed = subprocess.run(
            [str(user_venv.path / "bin" / "pulumi-lora"), "component-moves"],
            input=exported, cwd=folder, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert printed.returncode == 0, printed.stderr
        lines = [line for line in printed.stdout.splitlines() if not line.startswith("#")]
        assert [line.split(" --")[0].split(" '")[0] for line in lines] == [
            "pulumi state remove",
            "pulumi import",
            "pulumi preview",
        ], printed.stdout
        assert json.loads((folder / "lora-imports.json").read_text()) == {
            "resources": [{"type": TOKEN, "name": "sql", "id": f"{namespace}/sql-lora"}]
        }
        removed = runner.pulumi(*shlex.split(lines[0])[1:])
        assert "3 resources deleted" in removed.stdout + removed.stderr, removed.stdout
        imported = runner.pulumi(*shlex.split(lines[1])[1:]).stdout
        assert f" =  {TOKEN} sql imported" in imported and "    = 1 imported\n" in imported
        after = runner.pulumi(*shlex.split(lines[2])[1:])
        assert "LoRAAdapter" not in after.stdout, after.stdout
        runner.pulumi("up", "--yes", "--skip-preview")
        one_custom_resource(runner, namespace)

    assert cr_identity(testbed, namespace, "sql-lora") == before
    assert len(llmkube_sent(testbed, namespace)) == sent_before
    assert all(a == {"sql-lora": path} for a in served(handle).values())
    assert runner.outputs()["loaded"] is True
    runner.pulumi("destroy", "--yes", "--skip-preview")
    assert all(a == {} for a in served(handle).values())


def test_the_old_provider_is_the_component_plugin() -> None:
    """The fixture is the plugin of 0.1.0 to 0.2.0: the component host serving
    ``_pulumi._component.LoRAAdapter``, started by the same kind of executable as
    ``provider/``'s."""
    main = (OLD_PROVIDER / "__main__.py").read_text()
    assert "component_provider_host(COMPONENTS" in main
    assert "from pulumi_lora._pulumi._component import LoRAAdapter" in main
    entry = (OLD_PROVIDER / "pulumi-resource-pulumi-lora").read_text()
    assert entry.splitlines()[-1] == 'exec "$python" -u "$here" "$@"'
    assert (
        (ROOT / "provider" / "pulumi-resource-pulumi-lora")
        .read_text()
        .endswith('exec "$python" -u "$here" "$@"\n')
    )
