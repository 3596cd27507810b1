"""Where ``tools/provision.py`` puts what the rig runs, and the command that puts it there."""

from __future__ import annotations

import os
from pathlib import Path

PROVISION_COMMAND = "python3 tools/provision.py"
"""The command that builds the real parts into the cache (named in every lookup error)."""


def cache_dir() -> Path:
    """The project's cache root: ``$PULUMI_LORA_CACHE``, else ``~/.cache/pulumi-lora``."""
    configured = os.environ.get("PULUMI_LORA_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "pulumi-lora"
