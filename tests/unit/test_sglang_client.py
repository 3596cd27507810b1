"""The sync and async clients over httpx2.MockTransport (no sockets): what they send, what they
return, and that every httpx2 failure comes back as a project error."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pulumi_lora import _settings
from pulumi_lora._errors import (
    ConfigurationError,
    LoRADisabled,
    PulumiLoRAError,
    ServerStarting,
    SGLangConnectionError,
    SGLangError,
    SGLangProtocolError,
    SGLangServerError,
    SGLangTimeout,
    Unauthorized,
    UnsupportedServer,
)
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import (
    MAX_BODY_BYTES,
    AlreadyLoaded,
    AsyncSGLangClient,
    Health,
    Loaded,
    ModelList,
    NotLoaded,
    ServerInfo,
    SGLangClient,
    Unloaded,
)

URL = "http://10.0.0.5:30000"
KEY = "sk-very-secret-key"
TOKEN = "kube-t0ken-value"
Handler = Callable[[httpx2.Request], httpx2.Response]


def answer(status: int, body: object = b"") -> Handler:
    """A handler that answers every request with ``status`` and ``body`` (JSON unless bytes)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return lambda request: httpx2.Response(status, content=content)


def raising(exc: Exception) -> Handler:
    """A handler that fails the exchange with ``exc``."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        raise exc

    return handler


class Call:
    """Runs one client method the sync or the async way, so each test covers both clients."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, handler: Handler, method: str, *args: Any, **options: Any) -> Any:
        transport = httpx2.MockTransport(handler)
        kwargs = {key: options.pop(key) for key in list(options) if key in CLIENT_OPTIONS}
        if self.kind == "sync":
            with SGLangClient(kwargs.pop("url", URL), transport=transport, **kwargs) as client:
                return getattr(client, method)(*args, **options)

        async def run() -> Any:
            url = kwargs.pop("url", URL)
            async with AsyncSGLangClient(url, transport=transport, **kwargs) as client:
                return await getattr(client, method)(*args, **options)

        return asyncio.run(run())

    def stream(self, chunks: Callable[[], Iterator[bytes]]) -> Any:
        """A response body for this kind of client, produced lazily by ``chunks``."""
        if self.kind == "sync":
            return chunks()

        async def agen() -> AsyncIterator[bytes]:
            for chunk in chunks():
                yield chunk

        return agen()


CLIENT_OPTIONS = {"url", "api_key", "extra_headers", "timeouts", "label"}


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest) -> Call:
    return Call(request.param)


def lora(success: bool, message: str = "", adapters: dict[str, str] | None = None) -> object:
    return {"rid": None, "success": success, "error_message": message, "loaded_adapters": adapters}


# --- /server_info (doctor's version check) ----------------------------------------------------


def test_server_info_keeps_only_version_and_lora(call: Call) -> None:
    body = {"version": "0.5.15", "enable_lora": True, "api_key": KEY, "admin_api_key": KEY}
    info = call(answer(200, body), "server_info")
    assert info == ServerInfo("0.5.15", True)
    assert KEY not in repr(info)


def test_server_info_falls_back_to_the_old_route(call: Call) -> None:
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        if request.url.path == "/server_info":
            return httpx2.Response(404, json={"detail": "Not Found"})
        return httpx2.Response(200, json={"version": "0.5.5", "enable_lora": False})

    assert call(handler, "server_info") == ServerInfo("0.5.5", False)
    assert seen == ["/server_info", "/get_server_info"]


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (500, b"boom", "/server_info answered HTTP 500"),
        (200, b"<html>", "/server_info did not answer JSON"),
        (200, b"[1, 2]", "/server_info did not answer a JSON object"),
    ],
)
def test_server_info_says_why_it_told_nothing(
    call: Call, status: int, body: bytes, error: str
) -> None:
    assert call(answer(status, body), "server_info") == ServerInfo(error=error)


def test_server_info_unreachable_names_what_httpx_raised(call: Call) -> None:
    info = call(raising(httpx2.ConnectError("refused")), "server_info")
    assert info == ServerInfo(error="/server_info could not be read (ConnectError)")


