"""SGLang's runtime-LoRA HTTP contract as pure functions; this module is where it is written down.

Requests are built as plain values; answers are classified from the status code and the body
bytes into outcome values, or into errors from `pulumi_lora._errors`. Nothing here does I/O or
imports an HTTP library: the sync and async clients only send, so both decide identically.

Classification goes status first (the same rules on every route), then, on the LoRA routes, the
contract's quoted substrings of SGLang's message. Only ``success`` and the HTTP status are
trusted; unknown keys are ignored and ``error_message`` may be ``""`` or ``null``, so answers of
every SGLang from 0.4.10 to 0.5.23 classify. ``tests/unit/test_sglang_protocol.py`` maps every
message of the contract to its outcome; ``tests/contract`` holds the emulator to the same rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias, TypeVar

from pulumi_lora._errors import (
    MIN_SGLANG,
    BadRequest,
    ConfigurationError,
    EvictionImpossible,
    IncompatibleAdapter,
    IncompleteUnload,
    InvalidAdapterPath,
    LoRADisabled,
    PermanentSGLangError,
    PinStarvation,
    ServerStarting,
    SGLangConnectionError,
    SGLangError,
    SGLangProtocolError,
    SGLangServerError,
    Unauthorized,
    UnsupportedServer,
)
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._version import __version__

__all__ = [
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
    "UnloadOutcome",
    "Unloaded",
    "build_headers",
    "classify_health",
    "classify_load",
    "classify_models",
    "classify_server_info",
    "classify_unload",
    "credential_values",
    "health_request",
    "load_request",
    "models_request",
    "redact",
    "server_info_request",
    "server_info_unread",
    "unload_request",
]

LOAD_ROUTE: Final = "/load_lora_adapter"
UNLOAD_ROUTE: Final = "/unload_lora_adapter"
MODELS_ROUTE: Final = "/v1/models"
HEALTH_ROUTE: Final = "/health"
SERVER_INFO_ROUTE: Final = "/server_info"
#: ``/server_info``'s name before SGLang 0.5.6.
LEGACY_SERVER_INFO_ROUTE: Final = "/get_server_info"
_LORA_ROUTES: Final = frozenset({LOAD_ROUTE, UNLOAD_ROUTE})

MAX_BODY_BYTES: Final = 1024 * 1024
"""Largest answer body accepted, in bytes. Real answers are a few KiB (a /v1/models listing of
hundreds of adapters stays far below); the clients stop reading just past this, so a broken or
hostile server can't make them hold more."""

_REDACTED: Final = "[redacted]"
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
                "an API key and an extra Authorization header can't both be sent: the apiserver "
                "pod proxy strips Authorization, so a keyed SGLang must be reached directly"
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
        text = text.replace(secret, _REDACTED)
    return text


def _check_header_value(what: str, value: str) -> None:
    """Raise unless ``value`` is non-empty printable ASCII without surrounding spaces."""
    if not value or not value.isascii() or not value.isprintable() or value != value.strip():
        raise ConfigurationError(
            f"{what} is empty or has characters an HTTP header can't carry "
            "(only printable ASCII, no surrounding spaces)"
        )


# --- answers ------------------------------------------------------------------------------------

_E = TypeVar("_E", bound=SGLangError)


@dataclass(frozen=True, slots=True)
class _Reply:
    """One answer being classified, with what its errors need to say where it came from."""

    peer: Peer
    route: str
    status: int
    body: bytes

    def error(
        self, cls: type[_E], message: str | None = None, *, server_message: str | None = None
    ) -> _E:
        """An error of ``cls`` about this answer, with credentials cut out of what it keeps."""
        body = self.body
        for secret in self.peer.secrets:
            body = body.replace(secret.encode(), _REDACTED.encode())
        if server_message is not None:
            server_message = redact(server_message, self.peer)
        return cls(
            message,
            target=self.peer.label,
            route=self.route,
            status_code=self.status,
            server_message=server_message,
            body=body,
        )


