"""The user's path: `pulumi` commands at a shell in a Python project folder, on the testbed.

Each project (the root demo stack, ``examples/quickstart``, ``examples/fleet``) is copied as
shipped, its ``venv`` is the one ``pulumi install`` made for a fresh project, and it is driven
only by ``pulumi`` subcommands of the built CLI: the ``pulumi-language-python`` host runs the
program, the engine's ``pulumi-resource-pulumi-python`` serves the dynamic resources. Each
scenario: ``up``, outputs checked against every pod's own ``/v1/models``; (the README's
quickstart) an out-of-band unload and a pod restart make ``preview --refresh
--expect-no-changes`` fail naming each in words, and ``up`` heals; ``refresh`` then passes clean;
``stack export`` holds no API key; ``destroy`` leaves no CR and nothing loaded.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import yaml

from pulumi_lora import __version__
from pulumi_lora.testing.engine import LocalEngine, ProjectDir
from pulumi_lora.testing.testbed import DEFAULT_EXTRA_ARGS, InferenceServiceHandle, Testbed

from .conftest import (
    EXAMPLES,
    ROOT,
    Project,
    UserVenv,
    assert_clean_refresh,
    assert_nothing_left,
    served,
)


@dataclass
class Scenario:
    """One project on the testbed: what it declares, and how its outputs say it is loaded."""

    runner: ProjectDir
    services: dict[str, InferenceServiceHandle]
    declared: dict[str, dict[str, str]]
    """Per service (``namespace/name``): adapter → path."""
    key: str
    check_outputs: Callable[[dict[str, Any]], None]

    def all_loaded(self) -> bool:
        """Every Ready pod of every service serves exactly what is declared for it."""
        return all(
            adapters == self.declared[service]
            for service, handle in self.services.items()
            for adapters in served(handle, self.key).values()
        )


def deploy(testbed: Testbed, namespace: str, name: str, key: str) -> InferenceServiceHandle:
    handle = testbed.deploy_inference_service(
        namespace, name, replicas=2, extra_args=(*DEFAULT_EXTRA_ARGS, "--api-key", key)
    )
    handle.wait_ready(timeout=60)
    return handle


def run_scenario(scenario: Scenario, testbed: Testbed) -> None:
    """Up, a clean refresh, export, destroy. (Drift and its heal through the CLI are the README
    quickstart's scenario.)"""
    runner = scenario.runner
    runner.pulumi("config", "set", "--secret", "pulumi-lora:sglangApiKey", scenario.key)

    runner.pulumi("up", "--yes", "--skip-preview")
    assert scenario.all_loaded()
    scenario.check_outputs(runner.outputs())
    assert_clean_refresh(runner)

    exported = runner.pulumi("stack", "export").stdout
    assert scenario.key not in exported
    assert json.loads(exported)["deployment"]["resources"]

    runner.pulumi("destroy", "--yes", "--skip-preview")
    assert_nothing_left(testbed, scenario.services.values(), scenario.key)


def assert_drift_named(text: str, unloaded: str, adapter: str, restarted: str) -> None:
    """``preview --refresh``'s text names each drift in words: the pod that lost ``adapter``
    (unloaded out of band), and the restarted pod that lost it too."""
    cr = "drift: LoRAAdapter "
    assert re.search(rf"{cr}\S+: pod {unloaded}: {adapter} not loaded", text), text
    assert re.search(rf"{cr}\S+: pod {restarted}: {adapter} not loaded", text), text


def pods_of(outputs: list[dict[str, Any]], declared: str) -> dict[str, str]:
    """Output ``pods`` items → pod name → loaded path (only pods reported as loaded; an item
    carries ``path`` only when it is not the resource's own, ``declared``)."""
    return {p["pod"]: p.get("path", declared) for p in outputs if p["loaded"]}


def test_root_stack(project: Project, testbed: Testbed, namespace: str) -> None:
    key = secrets.token_hex(8)
    for name in ("sql-lora", "chat-lora"):
        testbed.make_adapter(name)
    handle = deploy(testbed, namespace, "llama", key)
    runner = project(ROOT, files=("Pulumi.yaml", "__main__.py"))
    runner.pulumi("config", "set", "namespace", namespace)
    runner.pulumi("config", "set", "inferenceService", "llama")
    service = f"{namespace}/llama"

    def check(outputs: dict[str, Any]) -> None:
        adapters = served(handle, key)
        for short in ("sql", "chat"):
            assert outputs[f"{short}_loaded"] is True
            by_pod = pods_of(outputs[f"{short}_pods"], f"/adapters/{short}-lora")
            assert by_pod == {pod: a[f"{short}-lora"] for pod, a in adapters.items()}

    declared = {service: {"sql-lora": "/adapters/sql-lora", "chat-lora": "/adapters/chat-lora"}}
    run_scenario(Scenario(runner, {service: handle}, declared, key, check), testbed)


def readme_quickstart() -> list[str]:
    """The README's quickstart: the ``sh`` block in ``examples/quickstart``, line by line."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith("cd examples/quickstart\n")]
    return [line for line in block.splitlines() if line]


def test_readme_quickstart_as_written(project: Project, testbed: Testbed, namespace: str) -> None:
    """The README's quickstart lines, run in order in ``examples/quickstart`` (its kubeconfig and
    namespace swapped for the testbed's); between its clean ``preview`` and ``destroy``, a pod
    loses the adapter (unload) and another restarts: the same ``preview`` fails, ``up`` heals,
    and after a ``refresh`` it passes again."""
    lines = readme_quickstart()
    assert lines[:3] == [
        "cd examples/quickstart",
        "python3 -m venv venv && venv/bin/pip install -r requirements.txt",  # = user_venv
        "source venv/bin/activate",  # = ProjectDir(venv=...)
    ]
    path = testbed.make_adapter("sql-lora")  # the example's default adapterPath
    # Pods in network namespaces: the apiserver's pod proxy (the README's transport) reaches
    # them, as on a real node (it refuses loopback pod IPs).
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2, network="netns")
    handle.wait_ready(timeout=60)
    runner = project(EXAMPLES / "quickstart", init=False)
    swaps = {"~/.kube/config": str(testbed.kubeconfig_path), "models": namespace}

    def loaded_everywhere() -> bool:
        return all(a == {"sql-lora": path} for a in served(handle).values())

    for line in lines[3:]:
        argv = [swaps.get(word, word) for word in shlex.split(line)]
        assert argv[0] == "pulumi", line
        done = runner.pulumi(*argv[1:])
        if argv[1:3] == ["up", "--yes"]:
            assert loaded_everywhere()
        elif argv[1:4] == ["stack", "output", "pods"]:
            pods = json.loads(done.stdout)
            assert pods_of(pods, path) == {pod.name: path for pod in handle.ready_pods()}
        elif argv[1:3] == ["preview", "--refresh"]:
            first, second = handle.ready_pods()[:2]
            unload = {"lora_name": "sql-lora"}
            assert httpx2.post(f"{first.url}/unload_lora_adapter", json=unload).status_code == 200
            testbed.restart_pod(namespace, second.name)
            handle.wait_ready(timeout=60)
            drift = runner.pulumi(*argv[1:], check=False)
            assert drift.returncode != 0, drift.stdout
            assert_drift_named(drift.stdout, first.name, "sql-lora", second.name)
            runner.pulumi("up", "--yes")
            assert loaded_everywhere()
            runner.pulumi("refresh", "--yes")
            runner.pulumi(*argv[1:])  # clean again
    assert argv[1:] == ["destroy", "--yes"]
    assert_nothing_left(testbed, [handle])


def test_fleet_example(project: Project, testbed: Testbed, namespace: str) -> None:
    key = secrets.token_hex(8)
    namespaces = {"search": namespace, "support": testbed.create_namespace("cli-fleet-support")}
    data = yaml.safe_load((EXAMPLES / "fleet" / "adapters.yaml").read_text())
    services: dict[str, InferenceServiceHandle] = {}
    declared: dict[str, dict[str, str]] = {}
    for entry in data["services"]:
        entry["namespace"] = namespaces[entry["namespace"]]
        service = f"{entry['namespace']}/{entry['inferenceService']}"
        services[service] = deploy(testbed, entry["namespace"], entry["inferenceService"], key)
        declared[service] = {a["name"]: testbed.make_adapter(a["name"]) for a in entry["adapters"]}
    runner = project(EXAMPLES / "fleet")
    (runner.path / "adapters.yaml").write_text(yaml.safe_dump(data))  # the test's namespaces

    def check(outputs: dict[str, Any]) -> None:
        keys = {
            f"{s.split('/')[0]}/{name}" for s, adapters in declared.items() for name in adapters
        }
        assert outputs["loaded"] == dict.fromkeys(keys, True)
        rows = [line.split() for line in outputs["table"].splitlines()[1:]]
        expected = {
            (s.split("/")[0], name, pod, path)
            for s, handle in services.items()
            for pod, adapters in served(handle, key).items()
            for name, path in adapters.items()
        }
        assert {(r[0], r[2], r[3], r[5]) for r in rows if r[4] == "yes"} == expected
        assert len(rows) == len(expected)

    run_scenario(Scenario(runner, services, declared, key, check), testbed)


def test_drift_check_on_a_cli_managed_stack(
    project: Project, testbed: Testbed, namespace: str
) -> None:
    """``examples/drift-check`` opens a stack folder the CLI manages, its program run by the
    language host (no ``--program``)."""
    path = testbed.make_adapter("sql-lora")
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=60)
    runner = project(EXAMPLES / "quickstart")
    runner.pulumi("config", "set", "namespace", namespace)
    runner.pulumi("up", "--yes", "--skip-preview")

    def drift_check() -> subprocess.CompletedProcess[str]:
        script = EXAMPLES / "drift-check" / "drift_check.py"
        argv = [sys.executable, str(script), "--stack", "dev", "--work-dir", str(runner.path)]
        env = runner.env  # the user's shell: the project's virtualenv activated
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=300, check=False
        )

    clean = drift_check()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    pod = handle.ready_pods()[0]
    httpx2.post(f"{pod.url}/unload_lora_adapter", json={"lora_name": "sql-lora"}, timeout=10)
    drifted = drift_check()
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "differs from the cluster in 1 resource(s)" in drifted.stdout
    assert f"  LoRAAdapter {namespace}/sql-lora: pod {pod.name}: sql-lora not loaded" in (
        drifted.stdout
    ), drifted.stdout
    runner.pulumi("up", "--yes", "--skip-preview")
    assert all(a == {"sql-lora": path} for a in served(handle).values())
    assert drift_check().returncode == 0


def test_fresh_project_installs_and_runs_without_downloading(
    user_venv: UserVenv, engine: LocalEngine
) -> None:
    """`pulumi install` and `pulumi up` in a fresh project, plugin acquisition on: pulumi-lora
    declares it has no plugin (``pulumi_lora/pulumi-plugin.json``), so nothing is looked up or
    downloaded for it (without the file the Python host asks for a plugin ``lora`` at this
    package's version). The
    venv also holds the kubernetes extra, whose plugin is the provisioned one in the plugin
    cache (as ``pulumi plugin install --file`` puts it): nothing is downloaded for it either."""
    installed = user_venv.path.glob("lib/python*/site-packages/pulumi_lora/pulumi-plugin.json")
    assert json.loads(next(installed).read_text()) == {"resource": False}
    runner = engine.project(user_venv.project, venv=user_venv.path)
    install = runner.pulumi("install", timeout=900)
    runner.pulumi("stack", "init", "dev")
    up = runner.pulumi("up", "--yes", "--skip-preview")
    assert runner.outputs() == {"version": __version__}
    for done in (install, up):
        text = (done.stdout + done.stderr).lower()
        for needle in ("plugin", "pulumi-resource-lora", f"lora-{__version__}:"):
            assert needle not in text, text
    plugins = engine.home / "pulumi-home" / "plugins"
    assert sorted(p.name for p in plugins.iterdir()) == engine.plugins  # none added
    runner.pulumi("destroy", "--yes", "--skip-preview")
