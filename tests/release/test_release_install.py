"""The release, installed the way users install it, with no checkout on any path.

``tools/release.py`` runs once for the module into a temporary ``dist/``; each test then uses
only that folder and a wheelhouse of the dependencies (``pip download`` at the versions the
plugin pins, so ``pip install --no-index`` spends no time on the network): a fresh virtualenv
gets ``pulumi-lora`` (no test rig inside) and then ``pulumi-lora-testing``; a fresh
``PULUMI_HOME`` gets the plugin with ``pulumi plugin install resource pulumi-lora VERSION
--file ARCHIVE``, and a YAML program that names only the package's type creates, refreshes and
destroys an adapter on the testbed. The plugin's launcher makes its own virtualenv on that first
run, from the archive's wheel; pip's dry run of the product's wheel resolves nothing that the
archive's ``constraints.txt`` leaves unpinned.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from pulumi_lora import __version__
from pulumi_lora.testing.engine import LocalEngine, find_pulumi
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import Testbed
from tests.cli.conftest import (
    ROOT,
    assert_clean_refresh,
    assert_nothing_left,
    lora_resources,
    ready_service,
    require_program,
    served,
    stack_on_testbed,
)

ARCHIVE = f"pulumi-resource-pulumi-lora-v{__version__}-linux-amd64.tar.gz"
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))
"""The interpreter this venv was made from: a Python with no checkout on its path."""


@dataclass(frozen=True)
class Release:
    """A release's ``dist/`` and the dependencies' wheels, both outside the checkout."""

    dist: Path
    wheelhouse: Path

    def pip_env(self) -> dict[str, str]:
        """pip's variables for an offline install from these two folders."""
        return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{self.dist} {self.wheelhouse}"}


def run(argv: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env={**clean_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


def clean_env() -> dict[str, str]:
    """This process's environment with nothing of the checkout: no PYTHONPATH, no venv, no
    ``PATH`` entry inside it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    path = os.environ.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in path if p and not Path(p).is_relative_to(ROOT))
    return env


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """``tools/release.py`` as the docs say (into a temporary dist), and a wheelhouse."""
    base = tmp_path_factory.mktemp("release")
    dist, wheelhouse = base / "dist", base / "wheelhouse"
    python = ROOT / ".venv" / "bin" / "python"
    run([python, ROOT / "tools" / "release.py", "--out", dist], cwd=base)
    rig = dist / f"pulumi_lora_testing-{__version__}-py3-none-any.whl"  # needs the product too
    pins = ROOT / ".venv" / "constraints.txt"  # tools/provision.py's pins
    plugin_pins = base / "plugin-constraints.txt"  # the plugin's: every dependency, exactly
    plugin_pins.write_text(plugin_constraints(dist))
    download: list[str | Path] = [python, "-m", "pip", "download", "-q", "-d", wheelhouse]
    run([*download, "-c", pins, "-c", plugin_pins, "--find-links", dist, rig], cwd=base)
    return Release(dist, wheelhouse)


def plugin_constraints(dist: Path) -> str:
    """The ``constraints.txt`` in the release's plugin archive."""
    with tarfile.open(dist / ARCHIVE) as tar:
        member = tar.extractfile("constraints.txt")
        assert member is not None
        return member.read().decode()


def test_the_release_holds_the_product_the_rig_and_their_checksums(release: Release) -> None:
    names = sorted(p.name for p in release.dist.iterdir())
    archives = [n for n in names if n.startswith("pulumi-resource-")]
    assert [a.removesuffix(".tar.gz").rsplit("-", 2)[1:] for a in archives] == [
        ["darwin", "amd64"],
        ["darwin", "arm64"],
        ["linux", "amd64"],
        ["linux", "arm64"],
    ]
    run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=release.dist)
    product = zipfile.ZipFile(release.dist / f"pulumi_lora-{__version__}-py3-none-any.whl")
    assert not [n for n in product.namelist() if n.startswith("pulumi_lora/testing/")]
    rig = zipfile.ZipFile(release.dist / f"pulumi_lora_testing-{__version__}-py3-none-any.whl")
    packaged = {n.split("/")[1] for n in rig.namelist() if n.startswith("pulumi_lora/")}
    assert packaged == {"testing"}
    metadata = rig.read(f"pulumi_lora_testing-{__version__}.dist-info/METADATA").decode()
    assert f"Requires-Dist: pulumi-lora=={__version__}" in metadata


def test_the_plugins_constraints_pin_everything_pip_installs_for_the_product(
    release: Release, tmp_path: Path
) -> None:
    """pip's own resolution of the product's wheel (offline, as the launcher's first run would
    install it here) installs nothing that ``constraints.txt`` leaves floating."""
    pins = dict(line.split("==") for line in plugin_constraints(release.dist).splitlines())
    (tmp_path / "constraints.txt").write_text(plugin_constraints(release.dist))
    report = tmp_path / "report.json"
    wheel = release.dist / f"pulumi_lora-{__version__}-py3-none-any.whl"
    pip: list[str | Path] = [ROOT / ".venv" / "bin" / "python", "-m", "pip", "install", "-q"]
    pip += ["--dry-run", "--ignore-installed", "--report", report]
    pip += ["-c", tmp_path / "constraints.txt"]
    run([*pip, wheel], cwd=tmp_path, env=release.pip_env())
    resolved: dict[str, str] = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert resolved.pop("pulumi-lora") == __version__
    assert resolved == pins


def test_a_fresh_venv_gets_the_product_then_the_rig(release: Release, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([BASE_PYTHON, "-m", "venv", venv], cwd=tmp_path)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, "pulumi-lora"], cwd=tmp_path, env=release.pip_env())
    where = run(
        [venv / "bin" / "python", "-c", "import pulumi_lora; print(pulumi_lora.__file__)"],
        cwd=tmp_path,
    )
    assert Path(where.strip()).is_relative_to(venv)
    helped = run([venv / "bin" / "pulumi-lora", "--help"], cwd=tmp_path)
    assert "(needs pulumi-lora-testing: pip install" in helped
    missing = subprocess.run(
        [venv / "bin" / "pulumi-lora", "emulate"], capture_output=True, text=True, check=False
    )
    assert missing.returncode == 1
    assert "pip install pulumi-lora-testing" in missing.stderr

    run([*pip, "pulumi-lora-testing"], cwd=tmp_path, env=release.pip_env())
    helped = run([venv / "bin" / "pulumi-lora", "testbed", "--help"], cwd=tmp_path)
    assert "up" in helped and "needs pulumi-lora-testing" not in helped
    run([venv / "bin" / "python", "-c", "import pulumi_lora.testing.emulator"], cwd=tmp_path)