@dataclass(frozen=True, slots=True)
class _LoRAResult:
    """The fields of a load/unload answer that the contract lets a client rely on."""

    success: bool
    message: str
    adapters: dict[str, str] | None


_Rule: TypeAlias = tuple[tuple[str, ...], type[PermanentSGLangError | AlreadyLoaded]]
"""Phrases of SGLang's message (any one matches) and what a match means."""

# Ordered: phrases of several words first, because a single word ("incompatible", "starvation")
# could also be part of an adapter name or path that another message quotes. A load 400 matching
# none of them is a path error: for those SGLang passes the underlying error text, which varies.
_LOAD_RULES: Final[tuple[_Rule, ...]] = (
    (("LoRA is not enabled",), LoRADisabled),
    (
        (
            "Didn't find any LoRA adapters when trying to evict",  # ≥ 0.5.6: all pinned
            "Maximum number of loaded LoRA adapters",  # ≤ 0.5.5: no eviction, full is a 400
            "Error while unloading LRU LoRA adapter",  # ≥ 0.5.6: evicting failed
        ),
        EvictionImpossible,
    ),
    (("incomplete unload",), IncompleteUnload),
    (("already loaded", "already exists"), AlreadyLoaded),  # newer wording / 0.4.10 to 0.5.3
    (("incompatible",), IncompatibleAdapter),
    (("starvation",), PinStarvation),
)


def classify_load(status: int, body: bytes, *, name: str, path: str, peer: Peer) -> LoadOutcome:
    """Classify a ``POST /load_lora_adapter`` answer for adapter ``name`` at ``path``. Pure.

    Returns `Loaded` or `AlreadyLoaded`; raises an `SGLangError` for everything else (see the
    module docstring and `_LOAD_RULES` for the order of the rules).
    """
    reply = _Reply(peer, LOAD_ROUTE, status, body)
    result = _lora_result(reply)
    adapters = result.adapters
    if result.success:
        return Loaded(name, path if adapters is None else adapters.get(name, path), adapters)
    for phrases, kind in _LOAD_RULES:
        if any(phrase in result.message for phrase in phrases):
            if issubclass(kind, AlreadyLoaded):
                return AlreadyLoaded(name, None if adapters is None else adapters.get(name))
            raise reply.error(kind, server_message=result.message)
    raise reply.error(InvalidAdapterPath, server_message=result.message)


def classify_unload(status: int, body: bytes, *, name: str, peer: Peer) -> UnloadOutcome:
    """Classify a ``POST /unload_lora_adapter`` answer for adapter ``name``. Pure.

    Returns `Unloaded` or `NotLoaded` ("does not exist"). Any other refusal is a failed backend
    unload; SGLang unregisters the name before unloading, so it is raised as retryable: the retry
    answers "does not exist".
    """
    reply = _Reply(peer, UNLOAD_ROUTE, status, body)
    result = _lora_result(reply)
    if result.success:
        return Unloaded(name, result.adapters)
    if "LoRA is not enabled" in result.message:
        raise reply.error(LoRADisabled, server_message=result.message)
    if "does not exist" in result.message:
        return NotLoaded(name)
    raise reply.error(
        SGLangServerError, "SGLang failed to unload the adapter", server_message=result.message
    )


def classify_models(status: int, body: bytes, *, peer: Peer) -> ModelList:
    """Classify a ``GET /v1/models`` answer into the base model and the adapters. Pure.

    Entries without a ``parent`` key come from SGLang < 0.5.5, which lists no adapters there:
    that is `UnsupportedServer`, since drift can't be read from such a server.
    """
    reply = _Reply(peer, MODELS_ROUTE, status, body)
    _check_status(reply, expected={200})
    entries = _json_object(reply).get("data")
    if not isinstance(entries, list):
        raise reply.error(SGLangProtocolError, "the answer has no `data` list")
    base_model: str | None = None
    adapters: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise reply.error(SGLangProtocolError, "a `data` entry has no string `id`")
        if "parent" not in entry:
            raise reply.error(
                UnsupportedServer,
                f"/v1/models entries have no `parent`, so this SGLang (< {MIN_SGLANG}) lists no "
                f"adapters there; pulumi-lora supports SGLang ≥ {MIN_SGLANG}",
            )
        parent, root = entry["parent"], entry.get("root")
        if parent is None:
            base_model = base_model or entry["id"]
        elif isinstance(parent, str) and isinstance(root, str):
            adapters[entry["id"]] = root
        else:
            raise reply.error(SGLangProtocolError, "an adapter entry has no string `parent`/`root`")
    if base_model is None:
        raise reply.error(SGLangProtocolError, "the answer lists no base model (`parent: null`)")
    return ModelList(base_model, adapters)


