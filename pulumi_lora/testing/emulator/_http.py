"""Requests and responses as plain values, so the routes can be handled without a socket."""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = [
    "INTERNAL_SERVER_ERROR",
    "Request",
    "Response",
    "empty_response",
    "json_response",
    "text_response",
]


@dataclass(frozen=True)
class Request:
    """What the routes need of an HTTP request."""

    method: str
    path: str
    """The path without its query string."""
    authorization: str | None
    """The ``Authorization`` header, if any."""
    body: bytes


@dataclass(frozen=True)
class Response:
    """An HTTP response to send; ``content_type`` ``None`` sends no ``Content-Type``."""

    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


def json_response(status: int, payload: object, *headers: tuple[str, str]) -> Response:
    """A compact JSON response, as FastAPI's ``ORJSONResponse`` sends it."""
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(status, body, "application/json", headers)


def text_response(status: int, text: str) -> Response:
    """A plain-text response, as Starlette's ``PlainTextResponse`` sends it."""
    return Response(status, text.encode(), "text/plain; charset=utf-8")


def empty_response(status: int) -> Response:
    """A response without a body (SGLang's ``/health``)."""
    return Response(status)


INTERNAL_SERVER_ERROR = text_response(500, "Internal Server Error")
"""Starlette's answer to an uncaught exception (SGLang's ``--dp-size`` assertion, a bug)."""
