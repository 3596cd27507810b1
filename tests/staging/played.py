"""A hostile HTTP(S) server on loopback for the stager's limits: answers written byte by byte as
told (dripped, endless, redirected), and a count of what it managed to send.

It speaks just enough HTTP/1.1 for httpx2 and urllib3 (boto3): one request per connection,
``Connection: close``, a body with ``Content-Length`` or delimited by the close. It records
each request's ``Authorization`` header.
"""

from __future__ import annotations

import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

Body = bytes | Callable[[], Iterator[bytes]]


@dataclass(frozen=True)
class Reply:
    """One route's answer."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Body = b""
    """Bytes, or chunks from a generator (sent without ``Content-Length``, ended by the close)."""
    drip: float = 0.0
    """Seconds between single bytes of the body (0: all at once)."""
    drip_head: bool = False
    """Drip the status line and headers too."""


@dataclass
class Sent:
    """What one route's answers got out, and how many times it was asked."""

    requests: int = 0
    authorizations: list[str | None] = field(default_factory=list)
    """Each request's ``Authorization`` header (``None``: it had none), in order."""
    head: int = 0
    """Bytes of status line and headers sent."""
    body: int = 0
    """Bytes of body sent."""


def endless(chunk: int = 64 << 10, safety: int = 64 << 20) -> Callable[[], Iterator[bytes]]:
    """A body that does not end (for the test's purposes: ``safety`` bytes, then it stops)."""

    def chunks() -> Iterator[bytes]:
        for _ in range(safety // chunk):
            yield b"\0" * chunk

    return chunks


class PlayedHttp:
    """``routes`` maps ``METHOD /path`` to a `Reply`; anything else is a 404. ``queued`` holds
    replies given once each, in order, before the route's own."""

    def __init__(self, *, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, Reply] = {}
        self.queued: dict[str, list[Reply]] = {}
        self.sent: dict[str, Sent] = {}
        self._lock = threading.Lock()
        played = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                played._handle(self)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            block_on_close = False
            allow_reuse_address = True

            def get_request(self) -> tuple[object, object]:
                connection, address = self.socket.accept()
                if tls is not None:
                    connection = tls.wrap_socket(connection, server_side=True)
                return connection, address

        self._server = Server((host, 0), Handler)
        self.scheme = "https" if tls else "http"
        self.host = host
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def count(self, route: str) -> Sent:
        with self._lock:
            return self.sent.setdefault(route, Sent())

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, handler: socketserver.StreamRequestHandler) -> None:
        try:
            line = handler.rfile.readline().decode("latin-1")
            authorization = None
            while (header := handler.rfile.readline()) not in {b"\r\n", b"\n", b""}:
                name, _, value = header.decode("latin-1").partition(":")
                if name.strip().lower() == "authorization":
                    authorization = value.strip()
            method, target, _version = line.split(" ", 2)
        except (OSError, ValueError):
            return
        route = f"{method} {urlsplit(target).path}"
        sent = self.count(route)
        with self._lock:
            queued = self.queued.get(route)
            reply = queued.pop(0) if queued else self.routes.get(route, Reply(status=404))
            sent.requests += 1
            sent.authorizations.append(authorization)
        body = reply.body
        headers = {"Connection": "close", **reply.headers}
        if isinstance(body, bytes) and "Content-Length" not in headers:
            headers["Content-Length"] = str(len(body))
        head = f"HTTP/1.1 {reply.status} Played\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in headers.items()
        )
        try:
            drip = reply.drip if reply.drip_head else 0
            self._write(handler, (head + "\r\n").encode(), drip, sent, "head")
            if method == "HEAD":
                return
            chunks = [body] if isinstance(body, bytes) else body()
            for chunk in chunks:
                self._write(handler, chunk, reply.drip, sent, "body")
        except OSError:
            return  # the client went away: what was sent is counted

    def _write(
        self,
        handler: socketserver.StreamRequestHandler,
        data: bytes,
        drip: float,
        sent: Sent,
        part: str,
    ) -> None:
        pieces = [data[i : i + 1] for i in range(len(data))] if drip else [data]
        for piece in pieces:
            if drip:
                time.sleep(drip)
            handler.wfile.write(piece)
            handler.wfile.flush()
            with self._lock:
                setattr(sent, part, getattr(sent, part) + len(piece))


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost (its own CA) and its key, made by openssl."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
