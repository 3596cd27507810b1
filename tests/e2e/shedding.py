"""A busy apiserver, played: an HTTP proxy in front of ``kubectl proxy`` that answers some
requests itself (429 with ``Retry-After``, as API Priority and Fairness sheds load; 403, as RBAC
refuses) and forwards the rest.

A request's *kind* is its method and what it names, without names: ``GET loraadapters/NAME``,
``PATCH loraadapters/NAME/status``, ``GET pods`` (a LIST). After :meth:`Shedding.shed_anew` it
sheds the first request of each kind; a kind in :attr:`Shedding.refused` is answered 403.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import yaml

from pulumi_lora.testing.testbed import Testbed

#: Headers that belong to one hop, not to the request or answer forwarded.
HOP = {"host", "connection", "content-length", "transfer-encoding", "accept-encoding", "keep-alive"}


def kind_of(method: str, path: str) -> str:
    """A request's kind: ``GET pods`` (a LIST), ``GET inferenceservices/NAME``, ``PATCH
    loraadapters/NAME/status``; names and namespaces left out."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else parts
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    words = rest[:1] + (["NAME"] if len(rest) > 1 else []) + rest[2:3]
    return f"{method} {'/'.join(words) or path}"


@dataclass
class Shedding:
    """What the proxy does, changed by the test as it goes; what it answered itself."""

    shed_first: bool = False
    refused: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    answered: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def shed_anew(self) -> None:
        """From now on, shed the first request of each kind (again)."""
        with self.lock:
            self.shed_first, self.seen = True, set()
            self.answered.clear()

    def decide(self, kind: str) -> int | None:
        """The status this proxy answers ``kind`` with itself, or None to forward it."""
        with self.lock:
            if kind in self.refused:
                self.answered.append((kind, 403))
                return 403
            if self.shed_first and kind not in self.seen:
                self.seen.add(kind)
                self.answered.append((kind, 429))
                return 429
            return None

    def shed(self) -> set[str]:
        """The kinds answered 429 since `shed_anew`."""
        with self.lock:
            return {kind for kind, status in self.answered if status == 429}


def _status(code: int, kind: str) -> dict[str, Any]:
    reason = {429: "TooManyRequests", 403: "Forbidden"}[code]
    message = {
        429: "Too many requests, please try again later.",
        403: f'{kind} is forbidden: User "ci-runner" cannot do this',
    }[code]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@contextlib.contextmanager
def busy_apiserver(testbed: Testbed, workdir: Path) -> Iterator[tuple[Shedding, Path]]:
    """A shedding proxy in front of ``kubectl proxy`` for ``testbed``; its control and a
    kubeconfig (no credentials: ``kubectl proxy`` adds the admin's) that goes through it."""
    kubectl = subprocess.Popen(
        [
            str(testbed._binaries["kubectl"].path),
            f"--kubeconfig={testbed.kubeconfig_path}",
            "proxy",
            "--port=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert kubectl.stdout is not None
        line = kubectl.stdout.readline()
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert found, f"kubectl proxy said {line!r}"
        upstream = httpx2.Client(base_url=f"http://127.0.0.1:{found.group(1)}", timeout=60)
        control = Shedding()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, control))
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            port = server.server_address[1]
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "busy", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "through-kubectl-proxy", "user": {}}],
                "contexts": [
                    {
                        "name": "busy",
                        "context": {"cluster": "busy", "user": "through-kubectl-proxy"},
                    }
                ],
                "current-context": "busy",
            }
            path = workdir / "busy-kubeconfig"
            path.write_text(yaml.safe_dump(config), encoding="utf-8")
            yield control, path
        finally:
            server.shutdown()
            server.server_close()
            upstream.close()
    finally:
        kubectl.terminate()
        kubectl.wait(timeout=10)


def _handler(upstream: httpx2.Client, control: Shedding) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            kind = kind_of(self.command, self.path)
            code = control.decide(kind)
            if code is not None:
                self._answer(code, {"Retry-After": "1"}, json.dumps(_status(code, kind)).encode())
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            got = upstream.request(self.command, self.path, content=body, headers=headers)
            kept = {k: v for k, v in got.headers.items() if k.lower() not in HOP}
            kept.pop("content-encoding", None)
            self._answer(got.status_code, kept, got.content)

        def _answer(self, code: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(code)
            kept = {k.lower(): v for k, v in headers.items()}
            kept.setdefault("content-type", "application/json")
            for key, value in kept.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

    return Handler
