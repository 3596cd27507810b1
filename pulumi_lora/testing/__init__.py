"""Testing kit shipped with pulumi-lora: the SGLang emulator and the local testbed cluster."""
