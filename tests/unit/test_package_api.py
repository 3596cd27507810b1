"""The package's public names are exactly the intended ones, sorted, and all importable."""

from __future__ import annotations

import pulumi_lora

INTENDED = {
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
