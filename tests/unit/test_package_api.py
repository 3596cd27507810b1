"""The package's public names are exactly the intended ones, sorted, and all importable."""

from __future__ import annotations

import subprocess
import sys

import pulumi_lora

INTENDED = {
    "RESOURCE_TYPE",
    "TYPE_TOKEN",
    "AdapterNotLoaded",
    "ClusterError",
    "ConditionInfo",
    "ConfigurationError",
    "InferenceServiceNotFound",
    "LoRAAdapter",
    "LoRAAdapterArgs",
    "LoRAAdapterProvider",
    "LoRAAdapterResource",
    "NameCollision",
    "NoReadyPods",
    "PodStatus",
    "Policy",
    "PulumiLoRAError",
    "RuntimeMismatch",
    "SGLangError",
    "Transport",
    "TransportUnavailable",
    "__version__",
}


def test_public_names_are_exactly_the_intended_ones() -> None:
    assert set(pulumi_lora.__all__) == INTENDED
    assert len(pulumi_lora.__all__) == len(INTENDED)  # no duplicates (ruff's RUF022 sorts it)
    assert all(hasattr(pulumi_lora, name) for name in pulumi_lora.__all__)


def test_the_provider_keeps_its_pickled_import_path() -> None:
    # Stacks' state references the provider by module and class name: renaming breaks them.
    assert pulumi_lora.LoRAAdapterProvider.__module__ == "pulumi_lora._provider"
    assert pulumi_lora.TYPE_TOKEN == "pulumi-lora:index:LoRAAdapter"
    # Python stacks' resources are found and aliased by their type: renaming breaks them.
    assert pulumi_lora.RESOURCE_TYPE == "pulumi-python:dynamic/lora:LoRAAdapter"


def test_the_emulator_and_the_loop_do_not_import_the_pulumi_sdk() -> None:
    """Every testbed pod runs an emulator and every loop imports this package: neither needs the
    Pulumi SDK, which takes most of a second to import (public names load on first use)."""
    code = (
        "import sys, pulumi_lora.testing.emulator, pulumi_lora._resync._app\n"
        "print(sorted(m for m in sys.modules if m == 'pulumi' or m.startswith('pulumi.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
