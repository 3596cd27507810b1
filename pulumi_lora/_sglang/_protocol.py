"""SGLang's runtime-LoRA HTTP contract as pure values: the routes, the requests, the outcomes.

``_answers`` classifies answers into these outcomes or into `pulumi_lora._errors`. Nothing here
does I/O: the sync and async clients only send, so both decide identically.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from pulumi_lora._errors import (
    ConfigurationError,
)
from pulumi_lora._models import PROXY_STRIPS_KEY
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._version import __version__

__all__ = [
    "GENERATE_ROUTE",
    "HEALTH_ROUTE",
    "LEGACY_SERVER_INFO_ROUTE",
    "LOAD_ROUTE",
    "MAX_BODY_BYTES",
    "MODELS_ROUTE",
    "SERVER_INFO_ROUTE",
    "UNLOAD_ROUTE",
    "AlreadyLoaded",
    "Health",
    "LoadOutcome",
    "Loaded",
    "ModelList",
    "NotLoaded",
    "Peer",
    "Request",
    "ServerInfo",
    "Smoked",
    "UnloadOutcome",
    "Unloaded",
    "build_headers",
    "credential_values",
    "health_request",
    "load_request",
    "models_request",
    "redact",
    "server_info_request",
    "smoke_request",
    "unload_request",
]

LOAD_ROUTE: Final = "/load_lora_adapter"
UNLOAD_ROUTE: Final = "/unload_lora_adapter"
MODELS_ROUTE: Final = "/v1/models"
HEALTH_ROUTE: Final = "/health"
GENERATE_ROUTE: Final = "/generate"
SERVER_INFO_ROUTE: Final = "/server_info"
#: ``/server_info``'s name before SGLang 0.5.6.
LEGACY_SERVER_INFO_ROUTE: Final = "/get_server_info"

MAX_BODY_BYTES: Final = 1024 * 1024
"""Largest answer body accepted, in bytes. Real answers are a few KiB (a /v1/models listing of
hundreds of adapters stays far below); the clients stop reading just past this, so a broken or
hostile server can't make them hold more."""

REDACTED: Final = "[redacted]"
_CREDENTIAL_HEADERS: Final = frozenset({"authorization", "proxy-authorization"})
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

# --- values -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request to SGLang as a plain value; a client only has to send it."""

    method: Literal["GET", "POST"]
    path: str
    """Route relative to the client's base URL (which may carry a proxy prefix)."""
    read_timeout: float
    """Seconds to wait for the answer on this route, from `ClientTimeouts`."""
    json: Mapping[str, object] | None = field(default=None, hash=False)
    """JSON body, or None for a GET."""


