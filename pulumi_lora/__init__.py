"""pulumi-lora: LLMKube LoRAAdapter custom resources as Pulumi infrastructure.

Names load on first use (PEP 562): the SGLang emulator and the re-sync loop import this package
and must not pay for importing the Pulumi SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pulumi_lora._version import __version__

if TYPE_CHECKING:
    from pulumi_lora._errors import (
        AdapterNotLoaded,
        ClusterError,
        ConfigurationError,
        InferenceServiceNotFound,
        NameCollision,
        NoReadyPods,
        PulumiLoRAError,
        RuntimeMismatch,
        SGLangError,
        TransportUnavailable,
    )
    from pulumi_lora._models import Policy, Transport
    from pulumi_lora._provider import LoRAAdapterProvider
    from pulumi_lora._pulumi._resource import (
        RESOURCE_TYPE,
        TYPE_TOKEN,
        ConditionInfo,
        LoRAAdapter,
        LoRAAdapterArgs,
        LoRAAdapterResource,
        PodStatus,
    )

_HOMES = {
    "RESOURCE_TYPE": "_pulumi._resource",
    "TYPE_TOKEN": "_pulumi._resource",
    "ConditionInfo": "_pulumi._resource",
    "LoRAAdapter": "_pulumi._resource",
    "LoRAAdapterArgs": "_pulumi._resource",
    "LoRAAdapterResource": "_pulumi._resource",
    "PodStatus": "_pulumi._resource",
    "AdapterNotLoaded": "_errors",
    "ClusterError": "_errors",
    "ConfigurationError": "_errors",
    "InferenceServiceNotFound": "_errors",
    "NameCollision": "_errors",
    "NoReadyPods": "_errors",
    "PulumiLoRAError": "_errors",
    "RuntimeMismatch": "_errors",
    "SGLangError": "_errors",
    "TransportUnavailable": "_errors",
    "Policy": "_models",
    "Transport": "_models",
    "LoRAAdapterProvider": "_provider",
}
"""Each public name and the private module that defines it."""


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use, then keep it here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
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
]
