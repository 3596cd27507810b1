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
import zipfile
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


def stand_in_product_wheel(folder: Path) -> Path:
    """A wheel whose METADATA requires what the product's wheel requires (``pyproject.toml``'s
    dependencies, and its extras' behind ``extra ==`` markers, as hatchling writes them)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra, deps in project["optional-dependencies"].items():
        lines += [f"{dep}; extra == '{extra}'" for dep in deps]
    metadata = "Metadata-Version: 2.1\nName: pulumi-lora\nVersion: 9.9.9\n"
    metadata += "".join(f"Requires-Dist: {line}\n" for line in lines)
    wheel = folder / "pulumi_lora-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pulumi_lora-9.9.9.dist-info/METADATA", metadata)
    return wheel


def closure_in_this_venv() -> dict[str, str]:
    """What ``pip install`` of the product resolves, at the versions this venv (the project's,
    where every test runs) holds: its dependencies, theirs, and the extras they name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found: dict[str, str] = {}
    todo = [(Requirement(line), "") for line in project["dependencies"]]
    done: set[tuple[str, str]] = set()
    while todo:
        req, extra = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        dist = metadata.distribution(req.name)
        found[canonicalize_name(req.name)] = dist.version
        for wanted in {"", *req.extras}:
            if (req.name, wanted) not in done:
                done.add((req.name, wanted))
                todo += [(Requirement(line), wanted) for line in dist.requires or []]
    return found


def test_the_plugin_pins_every_distribution_its_wheel_pulls_in_at_the_tested_version(
    tmp_path: Path,
) -> None:
    tool = release()
    tool.plugin_archives(tmp_path, "9.9.9", [stand_in_product_wheel(tmp_path)])
    with tarfile.open(tmp_path / tool.archive_name("9.9.9", "linux", "amd64")) as tar:
        member = tar.extractfile("constraints.txt")
        assert member is not None
        text = member.read().decode()
    pins = dict(line.split("==") for line in text.splitlines())
    assert pins == closure_in_this_venv()
    # the Pulumi SDK's gRPC stack and the HTTP clients' own dependencies, not only the direct
    assert {"pulumi", "grpcio", "protobuf", "httpcore2", "h11", "msgspec", "h2"} <= set(pins)
    assert not set(pins) & {"pytest", "pulumi-kubernetes", "prometheus-client", "boto3", "ruff"}
    assert not set(pins) & {"pydantic", "pydantic-core"}  # the test rig's, not the product's


def test_the_pins_are_refused_from_an_environment_that_was_not_the_tested_one() -> None:
    tool = release()
    assert tool.constraints({"grpcio": "1.2.3", "h11": "0.16.0"}) == "grpcio==1.2.3\nh11==0.16.0\n"
    with pytest.raises(tool.ReleaseError, match=r"stale.*pulumi 3\.0\.0 \(versions\.toml: "):
        tool.constraints({"pulumi": "3.0.0"})
    with pytest.raises(tool.ReleaseError, match=r"missing \['no-such-distribution>=1'\]"):
        tool.installed_closure(sys.executable, ["no-such-distribution>=1", "click"])


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
    assert 'exec "$venv/bin/python" -I -u -m pulumi_lora._pulumi._plugin "$@"' in text
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
    "from pulumi_lora._commands._main import main; sys.argv[0] = 'pulumi-lora'; main()"
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
