"""The command, the layering of the loop's package, and its structured logs."""

from __future__ import annotations

import ast
import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

import pulumi_lora
from pulumi_lora._commands._main import cli
from pulumi_lora._commands._resync import resync_command
from pulumi_lora._resync import _logs as logs
from pulumi_lora.deploy import resync_manifests

PACKAGE = Path(pulumi_lora.__file__).parent
PURE = ("_resync._views", "_resync._decide", "_resync._world", "_resync._status")
IO_LIBRARIES = {"httpx2", "lightkube", "pulumi", "pulumi_kubernetes", "prometheus_client"}


def _source(module: str) -> Path:
    """The file of ``pulumi_lora.<module>``: a module's, or a package's ``__init__.py``."""
    path = PACKAGE / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _is_module(name: str) -> bool:
    """Whether ``name`` is one of this package's modules or packages."""
    return name.startswith("pulumi_lora.") and _source(name.removeprefix("pulumi_lora.")).exists()


def _runtime_imports(module: str) -> set[str]:
    """Modules imported at run time (``if TYPE_CHECKING:`` blocks excluded)."""
    tree = ast.parse(_source(module).read_text())
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(  # `from pulumi_lora._core import _reconcile`: a module too
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if _is_module(f"{node.module}.{alias.name}")
                )
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit([n for n in getattr(node, field, []) if isinstance(n, ast.stmt)])

    visit(tree.body)
    return found


def test_the_decisions_import_no_io_library_even_transitively() -> None:
    seen: set[str] = set()
    todo = list(PURE)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in _runtime_imports(module):
            top = name.split(".")[0]
            assert top not in IO_LIBRARIES, f"pulumi_lora.{module} imports {name}"
            if name.startswith("pulumi_lora."):
                todo.append(name.removeprefix("pulumi_lora."))
    assert {"_core._reconcile", "_models", "_resync._decide"} <= seen
    assert not {"_kube._objects", "_sglang", "_sglang._executor"} & seen


def test_the_command_mounts_on_a_group_and_documents_its_flags() -> None:
    assert isinstance(resync_command, click.Command) and resync_command.name == "resync"
    group = click.Group("pulumi-lora", commands={"resync": resync_command})
    result = CliRunner().invoke(group, ["resync", "--help"])
    assert result.exit_code == 0, result.output
    for flag in (
        "--namespace",
        "--verify-interval",
        "--lease-name",
        "--lease-namespace",
        "--metrics-port",
        "--kubeconfig",
        "--concurrency",
        "--shutdown-timeout",
    ):
        assert flag in result.output


def test_the_module_entry_and_the_main_cli() -> None:
    assert "resync" in cli.list_commands(click.Context(cli))
    argv = [sys.executable, "-m", "pulumi_lora", "resync", "--help"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--verify-interval" in done.stdout, done.stderr


def test_a_renew_deadline_beyond_the_lease_is_refused() -> None:
    result = CliRunner().invoke(
        resync_command, ["--lease-duration", "5", "--lease-renew-deadline", "5"]
    )
    assert result.exit_code == 2 and "--lease-renew-deadline" in result.output


def test_the_deployment_args_parse() -> None:
    manifests = resync_manifests(
        "ops", "img", watch_namespace="models", extra_args=("--concurrency", "4")
    )
    container = manifests[-1]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["pulumi-lora", "resync"]
    context = resync_command.make_context("resync", list(container["args"]))
    assert context.params["namespace"] == "models" and context.params["concurrency"] == 4


def test_log_lines_are_json_with_the_event_fields() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger(logs.LOGGER_NAME)
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        logs.event("pod_synced", pod="ns/p", loads=3)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logs.failure("pod_run_crashed", pod="ns/p")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["event"] == "pod_synced" and first["loads"] == 3 and first["level"] == "info"
    assert isinstance(first["ts"], float) and first["time"].endswith("+00:00")
    assert second["error"] == "RuntimeError: boom" and "Traceback" in second["traceback"]


def test_credentials_that_do_not_load_are_a_message_not_a_traceback(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "pulumi_lora", "resync", "--kubeconfig", str(tmp_path / "none")]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Error: cannot load cluster credentials" in done.stderr
    assert "Traceback" not in done.stderr
