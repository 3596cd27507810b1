"""``bash scripts/demo.sh`` prints what the user runs and what the engine says, and nothing else.

The demo's stack runs in ``.venv``, which holds pulumi-kubernetes, so the engine resolves the
Kubernetes plugin for a stack that never uses it; found on ``PATH`` (beside the built CLI), it
warns "using pulumi-resource-kubernetes from $PATH" on every command. The demo's engine resolves
it from the plugin cache instead, as a user's installation does.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from pulumi_lora.testing.engine import LocalEngine

from .conftest import ROOT

AMBIENT_WARNING = "using pulumi-resource-kubernetes from $PATH"


def demo_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pulumi_lora_demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def preview(engine: LocalEngine, project: Path) -> str:
    shell = engine.project(project, venv=ROOT / ".venv")
    shell.pulumi("stack", "init", "demo")
    shell.pulumi("config", "set", "pulumi-lora:kubeconfig", str(project / "no-kubeconfig"))
    done = shell.pulumi("preview")
    return done.stdout + done.stderr


def test_the_demo_commands_print_no_plugin_warning(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path / "engine")
    if not (engine.pulumi.path.parent / "pulumi-resource-kubernetes").exists():
        pytest.skip("no provisioned pulumi-resource-kubernetes on PATH: nothing to warn about")
    for name in ("as-before", "demo"):
        (tmp_path / name).mkdir()
        for file in ("Pulumi.yaml", "__main__.py"):
            shutil.copy(ROOT / file, tmp_path / name / file)
        (tmp_path / name / ".venv").symlink_to(ROOT / ".venv")  # Pulumi.yaml: virtualenv: .venv

    # The cause: a plain engine, with the provisioned plugin on PATH, warns ...
    assert AMBIENT_WARNING in preview(engine, tmp_path / "as-before")
    # ... and the demo's engine does not, with the same stack and virtualenv.
    printed = preview(demo_module().demo_engine(tmp_path / "demo-engine"), tmp_path / "demo")
    assert "warning" not in printed.lower(), printed
    assert "+ 3 to create" in printed, printed  # the stack and its two adapters
