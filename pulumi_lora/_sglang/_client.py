"""The SGLang clients: `SGLangClient` (blocking, provider) and `AsyncSGLangClient` (asyncio, loop).

Thin: `_protocol` builds requests and `_answers` classifies answers. Each request has one deadline
over its whole answer, since httpx2's timeouts bound only single socket operations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Self

import httpcore2
import httpx2

from pulumi_lora._errors import (
    ConfigurationError,
    SGLangConnectionError,
    SGLangError,
    SGLangProtocolError,
    SGLangTimeout,
)
from pulumi_lora._http._send import HeldWritesBackend, HeldWritesStream, WrappingBackend
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import _answers as answers
from pulumi_lora._sglang import _protocol as protocol
from pulumi_lora._sglang._aio import asyncio_transport
from pulumi_lora._sglang._protocol import (
    MAX_BODY_BYTES,
    Health,
    LoadOutcome,
    ModelList,
    Peer,
    Request,
    ServerInfo,
    Smoked,
    UnloadOutcome,
)

__all__ = ["AsyncSGLangClient", "SGLangClient", "deadline_transport"]


class _ClientBase:
    """Everything but the sending: checked settings, headers, the error label, the repr."""

    base_url: httpx2.URL
    timeouts: ClientTimeouts
    _peer: Peer

    def _configure(
        self,
        base_url: str,
        api_key: str | None,
        extra_headers: Mapping[str, str] | None,
        timeouts: ClientTimeouts | None,
        label: str | None,
    ) -> dict[str, str]:
        """Check and keep the settings; return the headers for the httpx2 client (only it holds
        the key, so neither ``repr`` nor ``vars`` of this object shows it)."""
        self.base_url = _checked_base_url(base_url)
        self.timeouts = _checked_timeouts(timeouts or ClientTimeouts())
        headers = protocol.build_headers(api_key, extra_headers)
        self._peer = Peer(
            label=label or str(self.base_url).rstrip("/"),
            api_key_configured=api_key is not None,
            secrets=protocol.credential_values(api_key, extra_headers),
        )
        return headers

    def _timeout(self, request: Request) -> httpx2.Timeout:
        """Short connect (and pool) timeout; the route's read timeout; tiny bodies write fast."""
        connect = self.timeouts.connect
        return httpx2.Timeout(
            connect=connect, read=request.read_timeout, write=self.timeouts.read, pool=connect
        )

    @contextmanager
    def _translated_httpx_errors(self, request: Request) -> Iterator[None]:
        """Re-raise httpx2's exceptions as the project's transient errors, chained ``from`` them.

        The one place that knows httpx2's tree. Timeouts (including a body that stalls or drips
        past the deadline) are `SGLangTimeout`; no connection is `SGLangConnectionError`;
        everything else httpx2 can raise (broken framing, a truncated body, a bad encoding, a
        misused stream) is `SGLangProtocolError`.
        Every error after the connection was made is ``maybe_applied``: the request may have
        reached the server, which then acts on it whether or not its answer arrives.
        """
        try:
            yield
        except (httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            what = f"timed out: no connection within {self.timeouts.connect:g} s"
            raise self._error(SGLangTimeout, what, exc, request, sent=False) from exc
        except httpx2.TimeoutException as exc:
            what = f"timed out: no complete answer within {request.read_timeout:g} s"
            raise self._error(SGLangTimeout, what, exc, request) from exc
        except (httpx2.ConnectError, httpx2.ProxyError, httpx2.UnsupportedProtocol) as exc:
            what = "connection failed"
            raise self._error(SGLangConnectionError, what, exc, request, sent=False) from exc
        except httpx2.NetworkError as exc:
            raise self._error(SGLangConnectionError, "connection failed", exc, request) from exc
        except (
            httpx2.HTTPError,
            httpx2.InvalidURL,
            httpx2.StreamError,
            httpx2.CookieConflict,
        ) as exc:
            what = "the HTTP exchange broke"
            raise self._error(SGLangProtocolError, what, exc, request) from exc

    def _error(
        self,
        cls: type[SGLangError],
        what: str,
        exc: Exception,
        request: Request,
        *,
        sent: bool = True,
    ) -> SGLangError:
        """An error of ``cls`` saying ``what`` happened, in httpx2's words too (secrets cut out:
        httpx2 doesn't quote headers, but a proxy's message might)."""
        detail = protocol.redact(str(exc), self._peer) or "no detail"
        return cls(
            f"{what} ({type(exc).__name__}: {detail})",
            target=self._peer.label,
            route=request.path,
            maybe_applied=sent,
        )

    def _deadline(self, request: Request) -> float:
        """When the whole answer must be in (monotonic clock): the route's timeout from now.

        httpx2's read timeout bounds each wait for a chunk, not the answer: a server that drips
        one byte a second never trips it. `deadline_transport` bounds every socket operation by
        what is left of it (headers included); with another transport it is also checked as
        every body chunk arrives.
        """
        return time.monotonic() + request.read_timeout

    def __repr__(self) -> str:
        key = "***" if self._peer.api_key_configured else None
        return (
            f"{type(self).__name__}({str(self.base_url)!r}, label={self._peer.label!r}, "
            f"api_key={key})"
        )


class SGLangClient(_ClientBase):
    """Blocking client of one SGLang server. Close it, or use it as a context manager.

    ``base_url`` is the server (``http://10.0.0.5:30000``) or a proxy prefix before its routes;
    ``api_key`` is sent as ``Authorization: Bearer``; ``extra_headers`` go on every request;
    ``label`` (default: the URL) names the server in errors; ``transport`` replaces httpx2's
    network transport (tests); ``auth`` authenticates each request to a proxy in front of the
    server (the apiserver's, with a kubeconfig's credential plugin). Every method raises only
    `SGLangError` subclasses.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        timeouts: ClientTimeouts | None = None,
        label: str | None = None,
        transport: httpx2.BaseTransport | None = None,
        auth: httpx2.Auth | None = None,
    ) -> None:
        headers = self._configure(base_url, api_key, extra_headers, timeouts, label)
        if transport is None:
            transport = deadline_transport()
        self._http = httpx2.Client(
            base_url=self.base_url, headers=headers, transport=transport, auth=auth
        )

    def load_adapter(self, name: str, path: str, *, pinned: bool = False) -> LoadOutcome:
        """Load adapter ``name`` from ``path``: `Loaded`, or `AlreadyLoaded` (compare its path)."""
        request = protocol.load_request(name, path, pinned=pinned, timeouts=self.timeouts)
        status, body = self._send(request)
        return answers.classify_load(status, body, name=name, path=path, peer=self._peer)

    def unload_adapter(self, name: str) -> UnloadOutcome:
        """Unload adapter ``name``: `Unloaded`, or `NotLoaded` if the server doesn't have it."""
        status, body = self._send(protocol.unload_request(name, timeouts=self.timeouts))
        return answers.classify_unload(status, body, name=name, peer=self._peer)

    def smoke(self, name: str) -> Smoked:
        """One greedy token through adapter ``name``: `Smoked` with its finite logprob, or
        `SmokeFailed` in SGLang's words (see `_answers.classify_smoke`)."""
        status, body = self._send(protocol.smoke_request(name, timeouts=self.timeouts))
        return answers.classify_smoke(status, body, name=name, peer=self._peer)

    def list_models(self) -> ModelList:
        """The base model and the loaded adapters (name → path) from ``/v1/models``."""
        status, body = self._send(protocol.models_request(timeouts=self.timeouts))
        return answers.classify_models(status, body, peer=self._peer)

    def health(self) -> Health:
        """Whether ``/health`` says ready (a 503 is ``ready=False``, not an error)."""
        status, body = self._send(protocol.health_request(timeouts=self.timeouts))
        return answers.classify_health(status, body, peer=self._peer)

    def server_info(self) -> ServerInfo:
        """``version`` and ``enable_lora`` from ``/server_info`` (``/get_server_info`` before
        0.5.6), or why they could not be read: never raises, and keeps nothing else of the body
        (it echoes the server's API keys)."""
        try:
            status, body = self._send(protocol.server_info_request(timeouts=self.timeouts))
            if status == 404:
                legacy = protocol.server_info_request(legacy=True, timeouts=self.timeouts)
                status, body = self._send(legacy)
        except SGLangError as exc:
            return answers.server_info_unread(exc)
        return answers.classify_server_info(status, body)

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, request: Request) -> tuple[int, bytes]:
        """Send ``request``; return the status and at most just over `MAX_BODY_BYTES` of body."""
        deadline = self._deadline(request)
        token = _DEADLINE.set(deadline)
        try:
            with (
                self._translated_httpx_errors(request),
                self._http.stream(
                    request.method, request.path, json=request.json, timeout=self._timeout(request)
                ) as response,
            ):
                return response.status_code, _read_capped(response.iter_bytes(), deadline)
        finally:
            _DEADLINE.reset(token)


