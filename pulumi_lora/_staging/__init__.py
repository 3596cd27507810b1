"""Staging an adapter's weights on a volume: the in-cluster stager (``pulumi-lora stage``).

Nothing is imported here, so the pure parts (``_source``, ``_plan``, ``_verify``) import without
the ``staging`` extra. See docs/staging.md.
"""
