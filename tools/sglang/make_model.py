"""Build the testbed's tiny Llama for the real SGLang server, with no hub (``make_model.py OUT``).

Runs in SGLang's own virtualenv (``tools/sglang_env.py`` calls it), which has ``torch``,
``transformers`` and ``tokenizers``. A byte-level BPE tokenizer trained on a few hundred
synthetic lines, wrapped in ``PreTrainedTokenizerFast`` with a chat template, and a random
two-layer Llama of 64 hidden units (``pulumi_lora.testing.peft.TinyLlama`` has the same shape),
in bf16, seeded: the same files every time. SGLang serves it as it would any Llama.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = [
    "adapter",
    "load",
    "unload",
    "pod",
    "replica",
    "server",
    "model",
    "weight",
    "rank",
    "module",
    "path",
    "cluster",
    "node",
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "for",
    "on",
    "with",
    "as",
    "at",
    "by",
    "from",
    "this",
    "that",
    "be",
    "are",
    "was",
    "were",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def main(out: Path) -> None:
    """Write the tokenizer and the model into ``out``."""
    rng = random.Random(7)  # noqa: S311 - synthetic text, not a secret
    lines = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(lines, trainer)
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"}
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(7)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        torch_dtype="bfloat16",
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
