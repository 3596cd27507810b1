"""pulumi-lora: LLMKube LoRAAdapter custom resources as Pulumi infrastructure."""

from pulumi_lora._version import __version__

__all__ = ["__version__"]
