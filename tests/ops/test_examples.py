"""The examples, run for real: each one's ``program()`` as an Automation API inline stack on the
real engine (``LocalEngine``) against the testbed, then ``up``, the pods checked, ``destroy``.

Each example folder is copied to a temporary directory and used as the stack's work dir, so its
own ``Pulumi.yaml`` (project name, config defaults) applies and the stack's config file lands
outside the repository. The drift check runs as the script it is, in a subprocess.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from click.testing import CliRunner
from pulumi import automation as auto

from pulumi_lora._commands._operator import status_command
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Served = Callable[[InferenceServiceHandle], dict[str, dict[str, str]]]


def load_example(name: str, folder: Path) -> ModuleType:
    """The example's ``__main__.py`` as a module (its ``__main__`` guard keeps it from running)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", folder / "__main__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_example(name: str, tmp_path: Path) -> Path:
    work_dir = tmp_path / name
    shutil.copytree(
        EXAMPLES / name, work_dir, ignore=shutil.ignore_patterns("venv", "Pulumi.*.yaml")
    )
    return work_dir


def example_stack(engine: LocalEngine, work_dir: Path, stack: str, testbed: Testbed) -> auto.Stack:
    """An inline stack of the example in ``work_dir``, pointed at the testbed."""
    project = yaml.safe_load((work_dir / "Pulumi.yaml").read_text())["name"]
    program = load_example(work_dir.name.replace("-", "_"), work_dir).program
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(work_dir),
        pulumi_home=str(engine.home / "pulumi-home"),
        env_vars=engine.env,
        pulumi_command=engine.command(),
    )
    created = auto.create_or_select_stack(stack, project, program, opts=opts)
    created.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    return created


def drift_check(
    engine: LocalEngine, work_dir: Path, stack: str
) -> subprocess.CompletedProcess[str]:
    script = EXAMPLES / "drift-check" / "drift_check.py"
    argv = [sys.executable, str(script), "--stack", stack, "--work-dir", str(work_dir)]
    argv += ["--program", str(work_dir / "__main__.py")]
    env = {**os.environ, **engine.env}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240, check=False)


def test_quickstart_up_drift_check_and_destroy(
    engine: LocalEngine,
    testbed: Testbed,
    namespace: str,
    tmp_path: Path,
    served: Served,
    unload: Callable[[str, str], None],
) -> None:
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=30)
    path = testbed.make_adapter("sql-lora")  # = the default adapterPath, /adapters/sql-lora
    work_dir = copy_example("quickstart", tmp_path)
    stack = example_stack(engine, work_dir, "quickstart", testbed)
    stack.set_config("namespace", auto.ConfigValue(namespace))  # the rest: Pulumi.yaml defaults

    up = stack.up()
    assert up.outputs["loaded"].value is True
    pods = up.outputs["pods"].value
    assert {p["pod"] for p in pods} == {p.name for p in handle.ready_pods()}
    assert all(p["loaded"] and "path" not in p for p in pods)  # the resource's own path
    assert all(adapters == {"sql-lora": path} for adapters in served(handle).values())

    clean = drift_check(engine, work_dir, "quickstart")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "no drift" in clean.stdout

    lost = handle.ready_pods()[0]
    unload(lost.url, "sql-lora")
    drifted = drift_check(engine, work_dir, "quickstart")
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "drift: stack 'quickstart' differs from the cluster in 1 resource(s)" in drifted.stdout
    assert "LoRAAdapter" in drifted.stdout  # the drifted resource is named
    assert (  # and what drifted, in words
        f"what drifted:\n  LoRAAdapter {namespace}/sql-lora: pod {lost.name}: sql-lora not "
        "loaded\n`pulumi up` heals it"
    ) in drifted.stdout, drifted.stdout

    stack.up()  # heals
    assert all(adapters == {"sql-lora": path} for adapters in served(handle).values())
    stack.destroy()
    assert get_adapter(testbed.client(), namespace, "sql-lora") is None
    assert all(adapters == {} for adapters in served(handle).values())


def test_drift_check_cannot_run_on_a_missing_stack(engine: LocalEngine, tmp_path: Path) -> None:
    work_dir = copy_example("quickstart", tmp_path)
    result = drift_check(engine, work_dir, "no-such-stack")
    assert result.returncode == 2
    assert "could not open stack 'no-such-stack'" in result.stderr


def fleet_file(testbed: Testbed, namespaces: dict[str, str], into: Path) -> dict[str, Any]:
    """The shipped adapters.yaml, moved to the test's namespaces, every adapter made real."""
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / "fleet" / "adapters.yaml").read_text())
    for service in data["services"]:
        service["namespace"] = namespaces[service["namespace"]]
        for adapter in service["adapters"]:
            assert testbed.make_adapter(adapter["name"]) == adapter["path"]
    into.write_text(yaml.safe_dump(data))
    return data


def test_fleet_from_a_data_file_across_namespaces(
    engine: LocalEngine, testbed: Testbed, namespace: str, tmp_path: Path, served: Served
) -> None:
    namespaces = {"search": namespace, "support": testbed.create_namespace("fleet-support")}
    work_dir = copy_example("fleet", tmp_path)
    data = fleet_file(testbed, namespaces, tmp_path / "adapters.yaml")
    handles = {
        service["namespace"]: testbed.deploy_inference_service(
            service["namespace"], service["inferenceService"], replicas=2
        )
        for service in data["services"]
    }
    for handle in handles.values():
        handle.wait_ready(timeout=30)
    stack = example_stack(engine, work_dir, "fleet", testbed)
    stack.set_config("adaptersFile", auto.ConfigValue(str(tmp_path / "adapters.yaml")))

    up = stack.up()
    declared = {
        f"{s['namespace']}/{a['name']}": (s["namespace"], a["name"], a["path"])
        for s in data["services"]
        for a in s["adapters"]
    }
    assert up.outputs["loaded"].value == dict.fromkeys(declared, True)
    for ns, name, path in declared.values():
        assert all(adapters.get(name) == path for adapters in served(handles[ns]).values())

    table = up.outputs["table"].value.splitlines()
    assert table[0].split() == ["NAMESPACE", "SERVICE", "ADAPTER", "POD", "LOADED", "PATH"]
    rows = [line.split() for line in table[1:]]
    assert len(rows) == 2 * len(declared)  # one line per adapter and pod
    assert all(row[4] == "yes" for row in rows)
    for ns, handle in handles.items():
        assert {row[3] for row in rows if row[0] == ns} == {p.name for p in handle.ready_pods()}

    for ns in namespaces.values():  # the operator's view agrees
        status = CliRunner().invoke(
            status_command, ["-n", ns, "--kubeconfig", str(testbed.kubeconfig_path)]
        )
        assert status.exit_code == 0, status.output

    stack.destroy()
    for ns, name, _ in declared.values():
        assert all(name not in adapters for adapters in served(handles[ns]).values())