def classify_health(status: int, body: bytes, *, peer: Peer) -> Health:
    """Classify a ``GET /health`` answer: 200 ready, 503 not ready, anything else raises. Pure."""
    reply = _Reply(peer, HEALTH_ROUTE, status, body)
    _check_status(reply, expected={200, 503})
    return Health(ready=status == 200)


def classify_server_info(status: int, body: bytes) -> ServerInfo:
    """Classify a ``GET /server_info`` answer into its ``version`` and ``enable_lora``. Pure.

    Never raises: an answer that says nothing becomes the reason in ``error`` (the version is then
    unknown, which doctor reports as a warning). Nothing else of the body is kept.
    """
    if status != 200:
        return ServerInfo(error=f"{SERVER_INFO_ROUTE} answered HTTP {status}")
    if len(body) > MAX_BODY_BYTES:
        return ServerInfo(error=f"{SERVER_INFO_ROUTE} answered more than {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(body)
    except ValueError:
        return ServerInfo(error=f"{SERVER_INFO_ROUTE} did not answer JSON")
    if not isinstance(data, dict):
        return ServerInfo(error=f"{SERVER_INFO_ROUTE} did not answer a JSON object")
    version, enabled = data.get("version"), data.get("enable_lora")
    return ServerInfo(
        version=str(version) if version is not None else None,
        lora_enabled=enabled if isinstance(enabled, bool) else None,
    )


def server_info_unread(error: SGLangError) -> ServerInfo:
    """Pure: ``/server_info`` got no answer (``error``, from the client): named by what httpx2
    raised (``error``'s cause), never by a message that could quote the server."""
    return ServerInfo(
        error=f"{SERVER_INFO_ROUTE} could not be read ({type(error.__cause__ or error).__name__})"
    )


def _lora_result(reply: _Reply) -> _LoRAResult:
    """Check the status, then parse a load/unload answer (SGLang uses 200 and 400 only).

    A 400 in FastAPI's error shape (no ``success``, a ``message``) is a malformed request. A 400
    saying ``success: true`` is a failure anyway: the status is trusted first.
    """
    _check_status(reply, expected={200, 400})
    data = _json_object(reply)
    if "success" not in data:
        if reply.status == 400 and ("message" in data or "detail" in data):
            detail = data.get("message", data.get("detail"))
            raise reply.error(BadRequest, server_message=str(detail))
        raise reply.error(SGLangProtocolError, "the answer has no `success` field")
    success = data["success"]
    message = data.get("error_message")
    adapters = data.get("loaded_adapters")
    if not isinstance(success, bool):
        raise reply.error(SGLangProtocolError, "`success` is not a boolean")
    if message is not None and not isinstance(message, str):
        raise reply.error(SGLangProtocolError, "`error_message` is not a string")
    if adapters is not None and not (
        isinstance(adapters, dict)
        and all(isinstance(key, str) and isinstance(value, str) for key, value in adapters.items())
    ):
        raise reply.error(SGLangProtocolError, "`loaded_adapters` is not a name → path object")
    return _LoRAResult(success and reply.status == 200, message or "", adapters)


def _check_status(reply: _Reply, *, expected: set[int]) -> None:
    """Raise the error for any status the route's own rules don't handle (``expected``).

    401/403 refused credentials, 404/405 a missing route, 422 a malformed request, 503 starting,
    other 5xx a server failure, anything else an answer outside the contract.
    """
    status = reply.status
    if status in expected:
        return
    if status in (401, 403):
        raise _refused(reply)
    if status in (404, 405):
        raise _missing_route(reply)
    if status == 422:
        raise reply.error(BadRequest)
    if status == 503:
        raise reply.error(ServerStarting)
    if 500 <= status <= 599:
        message = f"SGLang failed with HTTP {status}"
        if status == 500 and reply.route in _LORA_ROUTES:
            message += (
                "; a 500 on the LoRA routes is also how SGLang reports `--dp-size` > 1, which "
                "runtime LoRA loading does not support"
            )
        raise reply.error(SGLangServerError, message)
    raise reply.error(SGLangProtocolError, f"unexpected HTTP status {status} on {reply.route}")


def _refused(reply: _Reply) -> SGLangError:
    """The `Unauthorized` for a 401/403, saying whose credentials and which key to check."""
    apiserver = _kubernetes_status_message(reply.body)
    lora = reply.route in _LORA_ROUTES
    if apiserver is not None:
        message = (
            "the Kubernetes apiserver refused the request: check the bearer token in the extra "
            "headers and RBAC for pods/proxy"
        )
    elif reply.status == 403:
        message = "the server, or a proxy in front of it, forbids this request (HTTP 403)"
    elif not reply.peer.api_key_configured:
        message = (
            "SGLang requires an API key ("
            + ("`--api-key`, or on SGLang ≥ 0.5.8 `--admin-api-key`" if lora else "`--api-key`")
            + ") and none is configured; the apiserver pod proxy strips the Authorization "
            "header, so a keyed SGLang must be reached directly"
        )
    elif lora:
        message = (
            "SGLang refused the API key on a LoRA route: it is wrong, or the server runs with "
            "`--admin-api-key` (SGLang ≥ 0.5.8), whose LoRA routes accept only the admin key; "
            "configure the admin key as the API key"
        )
    else:
        message = "SGLang refused the API key (`--api-key`): it is wrong"
    return reply.error(Unauthorized, message, server_message=apiserver)


def _missing_route(reply: _Reply) -> SGLangError:
    """The error for a 404/405: an old or foreign server, or a pod the apiserver can't find."""
    apiserver = _kubernetes_status_message(reply.body)
    if apiserver is not None and reply.status == 404:
        return reply.error(
            SGLangConnectionError,
            "the Kubernetes apiserver could not proxy to the pod (gone, or a wrong port)",
            server_message=apiserver,
        )
    message = f"the server has no {reply.route} route (HTTP {reply.status})"
    if reply.route == HEALTH_ROUTE:
        message += ": the URL does not point at SGLang's HTTP port"
        return reply.error(UnsupportedServer, message)
    message += (
        f": SGLang < 0.4.9 has no runtime LoRA routes and < {MIN_SGLANG} lists no adapters in "
        f"/v1/models (pulumi-lora supports SGLang ≥ {MIN_SGLANG}), or the URL does not point at "
        "SGLang's HTTP port"
    )
    return reply.error(UnsupportedServer, message)


def _json_object(reply: _Reply) -> dict[str, object]:
    """The body as a JSON object, or a `SGLangProtocolError` (too big, not JSON, not an object)."""
    if len(reply.body) > MAX_BODY_BYTES:
        raise reply.error(SGLangProtocolError, f"the answer is larger than {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(reply.body)
    except (ValueError, RecursionError):  # ValueError covers bad UTF-8 and huge integers
        # Not chained: the decoder's exception holds the whole body, before redaction.
        raise reply.error(SGLangProtocolError, "the answer is not valid JSON") from None
    if not isinstance(data, dict):
        raise reply.error(SGLangProtocolError, "the answer is not a JSON object")
    return data


def _kubernetes_status_message(body: bytes) -> str | None:
    """The message of a Kubernetes ``Status`` body (the apiserver answered, not SGLang), or None."""
    if len(body) > MAX_BODY_BYTES:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict) and data.get("kind") == "Status":
        return str(data.get("message") or data.get("reason") or "")
    return None
