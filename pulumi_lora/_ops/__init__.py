"""The operator commands' logic (``pulumi-lora status`` and ``doctor``), in three rooms.

- ``_status``: pure verdicts: one LoRAAdapter CR and what each pod serves → ok, drift or error.
- ``_doctor``: pure checks: an InferenceService's fitness for dynamic LoRA → ok, warn or fail.
- ``_gather``: the I/O edge that reads the cluster and the pods for both, through the very code
  the provider uses, so the operator sees what ``pulumi refresh`` would.

The commands themselves (options, tables, JSON, exit codes) are
``pulumi_lora._commands._operator``'s.
"""
