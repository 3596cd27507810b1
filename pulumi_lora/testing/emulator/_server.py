"""The HTTP server: ``http.server`` with HTTP/1.1 keep-alive, one thread per connection.

The socket layer does only what needs a socket: reading the request, writing the response in one
``send`` (with ``TCP_NODELAY``, so keep-alive requests do not wait on Nagle), and the faults that
act on the connection (drop, stall, drip). Nothing is logged per request.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import selectors
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from pulumi_lora.testing.emulator._admin import ADMIN_PREFIX, AdminApi
from pulumi_lora.testing.emulator._app import EmulatorApp, Readiness
from pulumi_lora.testing.emulator._config import EmulatorConfig
from pulumi_lora.testing.emulator._engine import build_engine
from pulumi_lora.testing.emulator._faults import Fault, FaultBook, fault_response
from pulumi_lora.testing.emulator._http import (
    INTERNAL_SERVER_ERROR,
    Request,
    Response,
    text_response,
)

__all__ = ["EmulatorServer"]

_log = logging.getLogger("pulumi_lora.testing.emulator")
_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_SEED_RANGE = 1 << 30  # SGLang draws its default --random-seed from [0, 2**30)


class _Handler(BaseHTTPRequestHandler):
    """One connection: requests are read and answered until either side closes."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HttpServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def do_OPTIONS(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """No per-request logging (it would dominate the cost of a keep-alive request)."""

    def _serve(self) -> None:
        request = self._read_request()
        if request is None:
            return
        server = self.server
        try:
            if server.admin is not None and request.path.startswith(ADMIN_PREFIX):
                self._send(server.admin.handle(request))
                return
            fault = server.faults.take(request.path)
            if fault is None:
                self._send(server.app.handle(request))
            else:
                self._apply(fault, request)
        except ConnectionError:
            self.close_connection = True
        except Exception:  # the server boundary: answer as Starlette does, and say why
            _log.exception("emulator: error while answering %s %s", request.method, request.path)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._send(INTERNAL_SERVER_ERROR)

    def _read_request(self) -> Request | None:
        """The request, body included; ``None`` after answering 400 to an unreadable body."""
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True
            self._send(text_response(400, "Invalid HTTP request body framing"))
            return None
        return Request(
            method=self.command,
            path=self.path.partition("?")[0],
            authorization=self.headers.get("Authorization"),
            body=body,
        )

    def _read_body(self) -> bytes:
        """The body framed by ``Content-Length`` or chunked; ``ValueError`` if malformed."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while size := int(self.rfile.readline().split(b";", 1)[0], 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # trailer fields
        return b"".join(chunks)

    def _apply(self, fault: Fault, request: Request) -> None:
        """Answer ``request`` as ``fault`` says."""
        app, sleep = self.server.app, self.server.sleep
        if fault.kind == "drip":
            self._drip(app.handle(request), fault)
            return
        if fault.kind == "stall":
            sleep(0.0 if fault.after else fault.seconds)
            response = app.handle(request)
            sleep(fault.seconds if fault.after else 0.0)
            self._send(response)
            return
        if fault.after:
            app.handle(request)
        if fault.kind == "drop":
            self._drop()
            if fault.land is not None and not sleep(fault.land):
                app.handle(request)
        else:
            self._send(fault_response(fault))

    def _send(self, response: Response) -> None:
        head, body = self._encode(response)
        self.wfile.write(head + body)

    def _drip(self, response: Response, fault: Fault) -> None:
        head, body = self._encode(response)
        if fault.head:
            head, body = b"", head + body
        self.wfile.write(head)
        for start in range(0, len(body), fault.chunk):
            if self.server.sleep(fault.seconds):
                self._drop()
                return
            self.wfile.write(body[start : start + fault.chunk])

    def _drop(self) -> None:
        """Close the connection without (the rest of) a response."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _encode(self, response: Response) -> tuple[bytes, bytes]:
        """The status line and headers, and the body (none for ``HEAD``)."""
        lines = [
            f"HTTP/1.1 {response.status} {_PHRASES.get(response.status, '')}",
            f"content-length: {len(response.body)}",
        ]
        if response.content_type is not None:
            lines.append(f"content-type: {response.content_type}")
        lines.extend(f"{name}: {value}" for name, value in response.headers)
        if self.close_connection:
            lines.append("connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head, b"" if self.command == "HEAD" else response.body


class _HttpServer(ThreadingHTTPServer):
    """The listening socket and its accept loop; tracks open connections to close them on stop."""

    daemon_threads = True
    request_queue_size = 128
    app: EmulatorApp
    """Set by ``EmulatorServer.start`` once the port is known, before serving starts."""

    def __init__(
        self,
        address: tuple[str, int],
        faults: FaultBook,
        admin: AdminApi | None,
        stopping: threading.Event,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.faults, self.admin = faults, admin
        self.sleep = stopping.wait
        self._stopping = stopping
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        # Before super().__init__: a failed bind calls server_close, which closes these.
        self._wake_reader, self._wake_writer = socket.socketpair()
        super().__init__(address, _Handler)

    def serve(self) -> None:
        """Accept connections until ``stop_serving``: no polling, a socket pair wakes the loop."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while not self._stopping.is_set():
                if any(key.fileobj is self.socket for key, _ in selector.select()):
                    self._accept()

    def stop_serving(self) -> None:
        """End ``serve`` now (and every wait on the stopping event)."""
        self._stopping.set()
        self._wake_writer.send(b"\0")

    def _accept(self) -> None:
        try:
            connection, address = self.get_request()
        except OSError:
            return
        try:
            self.process_request(connection, address)
        except Exception:
            self.handle_error(connection, address)
            self.shutdown_request(connection)

    def server_bind(self) -> None:
        """Bind without ``HTTPServer``'s reverse DNS lookup of the host (slow, and unused).

        ``SO_REUSEADDR`` as SGLang's uvicorn sets it: a restarted server must rebind its port
        while connections of its previous life sit in TIME_WAIT.
        """
        if self.allow_reuse_address:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        with self._connections_lock:
            self._connections.add(connection)
        return connection, address

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        """Close the listening socket, the wake-up pair and every open connection."""
        super().server_close()
        self._wake_reader.close()
        self._wake_writer.close()
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A vanished client is normal; anything else is a bug worth a traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            _log.exception("emulator: error while serving %s", client_address)