@dataclass(frozen=True, slots=True)
class Peer:
    """The server being talked to, as its errors should describe it."""

    label: str
    """Pod name or URL that errors name as their target."""
    api_key_configured: bool = False
    """Whether an SGLang API key is sent: lets a 401 say which key is missing or wrong."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Credential values to cut out of anything an error keeps (a server may echo headers)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """The adapter was loaded (200 with ``success: true``).

    ``path`` is the path SGLang reports for the name (the requested one when it reports none).
    ``loaded_adapters`` is the server's whole name→path map after the load, without anything it
    evicted to make room (SGLang ≥ 0.5.6 evicts silently), or None when the answer has no map.
    """

    name: str
    path: str
    loaded_adapters: Mapping[str, str] | None = field(hash=False)


@dataclass(frozen=True, slots=True)
class AlreadyLoaded:
    """The name is taken (SGLang's duplicate-name 400; loading is not idempotent).

    ``path`` is the path loaded under that name, looked up in the answer's ``loaded_adapters``,
    or None when the answer doesn't say. The caller compares it with the desired path: equal is
    success, different is a swap (unload, then load), None means "ask /v1/models".
    """

    name: str
    path: str | None


@dataclass(frozen=True, slots=True)
class Unloaded:
    """The adapter was unloaded; ``remaining`` is what stays loaded (None if not reported)."""

    name: str
    remaining: Mapping[str, str] | None = field(hash=False)


@dataclass(frozen=True, slots=True)
class NotLoaded:
    """Unload of a name the server doesn't have: never loaded, already unloaded, or evicted."""

    name: str


@dataclass(frozen=True, slots=True)
class ModelList:
    """``GET /v1/models``: the served base model and every registered adapter's name → path.

    Built from the entries with a non-null ``parent``, keyed by ``id`` with ``root`` as path,
    relying on neither the order (LRU) nor ``created`` (per request).
    """

    base_model: str
    adapters: Mapping[str, str] = field(hash=False)


@dataclass(frozen=True, slots=True)
class Health:
    """``GET /health``: 200 is ready; 503 (starting or shutting down) is not ready.

    Here 503 is the answer asked for, not a failure, so it is a value; on every other route a 503
    raises `ServerStarting`.
    """

    ready: bool


@dataclass(frozen=True)
class ServerInfo:
    """The two harmless fields of ``GET /server_info``, or why they could not be read.

    The body echoes the server's API keys: nothing else of it is kept, and no message quotes it.
    """

    version: str | None = None
    """SGLang's ``version`` (e.g. ``0.5.15``)."""
    lora_enabled: bool | None = None
    """``enable_lora``: whether the server runs with LoRA."""
    error: str = ""
    """Why neither could be read (the version is then unknown)."""


@dataclass(frozen=True, slots=True)
class Smoked:
    """The smoke generation through the adapter answered 200 with a finite logprob."""

    name: str
    logprob: float
    """The logprob of the one greedy token: a finite number (SGLang writes NaN and ±Inf as
    ``null``), which shows the adapter's weights produce usable logits."""


LoadOutcome: TypeAlias = Loaded | AlreadyLoaded
UnloadOutcome: TypeAlias = Unloaded | NotLoaded

# --- requests -----------------------------------------------------------------------------------


def load_request(name: str, path: str, *, pinned: bool, timeouts: ClientTimeouts) -> Request:
    """``POST /load_lora_adapter``, with the long load timeout. Pure.

    ``pinned`` is always sent: SGLang < 0.5.1 ignores unknown keys.
    """
    body = {"lora_name": name, "lora_path": path, "pinned": pinned}
    return Request("POST", LOAD_ROUTE, timeouts.load, body)


def unload_request(name: str, *, timeouts: ClientTimeouts) -> Request:
    """``POST /unload_lora_adapter``, with the unload timeout (held back by in-flight requests)."""
    return Request("POST", UNLOAD_ROUTE, timeouts.unload, {"lora_name": name})


SMOKE_PROMPT: Final = (1,)
"""The smoke generation's prompt, as token ids: id 1 exists in every vocabulary, and ids need no
tokenizer (a server started with ``--skip-tokenizer-init`` refuses text)."""


def smoke_request(name: str, *, timeouts: ClientTimeouts) -> Request:
    """``POST /generate``: one greedy token through adapter ``name``, with its logprob, under the
    smoke timeout. Pure.

    A load proves the weights were read, not that they compute: NaN weights or a broken
    config load fine and then answer nothing usable. Only the output token's logprob comes back
    (SGLang's default ``logprob_start_len`` of -1: no input logprobs to compute).
    """
    body = {
        "input_ids": list(SMOKE_PROMPT),
        "lora_path": name,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": True,
    }
    return Request("POST", GENERATE_ROUTE, timeouts.smoke, body)


def models_request(*, timeouts: ClientTimeouts) -> Request:
    """``GET /v1/models``, with the short read timeout. Pure."""
    return Request("GET", MODELS_ROUTE, timeouts.read)


def health_request(*, timeouts: ClientTimeouts) -> Request:
    """``GET /health`` (not ``/health_generate``, which runs a generation). Pure."""
    return Request("GET", HEALTH_ROUTE, timeouts.read)


def server_info_request(*, legacy: bool = False, timeouts: ClientTimeouts) -> Request:
    """``GET /server_info`` (``legacy``: ``/get_server_info`` before 0.5.6), short timeout. Pure."""
    return Request("GET", LEGACY_SERVER_INFO_ROUTE if legacy else SERVER_INFO_ROUTE, timeouts.read)


def build_headers(
    api_key: str | None = None, extra_headers: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The headers every request carries. Pure.

    The API key goes only into ``Authorization: Bearer``. ``extra_headers`` (e.g. the apiserver
    proxy's bearer token) are added as given. Raises `ConfigurationError`, never quoting a value,
    for an empty key, for characters an HTTP header can't carry (which httpx2 would otherwise
    report with the value in the message), and for an extra ``Authorization`` next to an API
    key: both would claim the one header, and the apiserver proxy strips it before SGLang anyway.
    """
    headers = {"Accept": "application/json", "User-Agent": f"pulumi-lora/{__version__}"}
    if api_key is not None:
        _check_header_value("the API key", api_key)
        headers["Authorization"] = f"Bearer {api_key}"
    for name, value in (extra_headers or {}).items():
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigurationError(f"extra header name {name!r} is not a valid HTTP header name")
        _check_header_value(f"extra header {name!r}", value)
        if name.lower() == "authorization" and api_key is not None:
            raise ConfigurationError(
                "an API key and an extra Authorization header can't both be sent: "
                f"{PROXY_STRIPS_KEY}"
            )
        for existing in [key for key in headers if key.lower() == name.lower()]:
            del headers[existing]
        headers[name] = value
    return headers


def credential_values(
    api_key: str | None = None, extra_headers: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The secret strings among the headers, for `Peer.secrets`: the API key, and the values
    (with and without their scheme, e.g. ``Bearer``) of credential headers. Pure."""
    values = [api_key] if api_key else []
    for name, value in (extra_headers or {}).items():
        if name.lower() in _CREDENTIAL_HEADERS:
            values += [value, value.partition(" ")[2].strip()]
    return tuple(value for value in values if value)


def redact(text: str, peer: Peer) -> str:
    """``text`` with every secret of ``peer`` replaced by a marker. Pure."""
    for secret in peer.secrets:
        text = text.replace(secret, REDACTED)
    return text


def _check_header_value(what: str, value: str) -> None:
    """Raise unless ``value`` is non-empty printable ASCII without surrounding spaces."""
    if not value or not value.isascii() or not value.isprintable() or value != value.strip():
        raise ConfigurationError(
            f"{what} is empty or has characters an HTTP header can't carry "
            "(only printable ASCII, no surrounding spaces)"
        )
