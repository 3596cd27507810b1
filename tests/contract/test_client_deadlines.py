"""The project's SGLang clients against the emulator over real sockets: every request's deadline
bounds the whole answer, status line and headers included, and a connection dropped after the
request was sent says the load may still land."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pulumi_lora._errors import SGLangError, SGLangTimeout
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import AsyncSGLangClient, SGLangClient, deadline_transport
from pulumi_lora._sglang._client import _DeadlineBackend
from pulumi_lora.testing.emulator import Fault
from pulumi_lora.testing.fixtures import run_async
from tests.contract._emulators import AdapterFactory, Emulator

TIMEOUTS = ClientTimeouts(connect=1.0, load=0.3, read=0.3)


def run(kind: str, url: str, method: str, *args: Any) -> Any:
    """``method(*args)`` of a fresh sync or async client of ``url``."""
    if kind == "sync":
        with SGLangClient(url, timeouts=TIMEOUTS) as client:
            return getattr(client, method)(*args)

    async def go() -> Any:
        async with AsyncSGLangClient(url, timeouts=TIMEOUTS) as client:
            return await getattr(client, method)(*args)

    return run_async(go())


def test_the_blocking_transport_carries_the_deadline_backend() -> None:
    """The wiring `deadline_transport` relies on (httpx2's private pool) holds in this httpx2."""
    pool: Any = deadline_transport()._pool
    assert isinstance(pool._network_backend, _DeadlineBackend)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("route", ["/v1/models", "/load_lora_adapter"])
def test_dripped_headers_time_out_at_the_deadline(
    lora: Emulator, make_adapter: AdapterFactory, kind: str, route: str
) -> None:
    """A byte every 30 ms never trips a 0.3 s per-read timeout; the 0.3 s deadline ends it, long
    before the ~70 bytes of status line and headers (2 s) are in."""
    path = make_adapter("sql")
    lora.server.inject(Fault.parse(f"{route}:drip=0.03,chunk=1,head"))
    method, args = ("list_models", ()) if route == "/v1/models" else ("load_adapter", ("sql", path))
    started = time.monotonic()
    with pytest.raises(SGLangTimeout, match=r"no complete answer within 0\.3 s") as caught:
        run(kind, lora.server.url, method, *args)
    took = time.monotonic() - started
    assert 0.28 <= took < 1.5, took  # generous: a loaded machine; the headers alone take 2 s
    assert caught.value.maybe_applied


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_dropped_load_may_still_land(
    lora: Emulator, make_adapter: AdapterFactory, kind: str
) -> None:
    """The connection closes before any answer; the server loads 0.3 s later."""
    path = make_adapter("sql")
    lora.server.inject(Fault.parse("/load_lora_adapter:drop,land=0.3"))
    with pytest.raises(SGLangError) as caught:
        run(kind, lora.server.url, "load_adapter", "sql", path)
    assert caught.value.maybe_applied
    assert caught.value.reason != "Timeout"  # a dropped connection, not a timeout
    deadline = time.monotonic() + 5
    while lora.models() == {} and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lora.models() == {"sql": path}
