"""What doctor reports: a check's outcome and the check itself (one shape for every check)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class CheckStatus(StrEnum):
    """A check's outcome: ``fail`` breaks dynamic LoRA, ``warn`` is a trap worth a look."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One check: a stable ``name``, its status, what was found, and what to do about it."""

    name: str
    status: CheckStatus
    message: str
    fix: str = ""
    pod: str | None = None  # the pod a per-server check is about

    def to_json(self) -> dict[str, Any]:
        """The documented JSON shape (docs/operations.md)."""
        return {
            "name": self.name,
            "status": self.status.value,
            "message": self.message,
            "fix": self.fix,
            "pod": self.pod,
        }
