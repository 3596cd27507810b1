"""The image installs the package's requirements less the Pulumi SDK (issue 41: 324 MB with
grpcio, protobuf, OpenTelemetry and debugpy the loop never imports): what it leaves out is
never imported by what the image runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import image  # noqa: E402 - tools/ is not a package

METADATA = """Metadata-Version: 2.4
Name: pulumi-lora
Requires-Dist: pulumi<4,>=3.272
Requires-Dist: httpx2<3,>=2.17
Requires-Dist: pyyaml>=6
Provides-Extra: kubernetes
Requires-Dist: pulumi-kubernetes<5,>=4.18; extra == "kubernetes"
Provides-Extra: metrics
Requires-Dist: prometheus-client>=0.20; extra == "metrics"
Requires-Dist: boto3<2,>=1.34; extra == 'staging'
Requires-Dist: pytest>=8; extra == "test"
"""


def test_the_image_takes_the_requirements_and_its_extras_but_the_pulumi_sdk() -> None:
    assert image.image_requirements(METADATA) == [
        "httpx2<3,>=2.17",
        "pyyaml>=6",
        "prometheus-client>=0.20",
        "boto3<2,>=1.34",
    ]


#: The Pulumi SDK and what only it needs (its closure, less what the package needs itself).
PULUMI_CLOSURE = ("pulumi", "grpc", "google.protobuf", "opentelemetry", "debugpy", "dill", "semver")


def test_what_the_image_runs_never_imports_the_pulumi_sdk() -> None:
    """Every command the image runs (the loop, the stager and its claim commands) and every
    module of the loop and the stager, in a process where the Pulumi SDK cannot be imported."""
    script = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys
        BLOCKED = {PULUMI_CLOSURE!r}

        class Absent:
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ImportError("not in the image: " + name)

        sys.meta_path.insert(0, Absent())
        from click.testing import CliRunner
        from pulumi_lora._commands._main import cli
        for command in ("resync", "stage", "stage-serve", "unstage", "verify-staged"):
            done = CliRunner().invoke(cli, [command, "--help"])
            assert done.exit_code == 0, (command, done.output, done.exception)
        import pulumi_lora._resync as loop, pulumi_lora._staging as staging
        for package in (loop, staging):
            for module in pkgutil.iter_modules(package.__path__):
                importlib.import_module(package.__name__ + "." + module.name)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_wheel_for_another_machine_is_caught_by_its_platform_tag() -> None:
    wheels = [
        Path("pulumi_lora-0.3.0-py3-none-any.whl"),
        Path("pydantic_core-2.50.5-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl"),
        Path("msgspec-0.23.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
    ]
    assert image.foreign_wheels(wheels, "aarch64") == [wheels[2].name]
    assert image.foreign_wheels(wheels, "x86_64") == [wheels[1].name]


def test_each_platform_names_its_machine_and_debian_architecture() -> None:
    assert image.PLATFORMS == {
        "linux/amd64": ("x86_64", "amd64"),
        "linux/arm64": ("aarch64", "arm64"),
    }
    assert image.host_platform() in image.PLATFORMS  # the machines the project builds on
