"""The operator commands' logic (``pulumi-lora status`` and ``doctor``).

``_status`` and ``_doctor`` judge, purely; ``_gather`` reads through the provider's own code, so
the operator sees what ``pulumi refresh`` would.
"""