YAML_PROGRAM = """\
name: lora-from-release
runtime: yaml
config:
  namespace:
    type: string
resources:
  sql:
    type: pulumi-lora:index:LoRAAdapter
    properties:
      adapterName: sql-lora
      path: /adapters/sql-lora
      inferenceService: llama
      namespace: ${namespace}
outputs:
  loaded: ${sql.loaded}
"""


@dataclass(frozen=True)
class Installed:
    """A fresh ``PULUMI_HOME`` that got the plugin from the release's archive."""

    engine: LocalEngine
    plugin_dir: Path


@pytest.fixture(scope="module")
def installed(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """``pulumi plugin install resource pulumi-lora VERSION --file ARCHIVE`` into a fresh home,
    with nothing of the checkout on any path; pip's first-run install reads the wheelhouse."""
    home = tmp_path_factory.mktemp("installed")
    shell = clean_env()
    engine = LocalEngine(
        home / "engine",
        extra_env={
            **release.pip_env(),  # the launcher's first run installs from these, offline
            "PULUMI_LORA_PYTHON": str(BASE_PYTHON),
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
            "PATH": os.pathsep.join([str(require_cli_dir()), shell["PATH"]]),
        },
    )
    runner = engine.project(home)
    archive = release.dist / ARCHIVE
    runner.pulumi(
        "plugin", "install", "resource", "pulumi-lora", __version__, "--file", str(archive)
    )
    plugin_dir = (
        home / "engine" / "pulumi-home" / "plugins" / f"resource-pulumi-lora-v{__version__}"
    )
    return Installed(engine, plugin_dir)


def test_plugin_install_then_a_yaml_program_naming_only_the_package(
    installed: Installed, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    require_program("pulumi-language-yaml")
    folder = tmp_path / "program"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text(YAML_PROGRAM)
    runner = installed.engine.project(folder)
    listed = json.loads(runner.pulumi("plugin", "ls", "--json").stdout)
    ours = [(p["kind"], p["version"]) for p in listed if p["name"] == "pulumi-lora"]
    assert ours == [("resource", __version__)]
    unpacked = sorted(p.name for p in installed.plugin_dir.iterdir() if p.name != "venv")
    assert [n for n in unpacked if not n.startswith("venv.")] == [
        "constraints.txt",
        "pulumi-resource-pulumi-lora",
        "wheels",
    ]

    handle = ready_service(testbed, namespace)
    stack_on_testbed(runner, testbed, namespace)
    try:
        runner.pulumi("up", "--yes", "--skip-preview")
        assert runner.outputs()["loaded"] is True
        assert lora_resources(runner) == [
            ("pulumi-lora:index:LoRAAdapter", True, f"{namespace}/sql-lora")
        ]
        assert all(a == {"sql-lora": "/adapters/sql-lora"} for a in served(handle).values())
        # the plugin runs from the venv its launcher made beside itself, from the archive's wheel
        python = installed.plugin_dir / "venv" / "bin" / "python"
        where = run([python, "-c", "import pulumi_lora; print(pulumi_lora.__file__)"], cwd=tmp_path)
        assert Path(where.strip()).resolve().is_relative_to(installed.plugin_dir)
        assert_clean_refresh(runner)
        refreshed = runner.pulumi("refresh", "--yes", "--skip-preview")
        assert "drift:" not in refreshed.stdout
    finally:
        runner.pulumi("destroy", "--yes", "--skip-preview")
    assert_nothing_left(testbed, [handle])


TS_PROGRAM = """\
import * as pulumi from "@pulumi/pulumi";
import * as lora from "./sdk";

const config = new pulumi.Config();
const sql = new lora.LoRAAdapter("sql", {
    adapterName: "sql-lora",
    path: "/adapters/sql-lora",
    inferenceService: "llama",
    namespace: config.require("namespace"),
    transport: lora.Transport.Direct,
});
export const loaded = sql.loaded;
export const pods = sql.pods;
"""


def test_a_typescript_program_on_the_generated_sdk(
    release: Release, installed: Installed, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    """The release's generated TypeScript SDK, unpacked into the program as ``./sdk``, under
    the built ``pulumi-language-nodejs`` (v3.68.0) with ``@pulumi/pulumi`` 3.248.0 (as
    ``examples/typescript``). That SDK predates ``pulumi.runtime.existsResource``, which the
    generated ``LoRAAdapter.exists`` calls, so the program is transpiled without type checks
    (``PULUMI_NODEJS_TRANSPILE_ONLY``); ``@pulumi/pulumi`` at the version the SDK's
    ``package.json`` asks for would check it."""
    require_program("pulumi-language-nodejs")
    require_program("npm")
    folder = tmp_path / "program"
    (folder / "sdk").mkdir(parents=True)
    archive = release.dist / f"pulumi-lora-sdk-nodejs-v{__version__}.tar.gz"
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "sdk", filter="data")
    (folder / "sdk" / "nodejs").rename(folder / "sdk.tmp")
    (folder / "sdk").rmdir()
    (folder / "sdk.tmp").rename(folder / "sdk")
    (folder / "Pulumi.yaml").write_text(
        "name: lora-ts-sdk\nruntime: nodejs\nconfig:\n  namespace:\n    type: string\n"
    )
    (folder / "index.ts").write_text(TS_PROGRAM)
    package = {"name": "lora-ts-sdk", "private": True, "main": "index.ts"}
    package["dependencies"] = {"@pulumi/pulumi": "3.248.0"}  # type: ignore[assignment]
    (folder / "package.json").write_text(json.dumps(package))
    run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline"], cwd=folder)
    extra = {**(installed.engine.extra_env or {}), "PULUMI_NODEJS_TRANSPILE_ONLY": "true"}
    runner = dataclasses.replace(installed.engine, extra_env=extra).project(folder)
    handle = ready_service(testbed, namespace)
    stack_on_testbed(runner, testbed, namespace)
    try:
        runner.pulumi("up", "--yes", "--skip-preview")
        assert runner.outputs()["loaded"] is True
        assert lora_resources(runner) == [
            ("pulumi-lora:index:LoRAAdapter", True, f"{namespace}/sql-lora")
        ]
        assert all(a == {"sql-lora": "/adapters/sql-lora"} for a in served(handle).values())
        assert_clean_refresh(runner)
    finally:
        runner.pulumi("destroy", "--yes", "--skip-preview")
    assert_nothing_left(testbed, [handle])


def require_cli_dir() -> Path:
    """The folder of the built CLI and language hosts (``tools/provision.py``'s cache)."""
    return find_pulumi().path.parent


GO_SDK_MODULE = (
    "module github.com/pulumi-lora/pulumi-lora/sdk\n\ngo 1.26\n\n"
    "require github.com/pulumi/pulumi/sdk/v3 v3.274.1\n"
)
"""The generated Go SDK's module (its import path is the schema's ``importBasePath``)."""


def test_a_go_program_on_the_generated_sdk(
    release: Release, installed: Installed, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    """The release's generated Go SDK in an Automation API inline program
    (``tests/release/go_program``; no Go language host exists here), built with the machine's Go
    against ``github.com/pulumi/pulumi/sdk/v3`` v3.274.1 (the CLI's, whose packages the build cache
    holds)."""
    go = shutil.which("go")
    if go is None:
        missing_real_part("go (the Go toolchain) is not on PATH")
    folder = tmp_path / "program"
    shutil.copytree(Path(__file__).parent / "go_program", folder)
    archive = release.dist / f"pulumi-lora-sdk-go-v{__version__}.tar.gz"
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "sdk", filter="data")
    (folder / "sdk" / "go.mod").write_text(GO_SDK_MODULE)
    runner = installed.engine.project(folder)
    # Built as tools/provision.py builds the Go tools (-trimpath, no cgo): the Pulumi SDK's
    # packages are then in Go's build cache already (150 s cold on two cores, 45 s so).
    run(
        [go, "build", "-trimpath", "-mod=readonly", "-o", "lora-go", "."],
        cwd=folder,
        env={**runner.env, "CGO_ENABLED": "0"},
    )
    handle = ready_service(testbed, namespace)
    done = subprocess.run(
        [str(folder / "lora-go"), namespace, str(testbed.kubeconfig_path)],
        cwd=folder,
        env=runner.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["loaded=true", "refresh=clean", "destroy=done"]
    assert_nothing_left(testbed, [handle])
