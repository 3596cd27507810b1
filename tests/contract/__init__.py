"""Contract tests of the SGLang emulator against docs/sglang-lora-contract.md (fast tier)."""
