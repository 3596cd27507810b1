"""Fixtures of the CLI tests: the user's path, `pulumi` subcommands in a project folder.

A user's Python project has a virtualenv made from its ``requirements.txt``; here that happens once
per run (the xdist workers share it), in a fresh project that names this repository's wheel
(built once; a user outside the repository gets the same from a registry) as its requirement, the
way the README tells a user of the language host built here to do it (``python3 -m venv venv``,
``venv/bin/pip install -r requirements.txt``, then ``source venv/bin/activate``: that host runs
programs in the activated virtualenv, see "Language hosts" in docs/development.md). Every other
project folder links its ``venv`` to that one and runs with it activated, so the language host
runs the program, and the engine serves its dynamic resources, with that virtualenv's Python.
Plugin acquisition is left on, as a user has it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pulumi_lora.testing.engine import LocalEngine, ProjectDir
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import (
    BinaryNotFoundError,
    InferenceServiceHandle,
    Testbed,
    find_binary,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HOSTS = ("pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python")


@dataclass(frozen=True)
class UserVenv:
    """The virtualenv of a fresh user project (``venv/`` in ``project``)."""

    path: Path
    project: Path


def user_requirements(wheel: Path) -> str:
    """A user's ``requirements.txt``: this repository's ``wheel`` (what a user outside the
    repository installs from a registry), with the kubernetes extra the platform example needs,
    at the pinned versions. A wheel, not the source folder: pip builds a folder again on every
    install (``pulumi install`` included), a wheel it finds already installed."""
    constraints = ROOT / ".venv" / "constraints.txt"  # written by tools/provision.py
    return f"-c {constraints}\n{wheel}[kubernetes]\n"


@pytest.fixture(scope="session")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> UserVenv:
    """``pulumi install`` in a fresh Python project: the venv every CLI test's program runs in.

    Built once per run, not once per worker: under xdist the workers share the run's temporary
    root, and the first to get there builds it under a file lock while the others wait, so the
    CLI modules can spread over the workers like any others."""
    try:
        pulumi = find_binary("pulumi")
        for host in HOSTS:
            if not (pulumi.path.parent / host).exists():
                raise BinaryNotFoundError(host, [pulumi.path.parent])
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    project = shared / "fresh-project"
    with open(shared / "fresh-project.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (project / "built").exists():
            shutil.rmtree(project, ignore_errors=True)
            build_user_project(project)
            (project / "built").touch()
    return UserVenv(project / "venv", project)


def build_user_project(project: Path) -> None:
    """A fresh Python project at ``project`` and its ``venv``, made as the README says."""
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: fresh\nruntime:\n  name: python\n  options:\n    virtualenv: venv\n"
    )
    (project / "__main__.py").write_text(
        "import pulumi\nimport pulumi_lora\n\npulumi.export('version', pulumi_lora.__version__)\n"
    )
    wheels = project / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)]
    done = subprocess.run(build, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"{build}: {done.stdout}{done.stderr}"
    (wheel,) = wheels.glob("pulumi_lora-*.whl")
    (project / "requirements.txt").write_text(user_requirements(wheel))
    venv = project / "venv"
    for argv in (
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", "requirements.txt"],
    ):
        done = subprocess.run(
            argv, cwd=project, capture_output=True, text=True, timeout=900, check=False
        )
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"


@pytest.fixture
def consumer_engine(tmp_path: Path, user_venv: UserVenv) -> LocalEngine:
    """A private installation for a program of another language that uses ``provider/``: its
    shell names the Python that serves the plugin and the dynamic child (``PULUMI_PYTHON_CMD``,
    the user venv's), and, offline, resolves no package in Pulumi's registry."""
    return LocalEngine(
        tmp_path / "consumer-engine",
        extra_env={
            "PULUMI_PYTHON_CMD": str(user_venv.path / "bin" / "python"),
            "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
        },
    )


def require_program(name: str) -> None:
    """A language host or tool the test runs; missing, it skips (fails under ``CI=true``)."""
    try:
        find_binary(name)
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))


Project = Callable[..., ProjectDir]


@pytest.fixture
def project(
    engine: LocalEngine, user_venv: UserVenv, testbed: Testbed, tmp_path: Path
) -> Iterator[Project]:
    """``project(source, stack, files=None, init=True)``: a copy of a project folder (or of
    ``files`` of it), its virtualenv linked to the user venv and activated; with ``init``, a stack
    made and pointed at the testbed (``pulumi stack init``, ``pulumi config set
    pulumi-lora:kubeconfig``), as a user sets one up. Stacks still holding resources are
    destroyed at the end."""
    made: list[ProjectDir] = []

    def make(
        source: Path, stack: str = "dev", files: tuple[str, ...] | None = None, init: bool = True
    ) -> ProjectDir:
        folder = tmp_path / (source.name or "root")
        if files is None:
            ignore = shutil.ignore_patterns("venv", ".venv", "Pulumi.*.yaml")
            shutil.copytree(source, folder, ignore=ignore)
        else:
            folder.mkdir()
            for name in files:
                shutil.copy(source / name, folder / name)
        settings = yaml.safe_load((folder / "Pulumi.yaml").read_text())
        virtualenv = settings["runtime"]["options"]["virtualenv"]
        (folder / virtualenv).symlink_to(user_venv.path, target_is_directory=True)
        runner = engine.project(folder, venv=folder / virtualenv)
        made.append(runner)
        if init:
            runner.pulumi("stack", "init", stack)
            runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
        return runner

    yield make
    for runner in made:
        runner.pulumi("destroy", "--yes", "--skip-preview", check=False)


def served(handle: InferenceServiceHandle, key: str = "") -> dict[str, dict[str, str]]:
    """Every Ready pod's adapters (name → path), read from its own ``/v1/models``."""
    return handle.served(api_key=key)


def example_beside_provider(name: str, into: Path, *ignore: str) -> Path:
    """A copy of ``examples/NAME`` at the same distance from a link to ``provider/`` as in the
    repository, so its relative plugin path (``../../provider``) holds."""
    folder = into / "examples" / name
    shutil.copytree(EXAMPLES / name, folder, ignore=shutil.ignore_patterns(*ignore))
    (into / "provider").symlink_to(ROOT / "provider", target_is_directory=True)
    return folder


def ready_service(testbed: Testbed, namespace: str) -> InferenceServiceHandle:
    """``llama`` in ``namespace``: two Ready pods, with ``/adapters/sql-lora`` on disk."""
    testbed.make_adapter("sql-lora")
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=60)
    return handle


