"""The demo stack: two adapters on every Ready pod of one SGLang InferenceService.

``pulumi up`` here with ``.venv`` activated (the README's quickstart, in this folder), or ``bash
scripts/demo.sh``, which types those same ``pulumi`` commands against the local testbed.
"""

import pulumi

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs


def program() -> None:
    """Declare the adapters and export what each pod serves."""
    config = pulumi.Config()
    namespace = config.get("namespace") or "models"
    service = config.get("inferenceService") or "llama"
    adapters = {"sql": "/adapters/sql-lora", "chat": "/adapters/chat-lora"}
    for handle, path in adapters.items():
        adapter = LoRAAdapter(
            handle,
            LoRAAdapterArgs(
                adapter_name=f"{handle}-lora",
                path=path,
                inference_service=service,
                namespace=namespace,
            ),
        )
        pulumi.export(f"{handle}_loaded", adapter.loaded)
        pulumi.export(f"{handle}_pods", adapter.pods)


if __name__ == "__main__":
    program()
