"""The ``LoRAAdapter`` component of 0.2: one dynamic child, served by Pulumi's component host.

Kept only for tests of the move off it. No ``from __future__ import annotations``: the host reads
the annotations at run time.
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
