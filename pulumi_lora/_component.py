"""The ``LoRAAdapter`` component that ``provider/`` serves to other Pulumi languages.

Pulumi's component-provider host infers a schema from a ``ComponentResource`` class (its name
is the type's last part, its annotations the outputs) and runs it in the plugin's process; it
cannot serve a custom resource. So other languages get a component with one dynamic child, the
shape Python stacks had before ``LoRAAdapter`` became one resource; Python programs use
``pulumi_lora.LoRAAdapter`` (``_adapter``). No ``from __future__ import annotations``: the host
reads these at run time.
"""

import inspect
from typing import Optional

import pulumi

from pulumi_lora._adapter import TYPE_TOKEN, AdapterInputs, AdapterOutputs, LoRAAdapterResource
from pulumi_lora._provider import INPUT_KEYS

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
