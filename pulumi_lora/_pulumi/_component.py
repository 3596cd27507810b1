"""The ``LoRAAdapter`` component that ``provider/`` served to other Pulumi languages up to 0.2.

A component with one dynamic child, served by Pulumi's component-provider host: the shape YAML
and TypeScript stacks had until ``provider/`` served one custom resource (``_pulumi._native``), and
Python stacks had until 0.2. Kept so tests can make such stacks and check their move
(``tests/cli/component_provider_0_2``, ``tests/e2e/test_one_resource.py``); programs use
``pulumi_lora.LoRAAdapter`` (``_pulumi._resource``) or ``provider/``. No ``from __future__ import
annotations``: the host reads these at run time.
"""

import inspect
from typing import Optional

import pulumi

from pulumi_lora._pulumi._properties import INPUT_KEYS
from pulumi_lora._pulumi._resource import (
    TYPE_TOKEN,
    AdapterInputs,
    AdapterOutputs,
    LoRAAdapterResource,
)

COMPONENT_OUTPUTS = tuple(inspect.get_annotations(AdapterOutputs))
"""The dynamic child's outputs the component re-exposes (``AdapterOutputs``' annotations)."""


class LoRAAdapter(pulumi.ComponentResource, AdapterOutputs):
    """One LLMKube LoRAAdapter CR, its adapter loaded on every Ready pod of the target."""

    def __init__(
        self, name: str, args: AdapterInputs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        props = {k: args.get(k) for k in INPUT_KEYS}
        self._resource = LoRAAdapterResource(name, props, pulumi.ResourceOptions(parent=self))
        for key in COMPONENT_OUTPUTS:
            setattr(self, key, getattr(self._resource, key))
        self.register_outputs({key: getattr(self, key) for key in COMPONENT_OUTPUTS})