def stack_on_testbed(runner: ProjectDir, testbed: Testbed, namespace: str) -> None:
    """``pulumi stack init dev``, the testbed's kubeconfig and ``namespace`` as stack config."""
    runner.pulumi("stack", "init", "dev")
    runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
    runner.pulumi("config", "set", "namespace", namespace)


def assert_nothing_left(
    testbed: Testbed, handles: Iterable[InferenceServiceHandle], key: str = ""
) -> None:
    """After a destroy: no pod serves an adapter, and no LoRAAdapter CR is left (kubectl)."""
    for handle in handles:
        assert all(adapters == {} for adapters in served(handle, key).values())
        listed = testbed.kubectl("get", "loraadapters", "-n", handle.namespace, "-o", "name")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.strip() == ""


def assert_clean_refresh(runner: Any, *, whole_stack: bool = True) -> None:
    """What an undrifted stack's ``pulumi preview --refresh`` prints (issue 21): no drift line,
    no property diff on any LoRAAdapter step; with ``whole_stack`` (every resource is
    pulumi-lora's) no property diff at all under ``--diff``, and ``refresh --expect-no-changes``
    exits 0. Other providers' resources (pulumi-kubernetes' InferenceService, whose status the
    operator keeps writing) may change on a refresh: that is theirs to say."""
    if not whole_stack:
        done = runner.pulumi("preview", "--refresh", "--expect-no-changes")
        text = done.stdout + done.stderr
        assert "drift:" not in text, text
        lines = text.splitlines()
        assert not [line for line in lines if "LoRAAdapter" in line and "[diff:" in line], text
        return
    # One preview says both: ``--diff`` prints every changed property as a +/-/~ line.
    done = runner.pulumi("preview", "--refresh", "--expect-no-changes", "--diff")
    text = done.stdout + done.stderr
    changed = [line for line in text.splitlines() if re.match(r"^\s+[-+~]\s*\w+:\s", line)]
    assert "drift:" not in text and "[diff:" not in text and not changed, text
    refreshed = runner.pulumi("refresh", "--yes", "--skip-preview", "--expect-no-changes")
    assert refreshed.returncode == 0


def lora_resources(runner: Any) -> list[tuple[str, bool, str]]:
    """Every resource of the stack whose type is pulumi-lora's or a dynamic one, as
    ``pulumi stack export`` shows it: (type, custom, id)."""
    exported = json.loads(runner.pulumi("stack", "export").stdout)
    return [
        (r["type"], bool(r.get("custom")), str(r.get("id", "")))
        for r in exported["deployment"]["resources"]
        if r["type"].startswith(("pulumi-lora:", "pulumi-python:"))
    ]