class AsyncSGLangClient(_ClientBase):
    """The asyncio twin of `SGLangClient`: same arguments and methods, awaited.

    ``transport`` is an ``httpx2.AsyncBaseTransport``; by default `asyncio_transport` (httpx2 on
    plain asyncio sockets, see ``_aio``). Close it with `aclose`, or use it as an async context
    manager.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        timeouts: ClientTimeouts | None = None,
        label: str | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        headers = self._configure(base_url, api_key, extra_headers, timeouts, label)
        self._http = httpx2.AsyncClient(
            base_url=self.base_url, headers=headers, transport=transport or asyncio_transport()
        )

    async def load_adapter(self, name: str, path: str, *, pinned: bool = False) -> LoadOutcome:
        """Load adapter ``name`` from ``path``: `Loaded`, or `AlreadyLoaded` (compare its path)."""
        request = protocol.load_request(name, path, pinned=pinned, timeouts=self.timeouts)
        status, body = await self._send(request)
        return answers.classify_load(status, body, name=name, path=path, peer=self._peer)

    async def unload_adapter(self, name: str) -> UnloadOutcome:
        """Unload adapter ``name``: `Unloaded`, or `NotLoaded` if the server doesn't have it."""
        status, body = await self._send(protocol.unload_request(name, timeouts=self.timeouts))
        return answers.classify_unload(status, body, name=name, peer=self._peer)

    async def smoke(self, name: str) -> Smoked:
        """One greedy token through adapter ``name``, as `SGLangClient.smoke`."""
        status, body = await self._send(protocol.smoke_request(name, timeouts=self.timeouts))
        return answers.classify_smoke(status, body, name=name, peer=self._peer)

    async def list_models(self) -> ModelList:
        """The base model and the loaded adapters (name → path) from ``/v1/models``."""
        status, body = await self._send(protocol.models_request(timeouts=self.timeouts))
        return answers.classify_models(status, body, peer=self._peer)

    async def health(self) -> Health:
        """Whether ``/health`` says ready (a 503 is ``ready=False``, not an error)."""
        status, body = await self._send(protocol.health_request(timeouts=self.timeouts))
        return answers.classify_health(status, body, peer=self._peer)

    async def server_info(self) -> ServerInfo:
        """``version`` and ``enable_lora`` from ``/server_info``, as `SGLangClient.server_info`."""
        try:
            status, body = await self._send(protocol.server_info_request(timeouts=self.timeouts))
            if status == 404:
                legacy = protocol.server_info_request(legacy=True, timeouts=self.timeouts)
                status, body = await self._send(legacy)
        except SGLangError as exc:
            return answers.server_info_unread(exc)
        return answers.classify_server_info(status, body)

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, request: Request) -> tuple[int, bytes]:
        """Send ``request``; return the status and at most just over `MAX_BODY_BYTES` of body."""
        deadline = self._deadline(request)
        with self._translated_httpx_errors(request):
            try:
                async with (
                    asyncio.timeout(request.read_timeout),
                    self._http.stream(
                        request.method,
                        request.path,
                        json=request.json,
                        timeout=self._timeout(request),
                    ) as response,
                ):
                    body = await _aread_capped(response.aiter_bytes(), deadline)
                    return response.status_code, body
            except TimeoutError as exc:  # the whole request's deadline (headers included)
                raise httpx2.ReadTimeout("no complete answer by the deadline") from exc