# --- outcomes -----------------------------------------------------------------------------------


def test_load(call: Call) -> None:
    handler = answer(200, lora(True, "", {"sql": "/a/sql"}))
    assert call(handler, "load_adapter", "sql", "/a/sql") == Loaded(
        "sql", "/a/sql", {"sql": "/a/sql"}
    )


def test_load_duplicate(call: Call) -> None:
    handler = answer(
        400,
        lora(
            False, "Failed to load LoRA adapter sql because it is already loaded", {"sql": "/a/old"}
        ),
    )
    assert call(handler, "load_adapter", "sql", "/a/new") == AlreadyLoaded("sql", "/a/old")


def test_unload(call: Call) -> None:
    assert call(answer(200, lora(True, "", {})), "unload_adapter", "sql") == Unloaded("sql", {})
    gone = answer(400, lora(False, "LoRA with name sql does not exist. Loaded LoRAs: []"))
    assert call(gone, "unload_adapter", "sql") == NotLoaded("sql")


def test_list_models(call: Call) -> None:
    body = {
        "object": "list",
        "data": [
            {"id": "sql", "root": "/a/sql", "parent": "llama", "created": 5},
            {"id": "llama", "root": "llama", "parent": None, "created": 5},
        ],
    }
    assert call(answer(200, body), "list_models") == ModelList("llama", {"sql": "/a/sql"})


def test_health(call: Call) -> None:
    assert call(answer(200), "health") == Health(ready=True)
    assert call(answer(503), "health") == Health(ready=False)


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (503, b"", ServerStarting),
        (500, b"Internal Server Error", SGLangServerError),
        (401, {"error": "Unauthorized"}, Unauthorized),
        (404, {"detail": "Not Found"}, UnsupportedServer),
        (400, lora(False, "LoRA is not enabled. Please set `--enable-lora`."), LoRADisabled),
        (200, b"not json", SGLangProtocolError),
        (200, {"success": True, "loaded_adapters": ["sql"]}, SGLangProtocolError),
    ],
)
def test_failures_raise_the_classified_error(
    call: Call, status: int, body: object, error: type[SGLangError]
) -> None:
    with pytest.raises(error) as caught:
        call(answer(status, body), "load_adapter", "sql", "/a/sql", label="llama-0")
    assert type(caught.value) is error
    assert caught.value.target == "llama-0"
    assert caught.value.route == "/load_lora_adapter"
    assert caught.value.status_code == status


# --- what is sent -------------------------------------------------------------------------------


def recorder(sent: list[httpx2.Request], status: int = 200, body: object = None) -> Handler:
    """A handler that keeps each request and answers a successful load/unload."""
    content = json.dumps(lora(True, "", {}) if body is None else body).encode()

    def handler(request: httpx2.Request) -> httpx2.Response:
        request.read()
        sent.append(request)
        return httpx2.Response(status, content=content)

    return handler


def test_load_request_on_the_wire(call: Call) -> None:
    sent: list[httpx2.Request] = []
    timeouts = ClientTimeouts(connect=1.5, read=7, load=123, unload=45)
    call(
        recorder(sent),
        "load_adapter",
        "sql",
        "/a/sql",
        pinned=True,
        api_key=KEY,
        extra_headers={"X-Trace": "t1"},
        timeouts=timeouts,
    )
    (request,) = sent
    assert request.method == "POST"
    assert str(request.url) == f"{URL}/load_lora_adapter"
    assert json.loads(request.content) == {
        "lora_name": "sql",
        "lora_path": "/a/sql",
        "pinned": True,
    }
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.headers["X-Trace"] == "t1"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"].startswith("pulumi-lora/")
    assert request.extensions["timeout"] == {"connect": 1.5, "read": 123, "write": 7, "pool": 1.5}


