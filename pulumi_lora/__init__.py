"""pulumi-lora: LLMKube LoRAAdapter custom resources as Pulumi infrastructure.

``LoRAAdapter`` declares one adapter on one InferenceService: the CR, and the adapter loaded on
every Ready SGLang pod of the target, with conditions and per-pod status as outputs and drift
visible to ``pulumi refresh``. The SGLang emulator and the local testbed live in
``pulumi_lora.testing``.
"""

from pulumi_lora._component import (
    TYPE_TOKEN,
    ConditionInfo,
    LoRAAdapter,
    LoRAAdapterArgs,
    LoRAAdapterResource,
    PodStatus,
)
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
from pulumi_lora._version import __version__

__all__ = [
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
