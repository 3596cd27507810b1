"""PEFT LoRA adapters for the testbed's tiny Llama, written without torch (pure Python).

A real SGLang server loads what ``peft``'s ``save_pretrained`` writes: ``adapter_config.json``
and ``adapter_model.safetensors`` with ``lora_A`` (rank x in) and ``lora_B`` (out x rank) per
target module and layer. Writing that here lets the testbed make adapters in the project's own
virtualenv in milliseconds, of any rank or target modules, including broken ones on purpose.
``lora_B`` is non-zero (``peft`` starts it at zero, which changes nothing), so a generation
through the adapter differs from the base model's.
"""

from __future__ import annotations

import json
import math
import random
import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TinyLlama:
    """The shape of the testbed's model (``tools/sglang/make_model.py`` builds it)."""

    hidden: int = 64
    intermediate: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 4

    def dims(self, module: str) -> tuple[int, int]:
        """(in, out) features of one projection (a module the model lacks: hidden x hidden,
        for adapters broken on purpose)."""
        head = self.hidden // self.heads
        known = {
            "q_proj": (self.hidden, self.hidden),
            "k_proj": (self.hidden, self.kv_heads * head),
            "v_proj": (self.hidden, self.kv_heads * head),
            "o_proj": (self.hidden, self.hidden),
            "gate_proj": (self.hidden, self.intermediate),
            "up_proj": (self.hidden, self.intermediate),
            "down_proj": (self.intermediate, self.hidden),
        }
        return known.get(module, (self.hidden, self.hidden))

    @staticmethod
    def block(module: str) -> str:
        """The decoder layer's sub-module holding ``module``."""
        return "mlp" if module in ("gate_proj", "up_proj", "down_proj") else "self_attn"


TINY_LLAMA = TinyLlama()


def write_adapter(
    folder: Path,
    *,
    rank: int = 8,
    target_modules: Sequence[str] = ("q_proj", "v_proj"),
    base_model: str = "tiny-llama",
    seed: str = "",
    model: TinyLlama = TINY_LLAMA,
    weights_rank: int | None = None,
    nan: bool = False,
) -> None:
    """Write a PEFT LoRA adapter into ``folder`` (created).

    ``seed`` makes the weights (the same seed, the same adapter); ``weights_rank`` writes
    tensors of another rank than the config declares (a broken adapter, on purpose); ``nan``
    makes every ``lora_B`` NaN: SGLang loads it without a word, and every generation through it
    computes NaN logits (the smoke generation's ``null`` logprob).
    """
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(target_modules),
        "base_model_name_or_path": base_model,
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    rng = random.Random(seed or folder.name)  # noqa: S311 - test weights, not a secret
    r = rank if weights_rank is None else weights_rank
    tensors: dict[str, tuple[list[int], array[float]]] = {}
    for layer in range(model.layers):
        for module in target_modules:
            fan_in, fan_out = model.dims(module)
            prefix = f"base_model.model.model.layers.{layer}.{model.block(module)}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = ([r, fan_in], _noise(rng, r * fan_in, 0.5))
            b = array("f", [math.nan] * (fan_out * r)) if nan else _noise(rng, fan_out * r, 0.5)
            tensors[f"{prefix}.lora_B.weight"] = ([fan_out, r], b)
    (folder / "adapter_model.safetensors").write_bytes(safetensors(tensors))


def _noise(rng: random.Random, n: int, scale: float) -> array[float]:
    return array("f", (rng.uniform(-scale, scale) for _ in range(n)))


def safetensors(tensors: dict[str, tuple[list[int], array[float]]]) -> bytes:
    """The safetensors encoding of float32 tensors: a little-endian u64 header length, the
    JSON header (dtype, shape, byte offsets), then the data in order."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    chunks: list[bytes] = []
    offset = 0
    for name, (shape, values) in tensors.items():
        little = array("f", values)
        if sys.byteorder == "big":  # safetensors is little-endian
            little.byteswap()
        data = little.tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": shape,
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks)
