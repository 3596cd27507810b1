"""Errors that read as messages in ``pulumi up``: the dynamic-provider host, told to show ours.

:func:`install` makes the host print ``ClassName: message`` for a `PulumiLoRAError` and the full
traceback for anything else. It changes nothing outside the host process.
"""

from __future__ import annotations

import sys
import traceback
from types import ModuleType
from typing import Any

from pulumi_lora._errors import PulumiLoRAError

__all__ = ["HostTraceback", "install", "message_of"]

#: The host's module name when it runs as ``python -m pulumi.dynamic``.
HOST_MODULE = "pulumi.dynamic.__main__"


def message_of(exc: BaseException) -> str:
    """Pure: what the engine shows for one of our errors: its class (the troubleshooting
    table's key) and its message, which holds the advice."""
    return f"{type(exc).__name__}: {exc}"


class HostTraceback:
    """Stands in for the ``traceback`` module in the host's namespace (everything else is
    the real module's)."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def format_exc(self, limit: int | None = None, chain: bool = True) -> str:
        """The message of a `PulumiLoRAError` being handled; otherwise the full traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, PulumiLoRAError):
            return message_of(exc)
        text: str = self._real.format_exc(limit, chain)
        return text


def install() -> bool:
    """Make the running dynamic-provider host report our errors by message; whether it did."""
    host = sys.modules.get("__main__")
    spec = getattr(host, "__spec__", None)
    if host is None or getattr(spec, "name", None) != HOST_MODULE:
        return False
    if not isinstance(getattr(host, "traceback", None), HostTraceback):
        host.traceback = HostTraceback(traceback)  # type: ignore[attr-defined]
    return True
