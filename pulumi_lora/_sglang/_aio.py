"""An httpcore2 network backend on plain asyncio, for the async SGLang client.

Cheaper per request than anyio's. Timeouts and errors map to httpcore2's exceptions exactly as
its anyio backend maps them, so httpx2 sees no difference.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from pulumi_lora._http._send import RECENT, WRITE_BUFFER

__all__ = ["AsyncioBackend", "asyncio_transport"]

READ_BUFFER = 256 * 1024
"""Bytes a connection buffers before it stops reading from the socket (until they are read)."""


def asyncio_transport(*, verify: ssl.SSLContext | bool = True) -> httpx2.AsyncHTTPTransport:
    """httpx2's async transport with `AsyncioBackend` as its network backend.

    httpx2 builds its connection pool itself; the backend is swapped in after (httpcore2's
    ``AsyncConnectionPool`` takes one, httpx2 offers no argument for it), as `deadline_transport`
    does for the blocking client. ``tests/contract/test_client_deadlines.py`` checks the wiring.
    """
    transport = httpx2.AsyncHTTPTransport(verify=verify)
    pool: Any = transport._pool
    pool._network_backend = AsyncioBackend()
    return transport


class _Connection(asyncio.Protocol):
    """What arrived on one connection, and the one waiter for a change (HTTP/1.1 never reads
    and writes one connection at once: a waiter is either a read or a drain)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.received = bytearray()
        self.eof = False
        self.error: Exception | None = None
        self.reading_paused = False
        self.writing_paused = False
        self.last_data = time.monotonic()
        self._changed: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += data
        self.last_data = time.monotonic()
        if len(self.received) >= READ_BUFFER and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport: HTTP/1.1 never writes after the peer's EOF

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self.writing_paused = False
        self._wake()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake()

    async def changed(self) -> None:
        """Until data, EOF, an error or room to write arrives."""
        self._changed = asyncio.get_running_loop().create_future()
        try:
            await self._changed
        finally:
            self._changed = None

    def _wake(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)


class AsyncioStream(httpcore2.AsyncNetworkStream):
    """One connection as httpcore2 sees it: reads, (held back) writes, TLS, the idle check."""

    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport = transport
        self._connection = connection
        connection.transport = transport  # after TLS, pausing and resuming go through TLS
        self._held: list[bytes] = []
        self._held_bytes = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._send_held()
        connection = self._connection
        if not connection.received and not connection.eof:
            try:
                async with asyncio.timeout(timeout):
                    while not connection.received and not connection.eof:
                        await connection.changed()
            except TimeoutError as exc:
                raise httpcore2.ReadTimeout("no data within the read timeout") from exc
        if connection.received:
            data = bytes(connection.received[:max_bytes])
            del connection.received[:max_bytes]
            if connection.reading_paused and len(connection.received) < READ_BUFFER // 2:
                connection.reading_paused = False
                self._transport.resume_reading()
            return data
        if connection.error is not None:
            raise httpcore2.ReadError(str(connection.error) or type(connection.error).__name__)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._check_open(httpcore2.WriteError)
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        if self._held_bytes >= WRITE_BUFFER:
            self._send_held()
            await self._drain(timeout)

    async def aclose(self) -> None:
        self._held.clear()
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        self._send_held()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport, self._connection, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            await self.aclose()
            raise httpcore2.ConnectTimeout("no TLS handshake within the connect timeout") from exc
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            await self.aclose()
            raise httpcore2.ConnectError(str(exc)) from exc
        if transport is None:  # the connection closed during the handshake
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        return AsyncioStream(transport, self._connection)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return self._is_readable()
        key = {"client_addr": "sockname", "server_addr": "peername"}.get(info, info)
        if key in ("ssl_object", "sockname", "peername", "socket"):
            return self._transport.get_extra_info(key)
        return None

    def _is_readable(self) -> bool:
        """Whether the idle connection has something to read: the server closed it (or sent
        what nobody asked for). What the event loop already delivered answers without a system
        call, and so does a connection that had data within `RECENT` seconds (as in `_http._send`);
        otherwise the socket is polled, as httpcore2's own backends do."""
        connection = self._connection
        if connection.received or connection.eof or self._transport.is_closing():
            return True
        if time.monotonic() - connection.last_data < RECENT:
            return False
        sock = self._transport.get_extra_info("socket")
        if sock is None:
            return True
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    def _send_held(self) -> None:
        if self._held:
            data = b"".join(self._held) if len(self._held) > 1 else self._held[0]
            self._held.clear()
            self._held_bytes = 0
            if not self._transport.is_closing():
                self._transport.write(data)

    async def _drain(self, timeout: float | None) -> None:
        connection = self._connection
        if connection.writing_paused:
            try:
                async with asyncio.timeout(timeout):
                    while connection.writing_paused:
                        await connection.changed()
            except TimeoutError as exc:
                raise httpcore2.WriteTimeout("no room to write within the write timeout") from exc
        self._check_open(httpcore2.WriteError)

    def _check_open(self, error: type[Exception]) -> None:
        connection = self._connection
        if connection.error is not None or self._transport.is_closing():
            raise error(str(connection.error or "the connection is closed"))


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    """Connects with ``loop.create_connection`` (TCP_NODELAY is asyncio's default)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = None if local_address is None else (local_address, 0)

        async def connect() -> tuple[asyncio.BaseTransport, _Connection]:
            return await loop.create_connection(_Connection, host, port, local_addr=local)

        return await self._connected(connect, timeout, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()

        async def connect() -> tuple[asyncio.BaseTransport, _Connection]:
            return await loop.create_unix_connection(_Connection, path)

        return await self._connected(connect, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    @staticmethod
    async def _connected(
        connect: Any, timeout: float | None, socket_options: Iterable[Any] | None
    ) -> AsyncioStream:
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await connect()
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout("no connection within the connect timeout") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        assert isinstance(transport, asyncio.Transport)
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return AsyncioStream(transport, connection)
