"""Quickstart: one LoRA adapter on every Ready pod of one SGLang InferenceService.

``pulumi up`` applies one LLMKube ``LoRAAdapter`` CR and loads the adapter on each Ready pod of
the InferenceService; ``pulumi preview --refresh --expect-no-changes`` fails when a pod lost it.
Everything it needs is stack config (``Pulumi.yaml`` declares the keys and their defaults),
the transport included: ``pulumi config set transport proxy`` from outside the cluster.
"""

import pulumi

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs


def program() -> None:
    """Declare the adapter and export whether, and where, it is loaded."""
    config = pulumi.Config()
    adapter = LoRAAdapter(
        "adapter",
        LoRAAdapterArgs(
            adapter_name=config.require("adapterName"),
            path=config.require("adapterPath"),
            inference_service=config.require("inferenceService"),
            namespace=config.require("namespace"),
            transport=config.require("transport"),
        ),
    )
    pulumi.export("loaded", adapter.loaded)  # True once every Ready pod serves it
    # per pod: {pod, loaded}, plus ready: false, path (when not the declared one), reason, error
    pulumi.export("pods", adapter.pods)
    pulumi.export("conditions", adapter.conditions)


if __name__ == "__main__":
    program()