def test_each_route_gets_its_own_read_timeout(call: Call) -> None:
    sent: list[httpx2.Request] = []
    timeouts = ClientTimeouts(connect=1, read=2, load=3, unload=4)
    call(recorder(sent), "unload_adapter", "sql", timeouts=timeouts)
    call(
        recorder(sent, body={"data": [{"id": "m", "parent": None}]}),
        "list_models",
        timeouts=timeouts,
    )
    call(recorder(sent), "health", timeouts=timeouts)
    reads = {request.url.path: request.extensions["timeout"]["read"] for request in sent}
    assert reads == {"/unload_lora_adapter": 4, "/v1/models": 2, "/health": 2}
    assert {request.extensions["timeout"]["connect"] for request in sent} == {1}
    assert [request.method for request in sent] == ["POST", "GET", "GET"]


def test_no_api_key_no_authorization_header(call: Call) -> None:
    sent: list[httpx2.Request] = []
    call(recorder(sent), "health")
    assert "Authorization" not in sent[0].headers


def test_proxy_prefix_is_kept(call: Call) -> None:
    """The apiserver pod proxy: a base path before the routes, its token as an extra header."""
    sent: list[httpx2.Request] = []
    prefix = "https://kube:6443/api/v1/namespaces/models/pods/llama-0:30000/proxy"
    call(
        recorder(sent),
        "unload_adapter",
        "sql",
        url=prefix,
        extra_headers={"Authorization": "Bearer kube-token"},
    )
    assert str(sent[0].url) == f"{prefix}/unload_lora_adapter"
    assert sent[0].headers["Authorization"] == "Bearer kube-token"


# --- transport failures -------------------------------------------------------------------------


def httpx_exceptions() -> list[type[Exception]]:
    """Every exception class httpx2 exports."""
    return [
        value
        for name in httpx2.__all__
        if inspect.isclass(value := getattr(httpx2, name)) and issubclass(value, Exception)
    ]


def instance(cls: type[Exception]) -> Exception:
    """An instance of any httpx2 exception class, whatever its constructor needs."""
    request = httpx2.Request("POST", URL)
    if issubclass(cls, httpx2.HTTPStatusError):
        return cls("boom", request=request, response=httpx2.Response(500, request=request))
    if issubclass(cls, httpx2.RequestError):
        return cls("boom", request=request)
    if len(inspect.signature(cls).parameters) == 0:
        return cls()
    return cls("boom")


@pytest.mark.parametrize("cls", httpx_exceptions(), ids=lambda cls: cls.__name__)
def test_no_httpx_exception_leaks(call: Call, cls: type[Exception]) -> None:
    exc = instance(cls)
    with pytest.raises(PulumiLoRAError) as caught:
        call(raising(exc), "load_adapter", "sql", "/a/sql")
    assert isinstance(caught.value, SGLangError)
    assert caught.value.retryable
    assert caught.value.__cause__ is exc
    assert caught.value.route == "/load_lora_adapter"
    assert caught.value.status_code is None


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (httpx2.ConnectTimeout("timed out"), SGLangTimeout),
        (httpx2.ReadTimeout("timed out"), SGLangTimeout),
        (httpx2.WriteTimeout("timed out"), SGLangTimeout),
        (httpx2.PoolTimeout("timed out"), SGLangTimeout),
        (httpx2.ConnectError("[Errno 111] Connection refused"), SGLangConnectionError),
        (httpx2.ReadError("reset"), SGLangConnectionError),
        (httpx2.ProxyError("proxy down"), SGLangConnectionError),
        (httpx2.RemoteProtocolError("peer closed connection"), SGLangProtocolError),
        (httpx2.DecodingError("bad gzip"), SGLangProtocolError),
    ],
)
def test_transport_failures_map_by_kind(
    call: Call, exc: Exception, error: type[SGLangError]
) -> None:
    with pytest.raises(error) as caught:
        call(raising(exc), "list_models")
    assert type(caught.value) is error
    assert type(exc).__name__ in str(caught.value)


