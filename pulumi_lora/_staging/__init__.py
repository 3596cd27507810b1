"""Staging an adapter's weights on a volume: the in-cluster stager (``pulumi-lora stage``).

Only ``_clients`` and ``_hub`` talk to a source, and ``_write`` is the one writer of fetched bytes.
Nothing is imported here, so the pure parts (``_source``, ``_plan``, ``_verify``) import without
the ``staging`` extra. See docs/staging.md.
"""
