"""The operator commands' logic (``pulumi-lora status`` and ``doctor``).

``_status`` and ``_doctor`` are pure verdicts; ``_gather`` reads the cluster and the pods through
the provider's own code, so the operator sees what ``pulumi refresh`` would. The click commands
are in ``_commands._operator``.
"""
