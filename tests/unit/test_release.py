"""The release command's pure parts (``tools/release.py``): names, pins, archives, the split of
the product from the test rig; and what ``pulumi-lora`` says when the rig is not installed.

The built artifacts themselves are installed and run in ``tests/release/test_release_install.py``.
"""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def release() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release", ROOT / "tools" / "release.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_archive_names_are_the_ones_the_engine_looks_for() -> None:
    tool = release()
    assert tool.archive_name("0.3.0", "linux", "amd64") == (
        "pulumi-resource-pulumi-lora-v0.3.0-linux-amd64.tar.gz"
    )
    assert set(tool.PLATFORMS) == {
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "amd64"),
        ("darwin", "arm64"),
    }


def test_the_plugin_pins_the_tested_versions_of_the_base_dependencies_only() -> None:
    pins = release().constraints().splitlines()
    names = {line.split("==")[0] for line in pins}
    assert {"pulumi", "httpx", "pydantic", "lightkube", "click", "pyyaml"} <= names
    assert not names & {"pytest", "pulumi-kubernetes", "prometheus-client", "ruff", "mypy"}


def test_a_plugin_archive_is_reproducible_and_its_launcher_executable(tmp_path: Path) -> None:
    tool = release()
    wheel = tmp_path / "pulumi_lora-9.9.9-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    first = tool.plugin_archive(tmp_path / "a.tar.gz", [wheel], "pulumi==1\n").read_bytes()
    second = tool.plugin_archive(tmp_path / "b.tar.gz", [wheel], "pulumi==1\n").read_bytes()
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == [
        "constraints.txt",
        "pulumi-resource-pulumi-lora",
        "wheels/pulumi_lora-9.9.9-py3-none-any.whl",
    ]
    assert members["pulumi-resource-pulumi-lora"].mode == 0o755


def test_the_launcher_is_posix_sh_and_keeps_stdout_for_the_port() -> None:
    launcher = ROOT / "tools" / "release_files" / "pulumi-resource-pulumi-lora"
    assert subprocess.run(["sh", "-n", str(launcher)], check=False).returncode == 0
    text = launcher.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert 'exec "$venv/bin/python" -u -m pulumi_lora._plugin "$@"' in text
    assert "} >&2; then" in text  # venv and pip say nothing on stdout


def test_the_product_wheel_leaves_the_rig_out_and_the_rig_pins_the_product(
    tmp_path: Path,
) -> None:
    hatch = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert "pulumi_lora/testing" in hatch["targets"]["wheel"]["exclude"]
    stage = release().stage_testing(tmp_path, "9.9.9")
    project = tomllib.loads((stage / "pyproject.toml").read_text())
    assert project["project"]["name"] == "pulumi-lora-testing"
    assert "pulumi-lora==9.9.9" in project["project"]["dependencies"]
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["only-include"] == [
        "pulumi_lora/testing"
    ]
    assert (stage / "pulumi_lora" / "testing" / "emulator" / "__init__.py").exists()
    assert not (stage / "pulumi_lora" / "__init__.py").exists()  # pulumi-lora's file
    assert not list(stage.rglob("__pycache__"))


def test_a_release_never_empties_a_folder_it_did_not_fill(tmp_path: Path) -> None:
    tool = release()
    (tmp_path / "pulumi_lora-0.1.0.tar.gz").write_text("old")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(tool.ReleaseError, match=r"notes\.txt"):
        tool.fresh(tmp_path)
    (tmp_path / "notes.txt").unlink()
    tool.fresh(tmp_path)
    assert list(tmp_path.iterdir()) == []


WITHOUT_RIG = (
    "import sys; sys.modules['pulumi_lora.testing'] = None; "
    "from pulumi_lora._cli import main; sys.argv[0] = 'pulumi-lora'; main()"
)


def without_rig(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", WITHOUT_RIG, *args]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)


def test_without_the_rig_help_lists_its_commands_and_running_them_names_it() -> None:
    helped = without_rig("--help")
    assert helped.returncode == 0, helped.stderr
    assert "testbed" in helped.stdout and "needs pulumi-lora-testing" in helped.stdout
    for argv in (["testbed", "up"], ["emulate", "--port", "30000"]):
        done = without_rig(*argv)
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == (
            f"Error: pulumi-lora {argv[0]} needs the test rig: pip install pulumi-lora-testing\n"
        )
