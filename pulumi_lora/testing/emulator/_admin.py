"""The emulator's admin API under ``/_emulator/`` (only with ``--emulator-admin``).

- ``GET /_emulator/faults``: ``{"faults": [{...fault fields, "remaining": N|null}], "latency": {}}``
- ``POST /_emulator/faults`` with ``{"faults": [SPEC or fault object, ...], "latency":
  {ROUTE: SECONDS}, "startup_delay": SECONDS}`` (every key optional): arms the faults behind
  those armed, sets the latencies, and starts a new start-up delay (``/health*`` 503 for that
  long); all or nothing, 400 ``{"error": ...}`` if anything is invalid. Answers like ``GET``.
- ``DELETE /_emulator/faults``: disarms every fault and drops every latency.
- ``GET /_emulator/state``: ``{"ready", "updating" (a load or unload is running),
  "update_requests" (loads and unloads that reached the update lock, ever), "adapters":
  [{name, path, pinned, in_flight}] (LRU order), "draining": [same, unregistered but busy],
  "ever_loaded": {name: path}, "inferences": {name: inference requests through it, ever}}``.

These routes are never subject to faults, latency or API keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pulumi_lora.testing.emulator._app import Readiness, method_not_allowed, not_found
from pulumi_lora.testing.emulator._engine import Engine
from pulumi_lora.testing.emulator._faults import Fault, FaultBook, check_latency
from pulumi_lora.testing.emulator._http import Request, Response, json_response

__all__ = ["ADMIN_PREFIX", "AdminApi"]

ADMIN_PREFIX = "/_emulator/"
_FAULTS = "/_emulator/faults"
_STATE = "/_emulator/state"


class _Update(BaseModel):
    model_config = ConfigDict(extra="forbid")

    faults: list[str | dict[str, object]] = []
    latency: dict[str, float] = {}
    startup_delay: float | None = Field(default=None, ge=0)


class AdminApi:
    """Run-time control and inspection of one emulated server."""

    def __init__(self, faults: FaultBook, engine: Engine, readiness: Readiness) -> None:
        self._faults = faults
        self._engine = engine
        self._readiness = readiness

    def handle(self, request: Request) -> Response:
        """Answer a request for a path under ``/_emulator/``."""
        if request.path == _FAULTS:
            if request.method == "GET":
                return json_response(200, self._faults.view())
            if request.method == "POST":
                return self._update(request.body)
            if request.method == "DELETE":
                self._faults.clear()
                return json_response(200, self._faults.view())
            return method_not_allowed(frozenset({"GET", "POST", "DELETE"}))
        if request.path == _STATE:
            if request.method == "GET":
                return json_response(200, self.snapshot())
            return method_not_allowed(frozenset({"GET"}))
        return not_found()

    def snapshot(self) -> dict[str, object]:
        """What ``GET /_emulator/state`` answers."""
        return {"ready": self._readiness.ready(), **self._engine.snapshot()}

    def _update(self, raw: bytes) -> Response:
        try:
            update = _Update.model_validate_json(raw or b"{}")
            faults = [Fault.from_json(item) for item in update.faults]
            for route, seconds in update.latency.items():
                check_latency(route, seconds)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            return json_response(400, {"error": _message(exc)})
        for fault in faults:
            self._faults.add(fault)
        for route, seconds in update.latency.items():
            self._faults.set_latency(route, seconds)
        if update.startup_delay is not None:
            self._readiness.not_ready_for(update.startup_delay)
        return json_response(200, self._faults.view())


def _message(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'body'}: {error['msg']}"
            for error in exc.errors()
        )
    return str(exc)
