"""One ``send`` per request for blocking HTTP clients built on httpcore2 (ours and lightkube's).

`HeldWritesStream` holds a request's writes until its first read and sends them as one. The
async client has its own backend (``_sglang._aio``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

__all__ = [
    "RECENT",
    "WRITE_BUFFER",
    "HeldWritesBackend",
    "HeldWritesStream",
    "WrappingBackend",
    "hold_writes",
]

WRITE_BUFFER = 64 * 1024
"""Bytes of a request held back before they are sent without waiting for its first read."""

RECENT = 1.0
"""Seconds after its last read during which a connection counts as open without polling its
socket: no server's keep-alive timeout is that short (uvicorn's is 5 s, the apiserver's 90 s),
and a server that closes a connection for another reason races any check anyway."""


class BlockingStream(Protocol):
    """httpcore2's blocking network stream."""

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes: ...
    def write(self, buffer: bytes, timeout: float | None = None) -> None: ...
    def close(self) -> None: ...
    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> Any: ...
    def get_extra_info(self, info: str) -> Any: ...


class HeldWritesStream:
    """A blocking stream whose writes wait for the request's first read (see the module)."""

    def __init__(self, inner: BlockingStream) -> None:
        self._inner = inner
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._last_read = time.monotonic()

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._send_held(timeout)
        data = self._inner.read(max_bytes, timeout)
        self._last_read = time.monotonic()
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        if self._held_bytes >= WRITE_BUFFER:
            self._send_held(timeout)

    def close(self) -> None:
        self._held.clear()
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> Any:
        self._send_held(timeout)
        return type(self)(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and time.monotonic() - self._last_read < RECENT:
            return False
        return self._inner.get_extra_info(info)

    def _send_held(self, timeout: float | None) -> None:
        if self._held:
            data = b"".join(self._held) if len(self._held) > 1 else self._held[0]
            self._held.clear()
            self._held_bytes = 0
            self._inner.write(data, timeout)


class WrappingBackend:
    """A blocking network backend that connects through ``inner`` and wraps each stream it
    hands out (`wrap`), after adjusting the connect timeout (`connect_timeout`)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def wrap(self, stream: Any) -> Any:
        """The stream handed to httpcore2 in place of ``stream``."""
        raise NotImplementedError

    def connect_timeout(self, timeout: float | None) -> float | None:
        """The timeout ``inner`` connects with (as given, unless a subclass bounds it)."""
        return timeout

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        timeout = self.connect_timeout(timeout)
        return self.wrap(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> Any:
        timeout = self.connect_timeout(timeout)
        return self.wrap(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class HeldWritesBackend(WrappingBackend):
    """A network backend handing out `HeldWritesStream`s over ``inner``'s streams."""

    def wrap(self, stream: Any) -> HeldWritesStream:
        return HeldWritesStream(stream)


def hold_writes(http_client: Any) -> None:
    """Put `HeldWritesBackend` under a blocking httpx2 client's connection pool.

    httpx2 builds its pool itself and offers no argument for its network backend; it is swapped
    in after, as ``_sglang.deadline_transport`` does. A client without the expected pool (a test
    transport) is left alone. ``tests/unit/test_wire.py`` checks the wiring against the
    installed httpx2 and lightkube.
    """
    pool = getattr(getattr(http_client, "_transport", None), "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None and not isinstance(backend, HeldWritesBackend):
        pool._network_backend = HeldWritesBackend(backend)  # type: ignore[union-attr]
