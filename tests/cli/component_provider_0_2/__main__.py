"""The Pulumi plugin that serves ``LoRAAdapter`` to every Pulumi language (TypeScript, Go, C#,
Java, YAML), using the Python SDK's component-provider host.

The engine starts it as ``venv/bin/python <this folder> <engine address>``; the host infers the
schema from ``LoRAAdapter``'s annotations and ``AdapterInputs`` and prints its port as the
first line, so nothing may print at import. Its type token is ``pulumi-lora:index:LoRAAdapter``,
the same as the Python component's, so the schema's package name is ``pulumi-lora``; the
namespace ``pulumilora`` keeps generated SDKs out of Pulumi's own scope and away from this
project's module name (``@pulumilora/pulumi-lora``, ``pulumilora_pulumi_lora``; never
``pulumi_lora``). See README.md for how to use it, and ``write_schema.py`` for the committed
``schema.json``.
"""

import pulumi
from pulumi.provider.experimental import component_provider_host

from pulumi_lora import __version__
from pulumi_lora._pulumi._component import LoRAAdapter

NAME = "pulumi-lora"
"""The schema's package name: the first part of the type token ``pulumi-lora:index:LoRAAdapter``."""
NAMESPACE = "pulumilora"
"""Scope of generated SDKs (npm ``@pulumilora/pulumi-lora``, PyPI ``pulumilora_pulumi_lora``)."""
COMPONENTS: list[type[pulumi.ComponentResource]] = [LoRAAdapter]
"""The components served."""

if __name__ == "__main__":
    component_provider_host(COMPONENTS, name=NAME, namespace=NAMESPACE, version=__version__)
