"""The async client's network backend (``_sglang._aio``) on real sockets: one ``send`` per
request, TLS, a server closing an idle connection, bodies larger than its read buffer, and the
errors httpcore2 expects."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpcore2
import pytest

from pulumi_lora._errors import SGLangConnectionError, SGLangProtocolError
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import AsyncSGLangClient, asyncio_transport
from pulumi_lora._sglang._aio import READ_BUFFER, AsyncioBackend, AsyncioStream
from pulumi_lora.testing.emulator import Fault
from pulumi_lora.testing.fixtures import run_async
from pulumi_lora.testing.testbed._certs import generate_key_material
from tests.contract._emulators import AdapterFactory, Emulator

TIMEOUTS = ClientTimeouts(connect=1.0, load=2.0, read=2.0)


def test_the_async_client_runs_on_the_asyncio_backend() -> None:
    """The wiring `asyncio_transport` relies on (httpx2's private pool) holds in this httpx2."""
    client = AsyncSGLangClient("http://127.0.0.1:1")
    pool: Any = client._http._transport._pool  # type: ignore[attr-defined]
    assert isinstance(pool._network_backend, AsyncioBackend)
    assert isinstance(asyncio_transport()._pool._network_backend, AsyncioBackend)  # type: ignore[attr-defined]
    run_async(client.aclose())


class _Recorder:
    """A transport stand-in that records writes and delegates everything else."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_headers_and_body_leave_in_one_send(lora: Emulator, make_adapter: AdapterFactory) -> None:
    """httpcore2 writes a request's headers and body separately; they reach the socket as one
    write, at the request's first read."""
    path = make_adapter("sql")
    recorders: list[_Recorder] = []

    class Recording(AsyncioBackend):
        async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
            stream: Any = await super().connect_tcp(*args, **kwargs)
            recorder = _Recorder(stream._transport)
            recorders.append(recorder)
            return AsyncioStream(recorder, stream._connection)  # type: ignore[arg-type]

    async def go() -> None:
        transport = asyncio_transport()
        transport._pool._network_backend = Recording()  # type: ignore[attr-defined]
        async with AsyncSGLangClient(
            lora.server.url, timeouts=TIMEOUTS, transport=transport
        ) as client:
            await client.load_adapter("sql", path)
            await client.list_models()

    run_async(go())
    (recorder,) = recorders  # one kept-alive connection for both requests
    assert len(recorder.writes) == 2, recorder.writes
    load, models = recorder.writes
    assert load.startswith(b"POST /load_lora_adapter ") and load.endswith(b"}")
    assert b'"lora_name":"sql"' in load.replace(b" ", b"")
    assert models.startswith(b"GET /v1/models ")
    assert lora.models() == {"sql": path}


@contextlib.asynccontextmanager
async def proxy(
    target_port: int, certs: Path | None = None, *, close_after_answer: bool = False
) -> AsyncIterator[tuple[int, list[int]]]:
    """An endpoint on loopback forwarding to ``target_port`` (TLS with the testbed's serving
    certificate when ``certs`` is given); yields its port and the list of accepted connections.
    ``close_after_answer`` closes each client connection 50 ms after its first answer, as a
    server whose keep-alive timeout ran out."""
    context = None
    if certs is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certs / "apiserver.crt", certs / "apiserver.key")
    accepted: list[int] = []

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: bool
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                if answers and close_after_answer:
                    await asyncio.sleep(0.05)
                    break
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(
            pipe(reader, upstream_writer, False), pipe(upstream_reader, writer, True)
        )
        upstream_writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], accepted
    finally:
        server.close()


def test_https_through_start_tls(
    lora: Emulator, make_adapter: AdapterFactory, tmp_path: Path
) -> None:
    """An https base URL: the TLS handshake runs on the backend's connection (``start_tls``),
    the certificate is checked against the CA given, and requests flow both ways."""
    material = generate_key_material(tmp_path)
    path = make_adapter("sql")
    trust = ssl.create_default_context(cafile=str(material.ca_cert))

    async def go() -> dict[str, str]:
        async with proxy(lora.server.port, material.cert_dir) as (port, accepted):
            url = f"https://127.0.0.1:{port}"
            async with AsyncSGLangClient(
                url, timeouts=TIMEOUTS, transport=asyncio_transport(verify=trust)
            ) as client:
                await client.load_adapter("sql", path)
                listed = await client.list_models()
            assert len(accepted) == 1
            untrusted = AsyncSGLangClient(url, timeouts=TIMEOUTS)  # the system's CAs only
            with pytest.raises(SGLangConnectionError):
                await untrusted.list_models()
            await untrusted.aclose()
            return listed.adapters

    assert run_async(go()) == {"sql": path}


def test_an_idle_connection_the_server_closed_is_not_reused(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    """The server closes the kept-alive connection after an answer (its keep-alive timeout ran
    out); the next request goes out on a new connection instead of failing on the old one."""
    path = make_adapter("sql")

    async def go() -> tuple[dict[str, str], int]:
        async with proxy(lora.server.port, close_after_answer=True) as (port, accepted):
            url = f"http://127.0.0.1:{port}"
            async with AsyncSGLangClient(url, timeouts=TIMEOUTS) as client:
                await client.load_adapter("sql", path)
                await asyncio.sleep(0.3)
                listed = await client.list_models()
            return listed.adapters, len(accepted)

    assert run_async(go()) == ({"sql": path}, 2)


def test_a_body_larger_than_the_read_buffer(lora: Emulator) -> None:
    """Bodies of several read buffers stream through (reading pauses and resumes): one under
    the client's cap arrives whole (a JSON string: not the object ``/v1/models`` promises), one
    over it is cut off and rejected as too large."""

    async def list_models() -> None:
        async with AsyncSGLangClient(lora.server.url, timeouts=TIMEOUTS) as client:
            await client.list_models()

    lora.server.inject(Fault.parse(f"/v1/models:huge={3 * READ_BUFFER}"))
    with pytest.raises(SGLangProtocolError, match="not a JSON object"):
        run_async(list_models())
    lora.server.inject(Fault.parse(f"/v1/models:huge={6 * READ_BUFFER}"))
    with pytest.raises(SGLangProtocolError, match="larger than"):
        run_async(list_models())


def test_connect_errors_map_to_httpcore() -> None:
    """A refused connection is httpcore2's ``ConnectError`` (the client reports it as such)."""

    async def go() -> None:
        await AsyncioBackend().connect_tcp("127.0.0.1", 1, timeout=1.0)

    with pytest.raises(httpcore2.ConnectError):
        run_async(go())
