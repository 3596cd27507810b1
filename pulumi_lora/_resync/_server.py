"""``/healthz``, ``/readyz`` and ``/metrics`` on one small asyncio HTTP/1.1 server.

It runs on the loop's own event loop, so ``/healthz`` answering proves that loop is not stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST

from pulumi_lora._resync._metrics import Metrics

#: Seconds a client gets to send its request line and headers.
_READ_TIMEOUT = 5.0

Probe = Callable[[], tuple[bool, str]]


class HealthServer:
    """Serves the probes and the metrics; ``alive`` and ``ready`` say ``(ok, text)``."""

    def __init__(self, metrics: Metrics, alive: Probe, ready: Probe) -> None:
        self._metrics = metrics
        self._alive = alive
        self._ready = ready
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen; return the bound port (``port`` 0 picks one)."""
        self._server = await asyncio.start_server(self._handle, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT):
                request = await reader.readline()
                while (await reader.readline()).strip():
                    pass  # headers: nothing here needs them
            parts = request.decode("latin-1").split()
            method, path = (parts[0], parts[1].split("?", 1)[0]) if len(parts) >= 2 else ("", "")
            status, content_type, body = self._answer(method, path)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _answer(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"method not allowed\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, self._metrics.render()
        probe = {"/healthz": self._alive, "/readyz": self._ready}.get(path)
        if probe is None:
            return "404 Not Found", "text/plain", b"not found\n"
        ok, text = probe()
        status = "200 OK" if ok else "503 Service Unavailable"
        return status, "text/plain; charset=utf-8", f"{text}\n".encode()
