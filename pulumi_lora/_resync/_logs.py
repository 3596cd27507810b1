"""Structured logs: one JSON object per line on stderr, through the standard ``logging`` module.

Never log request headers or Secret data, so no API key reaches a log line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LOGGER_NAME = "pulumi_lora.resync"

_log = logging.getLogger(LOGGER_NAME)


class JsonFormatter(logging.Formatter):
    """Format a record as a single JSON line (``extra={"fields": {...}}`` adds fields)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "ts": round(record.created, 6),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["error"] = f"{type(error).__name__}: {error}"
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


def configure(level: str = "info") -> None:
    """Send the loop's (and the project's) logs to stderr as JSON lines at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("pulumi_lora")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log event ``name`` with ``fields``."""
    if _log.isEnabledFor(level):
        _log.log(level, name, extra={"fields": fields})


def failure(name: str, **fields: Any) -> None:
    """Log an unexpected exception (with its traceback) as event ``name``."""
    _log.exception(name, extra={"fields": fields})