@pytest.mark.parametrize(
    ("exc", "applied"),
    [
        (httpx2.ConnectTimeout("timed out"), False),
        (httpx2.PoolTimeout("timed out"), False),
        (httpx2.ConnectError("[Errno 111] Connection refused"), False),
        (httpx2.ProxyError("proxy down"), False),
        (httpx2.ReadTimeout("timed out"), True),
        (httpx2.WriteTimeout("timed out"), True),
        (httpx2.ReadError("reset"), True),
        (httpx2.RemoteProtocolError("Server disconnected without sending a response"), True),
    ],
)
def test_a_failure_after_sending_may_have_been_applied(
    call: Call, exc: Exception, applied: bool
) -> None:
    with pytest.raises(SGLangError) as caught:
        call(raising(exc), "load_adapter", "a", "/a")
    assert caught.value.maybe_applied is applied


def test_a_dripping_body_is_cut_off_at_the_deadline(call: Call) -> None:
    """Every chunk comes well within the read timeout, the whole answer never does."""
    timeouts = ClientTimeouts(connect=0.1, load=0.3)

    body = json.dumps(lora(True, adapters={"a": "/a"})).encode()  # ≈2 s at 20 ms a byte
    sent: list[int] = []

    def drip() -> Iterator[bytes]:
        for byte in body:
            time.sleep(0.02)
            sent.append(byte)
            yield bytes([byte])

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=call.stream(drip))

    with pytest.raises(
        SGLangTimeout, match=r"timed out: no complete answer within 0\.3 s"
    ) as caught:
        call(handler, "load_adapter", "a", "/a", timeouts=timeouts)
    assert len(sent) < len(body) // 2, (len(sent), len(body))  # cut off, not waited out
    assert caught.value.maybe_applied


def test_a_slow_but_timely_body_is_read(call: Call) -> None:
    def slow() -> Iterator[bytes]:
        for part in (b'{"data": [{"id": "base", "parent": null, "root": "base"}', b"]}"):
            time.sleep(0.05)
            yield part

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=call.stream(slow))

    listed = call(handler, "list_models", timeouts=ClientTimeouts(connect=0.1, read=1.0))
    assert listed.base_model == "base" and listed.adapters == {}


def test_timeout_messages_name_the_timeout(call: Call) -> None:
    timeouts = ClientTimeouts(connect=2, load=250)
    with pytest.raises(SGLangTimeout, match="no connection within 2 s"):
        call(raising(httpx2.ConnectTimeout("x")), "load_adapter", "a", "/a", timeouts=timeouts)
    with pytest.raises(SGLangTimeout, match="no complete answer within 250 s"):
        call(raising(httpx2.ReadTimeout("x")), "load_adapter", "a", "/a", timeouts=timeouts)


def body_then(exc: Exception) -> Callable[[], Iterator[bytes]]:
    def chunks() -> Iterator[bytes]:
        yield b'{"success": tr'
        raise exc

    return chunks


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (httpx2.ReadTimeout("stalled"), SGLangTimeout),
        (httpx2.RemoteProtocolError("incomplete chunked read"), SGLangProtocolError),
    ],
)
def test_a_body_that_breaks_off_is_mapped(
    call: Call, exc: Exception, error: type[SGLangError]
) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=call.stream(body_then(exc)))

    with pytest.raises(error):
        call(handler, "load_adapter", "sql", "/a/sql")


def test_an_endless_body_is_cut_off(call: Call) -> None:
    produced: list[int] = []

    def endless() -> Iterator[bytes]:
        while True:
            produced.append(1)
            yield b" " * 65536

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=call.stream(endless))

    with pytest.raises(SGLangProtocolError, match="larger than"):
        call(handler, "list_models")
    assert len(produced) * 65536 <= MAX_BODY_BYTES + 2 * 65536


def test_a_huge_single_chunk_is_rejected(call: Call) -> None:
    with pytest.raises(SGLangProtocolError, match="larger than"):
        call(answer(200, b"[" + b" " * (4 * MAX_BODY_BYTES) + b"]"), "list_models")


# --- secrets ------------------------------------------------------------------------------------


def full_text(error: BaseException) -> str:
    """Everything a log could show of ``error``: repr, str and the formatted chain."""
    return repr(error) + str(error) + "".join(traceback.format_exception(error))