def _read_capped(chunks: Iterator[bytes], deadline: float) -> bytes:
    """Read a body, stopping just past `MAX_BODY_BYTES` (the protocol then rejects it as too big)
    so that a huge or endless body never sits in memory, and failing with a read timeout once
    ``deadline`` (monotonic) has passed, so that a dripping body never holds the caller."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            break
        _check_deadline(deadline)
    return bytes(body[: MAX_BODY_BYTES + 1])


async def _aread_capped(chunks: AsyncIterator[bytes], deadline: float) -> bytes:
    """The asyncio twin of `_read_capped`."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            break
        _check_deadline(deadline)
    return bytes(body[: MAX_BODY_BYTES + 1])


#: The deadline (monotonic) of the blocking request this thread is sending, for `_DeadlineStream`.
_DEADLINE: ContextVar[float | None] = ContextVar("pulumi_lora_sglang_deadline", default=None)


def deadline_transport(*, verify: ssl.SSLContext | bool = True) -> httpx2.HTTPTransport:
    """httpx2's blocking transport, whose every socket read and write (connect and TLS set-up
    included) waits at most what is left of the request's deadline, so a server dripping its
    status line, headers or body fails at the deadline, not one per-read timeout after it.

    Under the deadlines, a request's headers and body leave in one write
    (`pulumi_lora._http._send`).
    httpx2 builds its connection pool itself; the network backend is swapped in after (httpcore2's
    ``ConnectionPool`` takes one, httpx2 offers no argument for it).
    ``tests/unit/test_sglang_client.py`` checks the wiring against the installed httpx2.
    """
    transport = httpx2.HTTPTransport(verify=verify)
    pool: Any = transport._pool
    pool._network_backend = _DeadlineBackend(HeldWritesBackend(pool._network_backend))
    return transport


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of this thread's request deadline; ``error`` once past."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the answer was still arriving at the deadline")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    """A network stream whose waits end at the request's deadline (see `deadline_transport`)."""

    def __init__(self, inner: httpcore2.NetworkStream | HeldWritesStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        timeout = _left(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(WrappingBackend):
    """httpcore2's network backend, handing out `_DeadlineStream`s; connecting, too, waits at most
    what is left of the deadline."""

    def wrap(self, stream: Any) -> _DeadlineStream:
        return _DeadlineStream(stream)

    def connect_timeout(self, timeout: float | None) -> float | None:
        return _left(timeout, httpcore2.ConnectTimeout)


def _check_deadline(deadline: float) -> None:
    """``httpx2.ReadTimeout`` once ``deadline`` has passed (translated like any read timeout)."""
    if time.monotonic() > deadline:
        raise httpx2.ReadTimeout("the answer was still arriving at the deadline")


def _checked_base_url(base_url: str) -> httpx2.URL:
    """``base_url`` parsed, or a `ConfigurationError`: http(s), a host, no credentials, no query.

    Credentials in the URL would bypass the header checks and end up in labels and messages.
    """
    try:
        url = httpx2.URL(base_url)
    except (httpx2.InvalidURL, TypeError) as exc:
        raise ConfigurationError(f"the SGLang base URL is invalid: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError("the SGLang base URL must be http(s)://host[:port][/prefix]")
    if url.userinfo:
        raise ConfigurationError(
            "the SGLang base URL must not carry credentials: pass api_key (SGLang's key) or "
            "extra_headers (e.g. the apiserver's bearer token)"
        )
    if url.query or url.fragment:
        raise ConfigurationError("the SGLang base URL must not have a query or a fragment")
    return url


def _checked_timeouts(timeouts: ClientTimeouts) -> ClientTimeouts:
    """``timeouts`` if every field is a positive, finite number of seconds, else an error."""
    for item in dataclasses.fields(timeouts):
        value = getattr(timeouts, item.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigurationError(f"ClientTimeouts.{item.name} must be a number of seconds")
        if not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"ClientTimeouts.{item.name} must be positive and finite")
    return timeouts
