"""Fault injection: per-route latency and one-shot (or standing) failures of the next requests.

Faults are ``Fault`` values (its docstring gives the SPEC syntax of ``--emulator-fault``), armed
in one ``FaultBook`` per server. Each request takes the first armed fault whose route matches its
path (query string excluded). Latency (``ROUTE=SECONDS``) is spent where SGLang spends its time:
loads and unloads inside the serialized section, inference while the adapter is in use, other
routes before answering.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from http import HTTPStatus
from typing import Literal, get_args

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from pulumi_lora.testing.emulator._http import Response

__all__ = [
    "Fault",
    "FaultBook",
    "FaultKind",
    "check_latency",
    "fault_response",
    "parse_latency",
]

FaultKind = Literal["status", "drop", "stall", "malformed", "huge", "drip"]

_VALUE_FIELD = {"status": "status", "stall": "seconds", "huge": "size", "drip": "seconds"}
_MALFORMED_BODY = b'{"success": true, "error_message": "", "loaded_adapters": {"'


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Fault:
    """One injected failure; build it directly, from a SPEC (``parse``) or from JSON.

    The SPEC of ``--emulator-fault`` (also accepted by the admin API)::

        SPEC   := [ROUTE ":"] KIND ["=" VALUE] ("," OPTION)*
        ROUTE  := "*" | a path such as /load_lora_adapter   (default "*": every SGLang route)
        KIND   := status=CODE    answer CODE with BODY instead of handling the request
                | drop           close the connection without any response
                | stall=SECONDS  wait SECONDS, then handle and answer normally
                | malformed      answer 200 with a truncated JSON body
                | huge=BYTES     answer 200 with a JSON string body of exactly BYTES bytes
                | drip=SECONDS   handle normally, then send the body CHUNK bytes at a time,
                                 waiting SECONDS before each chunk
        OPTION := times=N | times=always  how many requests it hits (default 1)
                | after          handle the request first, then fault the answer (the state
                                 changes, the client never learns it); stall: wait after
                | chunk=BYTES    drip: bytes per chunk (default 1)
                | head           drip: drip the status line and headers too, not only the
                                 body (a client's per-read timeout never trips on either)
                | land=SECONDS   drop: close the connection at once, then handle the request
                                 SECONDS later (SGLang keeps working on a request whose client
                                 is gone, a proxy held it back: a load that lands late)
                | body=TEXT      status: the body, verbatim to the end of the SPEC; JSON is
                                 sent as application/json, other text as text/plain
                                 (default ``{"detail": "<reason phrase>"}``)

    Examples: ``/load_lora_adapter:status=503,times=2``, ``*:drop``, ``/v1/models:stall=5``,
    ``/load_lora_adapter:drop,after``, ``/load_lora_adapter:drop,land=3``,
    ``/generate:drip=0.05,chunk=8``, ``/load_lora_adapter:drip=0.5,head``,
    ``/server_info:huge=1000000``, ``/unload_lora_adapter:status=500,body=Internal Server Error``.
    """

    kind: FaultKind
    """What happens to a matching request (see above)."""
    route: str = "*"
    """The path it applies to, or ``*`` for every SGLang route (never the admin routes)."""
    times: int | None = Field(default=1, ge=1)
    """How many matching requests it hits; ``None`` for all of them."""
    after: bool = False
    """Handle the request first, then fault the answer."""
    status: int = Field(default=503, ge=100, le=599)
    """``status``: the HTTP status to answer with."""
    body: str | None = None
    """``status``: the body to answer with (default a FastAPI-style ``{"detail": ...}``)."""
    seconds: float = Field(default=0.0, ge=0.0)
    """``stall``: how long to wait; ``drip``: the wait before each chunk."""
    size: int = Field(default=0, ge=0)
    """``huge``: the body's size in bytes."""
    chunk: int = Field(default=1, ge=1)
    """``drip``: bytes per chunk."""
    head: bool = False
    """``drip``: drip the status line and headers too."""
    land: float | None = Field(default=None, ge=0.0)
    """``drop``: handle the request this many seconds after the connection was closed."""

    def __post_init__(self) -> None:
        if self.route != "*" and not self.route.startswith("/"):
            raise ValueError(f"fault route must be '*' or start with '/': {self.route!r}")
        if self.head and self.kind != "drip":
            raise ValueError("fault option 'head' applies to drip only")
        if self.land is not None and (self.kind != "drop" or self.after):
            raise ValueError("fault option 'land' applies to drop without 'after' only")

    @classmethod
    def parse(cls, spec: str) -> Fault:
        """Parse a SPEC such as ``/load_lora_adapter:status=503,times=2``; ``ValueError`` if bad."""
        route, rest = "*", spec.strip()
        if rest.startswith(("/", "*")):
            route, sep, rest = rest.partition(":")
            if not sep:
                raise ValueError(f"fault spec {spec!r}: expected ROUTE:KIND")
        head, _, options = rest.partition(",")
        kind, has_value, value = head.partition("=")
        if kind not in get_args(FaultKind):
            raise ValueError(f"fault spec {spec!r}: kind must be one of {get_args(FaultKind)}")
        fields: dict[str, object] = {"kind": kind, "route": route}
        field = _VALUE_FIELD.get(kind)
        if bool(has_value) != (field is not None):
            raise ValueError(f"fault spec {spec!r}: {kind!r} takes {'a' if field else 'no'} value")
        if field is not None:
            fields[field] = value
        fields.update(_parse_options(options, spec))
        return cls(**fields)  # type: ignore[arg-type]  # pydantic validates the values

    @classmethod
    def from_json(cls, data: object) -> Fault:
        """A fault from the admin API: a SPEC string or an object with this class's fields."""
        if isinstance(data, str):
            return cls.parse(data)
        if isinstance(data, dict):
            return cls(**data)
        raise ValueError(f"a fault is a SPEC string or an object, not {data!r}")

    def to_json(self) -> dict[str, object]:
        """This fault as a JSON object (the admin API's form)."""
        return asdict(self)

    def matches(self, path: str) -> bool:
        """Whether a request for ``path`` is hit by this fault."""
        return self.route in ("*", path)


def _parse_options(options: str, spec: str) -> dict[str, object]:
    """The ``,OPTION`` tail of a SPEC; ``body=`` takes the rest verbatim."""
    fields: dict[str, object] = {}
    remaining = options
    while remaining:
        if remaining.startswith("body="):
            fields["body"] = remaining.removeprefix("body=")
            break
        item, _, remaining = remaining.partition(",")
        key, has_value, value = item.partition("=")
        if key in ("after", "head") and not has_value:
            fields[key] = True
        elif key == "times" and has_value:
            fields["times"] = None if value == "always" else value
        elif key in ("chunk", "land") and has_value:
            fields[key] = value
        else:
            raise ValueError(f"fault spec {spec!r}: unknown option {item!r}")
    return fields


def parse_latency(text: str) -> tuple[str, float]:
    """Parse ``ROUTE=SECONDS`` (``--emulator-latency``); ``ValueError`` if bad."""
    route, sep, seconds = text.rpartition("=")
    if not sep:
        raise ValueError(f"latency {text!r}: expected ROUTE=SECONDS")
    value = float(seconds)
    check_latency(route, value)
    return route, value


def check_latency(route: str, seconds: float) -> None:
    """``ValueError`` unless ``route`` is ``*`` or a path and ``seconds`` is not negative."""
    if not (route == "*" or route.startswith("/")):
        raise ValueError(f"latency route must be '*' or start with '/': {route!r}")
    if seconds < 0:
        raise ValueError(f"latency of {route} must not be negative: {seconds}")


def fault_response(fault: Fault) -> Response:
    """The answer that replaces the real one for ``status``, ``malformed`` and ``huge``."""
    if fault.kind == "malformed":
        return Response(200, _MALFORMED_BODY, "application/json")
    if fault.kind == "huge":
        filler = b"x" * max(fault.size - 2, 0)
        return Response(200, (b'"' + filler + b'"')[: fault.size], "application/json")
    if fault.body is None:
        detail = json.dumps({"detail": _phrase(fault.status)}).encode()
        return Response(fault.status, detail, "application/json")
    return Response(fault.status, fault.body.encode(), _content_type(fault.body))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _content_type(body: str) -> str:
    try:
        json.loads(body)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"


class FaultBook:
    """The armed faults and the per-route latency of one server; safe to share across threads."""

    def __init__(
        self, faults: Iterable[Fault] = (), latency: Mapping[str, float] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._armed: list[tuple[Fault, list[int | None]]] = []
        self._latency: dict[str, float] = dict(latency or {})
        for fault in faults:
            self.add(fault)

    def add(self, fault: Fault) -> None:
        """Arm ``fault`` behind those already armed."""
        with self._lock:
            self._armed.append((fault, [fault.times]))

    def take(self, path: str) -> Fault | None:
        """The fault that hits this request, counting it; ``None`` if none does."""
        if not self._armed:
            return None
        with self._lock:
            for index, (fault, remaining) in enumerate(self._armed):
                if not fault.matches(path):
                    continue
                left = remaining[0]
                if left is not None:
                    remaining[0] = left - 1
                    if left == 1:
                        del self._armed[index]
                return fault
        return None

    def set_latency(self, route: str, seconds: float) -> None:
        """Add ``seconds`` to every request of ``route`` (``*``: routes without their own)."""
        with self._lock:
            self._latency = {**self._latency, route: seconds}

    def latency(self, path: str) -> float:
        """The latency of a request for ``path``."""
        latency = self._latency
        return latency.get(path, latency.get("*", 0.0))

    def clear(self) -> None:
        """Disarm every fault and drop every latency."""
        with self._lock:
            self._armed = []
            self._latency = {}

    def view(self) -> dict[str, object]:
        """The armed faults (with ``remaining``) and latencies, for ``GET /_emulator/faults``."""
        with self._lock:
            faults = [{**fault.to_json(), "remaining": left[0]} for fault, left in self._armed]
            return {"faults": faults, "latency": dict(self._latency)}