class EmulatorServer:
    """An emulated SGLang server in a background thread; a context manager.

    ``start`` loads the ``--lora-paths`` adapters (``EmulatorLaunchError`` if one fails), binds
    (port 0 picks a free port) and serves; ``stop`` closes every connection and forgets all state.
    """

    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self.config = config if config is not None else EmulatorConfig()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> EmulatorServer:
        """Launch: load startup adapters, bind and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            raise RuntimeError("the emulator is already running")
        config = self.config
        self._stopping = threading.Event()
        engine = build_engine(config, self._stopping.wait)
        faults = FaultBook(config.faults, config.latency)
        readiness = Readiness(config.startup_delay)
        seed = secrets.randbelow(_SEED_RANGE) if config.random_seed is None else config.random_seed
        admin = AdminApi(faults, engine, readiness) if config.admin else None
        httpd = _HttpServer((config.host, config.port), faults, admin, self._stopping)
        httpd.app = EmulatorApp(
            config,
            engine,
            faults,
            readiness,
            self._stopping.wait,
            port=httpd.server_port,
            random_seed=seed,
        )
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve, daemon=True, name=f"sglang-emulator:{httpd.server_port}"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end every connection and every wait; idempotent."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.stop_serving()
        thread.join()
        httpd.server_close()
        self._httpd = self._thread = None

    @property
    def port(self) -> int:
        """The bound port (the one picked, when configured as 0)."""
        return self._running().server_port

    @property
    def url(self) -> str:
        """``http://host:port``; a wildcard host is reached through loopback."""
        host = self.config.host
        if host in ("0.0.0.0", ""):  # noqa: S104 - comparing, not binding
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def inject(self, fault: Fault) -> None:
        """Arm ``fault`` (as ``POST /_emulator/faults`` does)."""
        self._running().faults.add(fault)

    def clear_faults(self) -> None:
        """Disarm every fault and drop every latency (as ``DELETE /_emulator/faults`` does)."""
        self._running().faults.clear()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _running(self) -> _HttpServer:
        if self._httpd is None:
            raise RuntimeError("the emulator is not running; call start() first")
        return self._httpd
