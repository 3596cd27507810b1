"""Contract tests of the SGLang emulator against the LoRA contract of ``_sglang._protocol``."""
