"""SGLang's answers classified: status first, then the contract's quoted messages.

Pure, as ``_protocol``. Only ``success`` and the HTTP status are trusted; unknown keys are ignored
and ``error_message`` may be ``""`` or ``null``, so answers of SGLang 0.4.10 to 0.5.23 classify.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar

from pulumi_lora._errors import (
    MIN_SGLANG,
    BadRequest,
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
    SmokeFailed,
    Unauthorized,
    UnsupportedServer,
)
from pulumi_lora._sglang._protocol import (
    GENERATE_ROUTE,
    HEALTH_ROUTE,
    LOAD_ROUTE,
    MAX_BODY_BYTES,
    MODELS_ROUTE,
    REDACTED,
    SERVER_INFO_ROUTE,
    UNLOAD_ROUTE,
    AlreadyLoaded,
    Health,
    Loaded,
    LoadOutcome,
    ModelList,
    NotLoaded,
    Peer,
    ServerInfo,
    Smoked,
    Unloaded,
    UnloadOutcome,
    redact,
)

_LORA_ROUTES: Final = frozenset({LOAD_ROUTE, UNLOAD_ROUTE})

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
            body = body.replace(secret.encode(), REDACTED.encode())
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


NULL_LOGPROB = "logprob is null (NaN or Inf)"
"""A smoke's verdict when SGLang wrote the token's logprob as ``null``: orjson's spelling of NaN
and ±Inf, which is what an adapter whose weights are broken computes."""


def classify_smoke(status: int, body: bytes, *, name: str, peer: Peer) -> Smoked:
    """Classify the smoke generation's ``POST /generate`` answer for adapter ``name``. Pure.

    `Smoked` for a 200 whose first output token has a finite logprob
    (``meta_info.output_token_logprobs[0][0]``: a JSON number, not a bool, finite). A 400 is
    `SmokeFailed` in SGLang's words (``error.message``, or the contract check's ``error``
    string); a ``null`` logprob is `SmokeFailed` (:data:`NULL_LOGPROB`). A 200 without the
    logprob is an answer outside the contract (`SGLangProtocolError`); other statuses raise as
    on every route.
    """
    reply = _Reply(peer, GENERATE_ROUTE, status, body)
    _check_status(reply, expected={200, 400})
    data = _json_object(reply)
    if status == 400:
        raise reply.error(SmokeFailed, server_message=_error_message(data))
    meta = data.get("meta_info")
    tokens = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    first = tokens[0] if isinstance(tokens, list) and tokens else None
    if not isinstance(first, list) or not first:
        raise reply.error(
            SGLangProtocolError, "the answer has no `meta_info.output_token_logprobs` entry"
        )
    logprob = first[0]
    if logprob is None:
        raise reply.error(SmokeFailed, server_message=NULL_LOGPROB)
    if isinstance(logprob, bool) or not isinstance(logprob, int | float):
        raise reply.error(SGLangProtocolError, "the output token's logprob is not a number")
    if not math.isfinite(logprob):  # a server that writes NaN and Infinity as JSON literals
        raise reply.error(SmokeFailed, server_message=f"logprob is {logprob}")
    return Smoked(name, float(logprob))


def _error_message(data: dict[str, object]) -> str:
    """The text of a ``/generate`` 400: ``{"error": {"message": ...}}`` for what the server
    raised, ``{"error": "..."}`` for its contract check, OpenAI's ``{"message": ...}``."""
    error = data.get("error")
    if isinstance(error, dict) and error.get("message") is not None:
        return str(error["message"])
    if error is not None:
        return str(error)
    return str(data.get("message") or data.get("detail") or "")


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
    elif reply.route == GENERATE_ROUTE:
        message = (
            "SGLang refused the API key on /generate (the smoke generation after a load): it is "
            "wrong, or the server runs with both `--api-key` and `--admin-api-key` (SGLang "
            "≥ 0.5.8), whose LoRA routes accept only the admin key and /generate only the API "
            "key; one key can't do both, so set smoke_test=false for adapters on that server"
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