@pytest.mark.parametrize(
    "handler",
    [
        answer(401, {"error": "Unauthorized"}),
        answer(500, f"echo Authorization: Bearer {KEY}".encode()),
        answer(400, lora(False, f"bad path; you sent {KEY}")),
        raising(httpx2.ReadTimeout("timed out")),
        raising(httpx2.ConnectError("refused")),
    ],
    ids=["401", "echoing-500", "echoing-400", "timeout", "refused"],
)
def test_api_key_never_in_errors(call: Call, handler: Handler) -> None:
    with pytest.raises(SGLangError) as caught:
        call(handler, "load_adapter", "sql", "/a/sql", api_key=KEY)
    assert KEY not in full_text(caught.value)


def test_own_message_cuts_secrets_even_from_httpx_text(call: Call) -> None:
    """The chained exception is httpx2's own (it never quotes headers); ours is cut anyway."""
    with pytest.raises(SGLangTimeout) as caught:
        call(raising(httpx2.ReadTimeout(f"key {KEY}")), "health", api_key=KEY)
    assert KEY not in repr(caught.value) + str(caught.value)


def test_proxy_token_never_in_errors(call: Call) -> None:
    handler = answer(500, f"echo Bearer {TOKEN}".encode())
    with pytest.raises(SGLangError) as caught:
        call(handler, "health", extra_headers={"Authorization": f"Bearer {TOKEN}"})
    assert TOKEN not in full_text(caught.value)


def test_repr_hides_the_key() -> None:
    sync = SGLangClient(URL, api_key=KEY, label="llama-0")
    async_ = AsyncSGLangClient(URL, api_key=KEY)
    assert repr(sync) == "SGLangClient('http://10.0.0.5:30000', label='llama-0', api_key=***)"
    assert KEY not in repr(async_)
    assert KEY not in repr(vars(sync)) + repr(vars(async_))
    assert "api_key=None" in repr(SGLangClient(URL))
    sync.close()
    asyncio.run(async_.aclose())


# --- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "10.0.0.5:30000",
        "ftp://host",
        "http://",
        "http://user:pw@host",
        "http://h/?q=1",
        "http://h/#f",
        "http://h:notaport",
    ],
)
def test_bad_base_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        SGLangClient(url)
    with pytest.raises(ConfigurationError):
        AsyncSGLangClient(url)


@pytest.mark.parametrize(
    "timeouts",
    [
        ClientTimeouts(connect=0),
        ClientTimeouts(read=-1),
        ClientTimeouts(load=float("inf")),
        ClientTimeouts(unload=float("nan")),
        ClientTimeouts(connect="3"),  # type: ignore[arg-type]
    ],
)
def test_bad_timeouts_are_configuration_errors(timeouts: ClientTimeouts) -> None:
    with pytest.raises(ConfigurationError):
        SGLangClient(URL, timeouts=timeouts)


def test_api_key_and_proxy_authorization_clash() -> None:
    with pytest.raises(ConfigurationError, match="apiserver"):
        SGLangClient(URL, api_key=KEY, extra_headers={"authorization": "Bearer x"})


def test_context_managers_close() -> None:
    with SGLangClient(URL) as sync:
        pass
    assert sync._http.is_closed

    async def run() -> AsyncSGLangClient:
        async with AsyncSGLangClient(URL) as client:
            return client

    assert asyncio.run(run())._http.is_closed


def test_default_timeouts() -> None:
    assert ClientTimeouts() == ClientTimeouts(connect=3, read=10, load=300, unload=120)


def test_every_timeout_field_is_documented() -> None:
    """A docstring under every field, as the settings convention says."""
    tree = ast.parse(Path(_settings.__file__).read_text())
    (cls,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ClientTimeouts")
    documented = {
        node.target.id
        for node, after in zip(cls.body, cls.body[1:], strict=False)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and "seconds" in str(after.value.value).lower()
    }
    assert documented == {field.name for field in fields(ClientTimeouts)}
