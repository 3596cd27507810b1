"""``pulumi-lora stage-serve``: the stager as a server, for one provider process's command.

Must not trust its network: every call but ``/healthz`` carries the token whose sha256 the Job
holds. It ends soon after the provider's last ``/hold`` drops.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from pulumi_lora._staging._errors import as_staging_error
from pulumi_lora._staging._source import StagingRequest, content_key

__all__ = ["PORT", "TOKEN_HEADER", "StagerServer", "Work", "token_digest"]

PORT = 8470
"""The port the server listens on in its pod."""
TOKEN_HEADER = "X-Pulumi-LoRA-Token"  # noqa: S105 - a header name
"""The header carrying the token (the apiserver's pod proxy strips ``Authorization``)."""
BODY_LIMIT = 1 << 20
"""Bytes a request body may have (a staging request is a few hundred)."""
MAX_WAIT = 30.0
"""Seconds a call may wait for its staging (verification, removal) to end before answering
``running``."""
KEEPALIVE_SECONDS = 10.0
"""A held connection gets a byte this often, so no proxy in between closes it as idle."""

Stage = Callable[[StagingRequest, float], dict[str, Any]]
"""Stages one request within a deadline (seconds) and returns the stager's result document."""
ClaimCall = Callable[[Sequence[str]], dict[str, Any]]
"""Verifies or removes staged directories by content key."""
CollectCall = Callable[[Sequence[str], Sequence[str], float], dict[str, Any]]
"""Collects the claim: ``(named, released, grace_seconds)`` (``_claim.collect``)."""


def token_digest(token: str) -> str:
    """Pure: what the server is told of the token (its arguments are readable by pod readers)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class _Task:
    started: float
    kind: str = "/stage"
    ticket: str = field(default_factory=lambda: secrets.token_hex(8))
    document: dict[str, Any] | None = None
    ended: float | None = None
    ended_event: threading.Event = field(default_factory=threading.Event)


@dataclass
class Work:
    """The server's state: stagings by content key (one at a time per key, a bounded pool), the
    holds, and when anything last happened. Thread-safe; decides nothing about HTTP."""

    stage: Stage
    verify: ClaimCall
    unstage: ClaimCall
    deadline: float
    collect: CollectCall | None = None
    workers: int = 4
    keep: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _collecting: threading.Lock = field(default_factory=threading.Lock)
    _key_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _tasks: dict[str, _Task] = field(default_factory=dict)
    _tickets: dict[str, _Task] = field(default_factory=dict)
    _holds: int = 0
    _active: int = 0
    _held: bool = False
    _last: float = 0.0
    _pool: ThreadPoolExecutor | None = None

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="stage")
        self._last = self.clock()

    def submit(
        self, request: StagingRequest, ticket: str | None = None, wait: float = 0.0
    ) -> dict[str, Any]:
        """The state of the staging ``ticket`` names (one this server gave), else of the one of
        ``request``'s content key running now, else of one started now, once it ended or
        ``wait`` seconds passed: ``{"state": "running", "ticket", "seconds"}`` or ``{"state":
        "done", "ticket", "document"}``. A staging that ended is never reused for a new
        request: the directory may have changed since."""
        key = content_key(request)
        with self._lock:
            now = self.clock()
            self._last = now
            self._expire(now)
            task = self._ticket(ticket, "/stage") or self._tasks.get(key)
            if task is None:
                task = self._tasks[key] = _Task(started=now)
                self._tickets[task.ticket] = task
                self._active += 1
                assert self._pool is not None
                self._pool.submit(self._run, key, request, task)
        return {"key": key, **self._state(task, wait)}

    def claim(self, call: ClaimCall, keys: Sequence[str]) -> dict[str, Any]:
        """``call`` (verify or unstage) on ``keys``, none of them staging meanwhile in this
        server (the keys' locks on the claim hold across servers)."""
        with self._counted(holds=0):
            locks = [self._key_lock(key) for key in sorted(set(keys))]
            for lock in locks:
                lock.acquire()
            try:
                return _reported(lambda: call(keys))
            finally:
                for lock in locks:
                    lock.release()

    def polled(
        self, kind: str, run: Callable[[], dict[str, Any]], ticket: str | None, wait: float
    ) -> dict[str, Any]:
        """A verification, removal or collection as a staging is: the state of the call
        ``ticket`` names (one of ``kind`` this server gave), else of ``run()`` started now,
        once it ended or ``wait`` seconds passed (``{"state": "running", "ticket", "seconds"}``
        or ``{"state": "done", "ticket", "document"}``). A slow call is never taken for a lost
        server: each answer comes within ``wait``."""
        with self._lock:
            now = self.clock()
            self._last = now
            self._expire(now)
            task = self._ticket(ticket, kind)
            if task is None:
                task = _Task(started=now, kind=kind)
                self._tickets[task.ticket] = task
                self._active += 1
                threading.Thread(
                    target=self._run_call, args=(run, task), name=kind, daemon=True
                ).start()
        return self._state(task, wait)

    def collected(
        self, named: Sequence[str], released: Sequence[str], grace: float
    ) -> dict[str, Any]:
        """The claim collected (``collect``): what no CR names, unused for ``grace`` seconds.
        It takes the keys' locks on the claim itself, never waiting for one (a key busy
        staging is in use); one collection at a time, so the concurrent deletes of a command
        never find each other's key busy."""
        collect = self.collect
        if collect is None:
            raise ValueError("this server does not collect")
        with self._counted(holds=0), self._collecting:
            return _reported(lambda: collect(named, released, grace))

    @contextmanager
    def hold(self) -> Iterator[None]:
        """A held connection: the provider's process is alive while one is open."""
        with self._counted(holds=1):
            yield

    def finished(self, grace: float, start_grace: float) -> bool:
        """Whether the server may end: nothing runs, nothing held, and quiet for ``grace``
        seconds (``start_grace`` before the first hold came)."""
        with self._lock:
            if self._holds or self._active:
                return False
            return self.clock() - self._last >= (grace if self._held else start_grace)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _ticket(self, ticket: str | None, kind: str) -> _Task | None:
        """The task ``ticket`` names if it is one of ``kind`` (lock held)."""
        task = self._tickets.get(ticket or "")
        return task if task is not None and task.kind == kind else None

    def _state(self, task: _Task, wait: float) -> dict[str, Any]:
        """``task``'s state once it ended or ``wait`` seconds passed."""
        if wait > 0:
            with self._counted(holds=0):  # a caller waiting is not a quiet server
                task.ended_event.wait(wait)
        with self._lock:
            if task.document is None:
                seconds = round(self.clock() - task.started, 1)
                return {"state": "running", "ticket": task.ticket, "seconds": seconds}
            return {"state": "done", "ticket": task.ticket, "document": task.document}

    def _run_call(self, run: Callable[[], dict[str, Any]], task: _Task) -> None:
        document = _reported(run)
        with self._lock:
            task.document, task.ended = document, self.clock()
            self._active -= 1
            self._last = task.ended
        task.ended_event.set()

    def _run(self, key: str, request: StagingRequest, task: _Task) -> None:
        with self._key_lock(key):
            document = _reported(lambda: self.stage(request, self.deadline))
        with self._lock:
            task.document, task.ended = document, self.clock()
            if self._tasks.get(key) is task:
                del self._tasks[key]
            self._active -= 1
            self._last = task.ended
        task.ended_event.set()

    @contextmanager
    def _counted(self, *, holds: int) -> Iterator[None]:
        """A hold (``holds=1``) or a running call (``0``) while the block lasts."""
        with self._lock:
            self._holds += holds
            self._active += 1 - holds
            self._held = self._held or bool(holds)
            self._last = self.clock()
        try:
            yield
        finally:
            with self._lock:
                self._holds -= holds
                self._active -= 1 - holds
                self._last = self.clock()

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def _expire(self, now: float) -> None:
        """Forget the results of stagings that ended ``keep`` ago (lock held): every caller
        polling one has read it by then."""
        for ticket in [
            t for t, k in self._tickets.items() if k.ended and now - k.ended > self.keep
        ]:
            del self._tickets[ticket]


def _reported(make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``make()``, or any failure as the stager's error document (as a Job's termination
    message says it: ``{"error", "reason", "file"}``)."""
    try:
        return make()
    except Exception as exc:  # every failure reaches the caller, never a traceback
        error = as_staging_error(exc)
        return {"error": str(error), "reason": error.reason, "file": error.file}


_CALLS = frozenset({"/verify", "/unstage", "/collect"})


def _call(work: Work, path: str, body: Mapping[str, Any]) -> Callable[[], dict[str, Any]]:
    """The call a body asks ``path`` for (raises ``ValueError`` for a malformed one):
    ``{"keys": [...]}`` to verify or unstage, ``{"named": [...], "released": [...],
    "grace_seconds": G}`` to collect."""
    if path != "/collect":
        keys = [str(k) for k in body.get("keys") or ()]
        call = work.verify if path == "/verify" else work.unstage
        return lambda: work.claim(call, keys)
    if work.collect is None:
        raise ValueError("this server does not collect")
    named = [str(k) for k in _listed(body, "named")]
    released = [str(k) for k in _listed(body, "released")]
    grace = body.get("grace_seconds")
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise ValueError("grace_seconds must be a number of seconds, 0 or more")
    return lambda: work.collected(named, released, float(grace))


def _listed(body: Mapping[str, Any], name: str) -> list[Any]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise TypeError(f"{name} must be a list of content keys")
    return value


class StagerServer(ThreadingHTTPServer):
    """The HTTP face of :class:`Work`: ``GET /healthz``; with the token, ``GET /hold``,
    ``POST /stage`` (a staging request's JSON), ``POST /verify`` and ``POST /unstage``
    (``{"keys": [...]}``), ``POST /collect`` (``{"named", "released", "grace_seconds"}``);
    every POST long-polled with ``?wait=SECONDS[&ticket=T]``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], work: Work, digest: str) -> None:
        super().__init__(address, _Handler)
        self.work = work
        self.digest = digest
        self.stopping = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: StagerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the provider reports what matters; a pod's log is not read."""

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._answer(HTTPStatus.OK, {"ok": True})
        elif not self._authorized():
            return
        elif self.path == "/hold":
            self._hold()
        else:
            self._answer(HTTPStatus.NOT_FOUND, {"error": f"no such path: {self.path}"})

    def do_POST(self) -> None:
        if not self._authorized():
            return
        body = self._body()
        if body is None:
            return
        work = self.server.work
        path, _, query = self.path.partition("?")
        asked = parse_qs(query)
        try:
            ticket = asked.get("ticket", [None])[0]
            wait = min(max(float(asked.get("wait", ["0"])[0]), 0.0), MAX_WAIT)
            if path == "/stage":
                answer = work.submit(StagingRequest.from_json(json.dumps(body)), ticket, wait)
            elif path in _CALLS:
                run = _call(work, path, body)
                # Long-polled when asked (``wait``, ``ticket``); a bare call (a provider of
                # 0.3.0) is answered with the document once the call ended.
                polled = "wait" in asked or "ticket" in asked
                answer = work.polled(path, run, ticket, wait) if polled else run()
            else:
                self._answer(HTTPStatus.NOT_FOUND, {"error": f"no such path: {self.path}"})
                return
        except (ValueError, TypeError) as exc:
            self._answer(HTTPStatus.BAD_REQUEST, {"error": f"not a valid request: {exc}"})
            return
        self._answer(HTTPStatus.OK, answer)

    def _authorized(self) -> bool:
        given = self.headers.get(TOKEN_HEADER, "")
        if hmac.compare_digest(token_digest(given), self.server.digest):
            return True
        self._answer(HTTPStatus.FORBIDDEN, {"error": f"a wrong or missing {TOKEN_HEADER}"})
        return False

    def _body(self) -> dict[str, Any] | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= BODY_LIMIT:
            self._answer(HTTPStatus.BAD_REQUEST, {"error": "a JSON body of at most 1 MiB"})
            return None
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._answer(HTTPStatus.BAD_REQUEST, {"error": "the body is not a JSON object"})
            return None
        return body

    def _answer(self, status: HTTPStatus, document: Mapping[str, Any]) -> None:
        data = json.dumps(document, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _hold(self) -> None:
        """Answer, then keep the connection until the provider drops it (or the server
        stops): a byte every ``KEEPALIVE_SECONDS`` so proxies in between keep it open."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.close_connection = True
        with self.server.work.hold():
            last = time.monotonic()
            try:
                self.wfile.write(b"\n")
                self.wfile.flush()
                while not self.server.stopping.is_set():
                    readable, _, _ = select.select([self.connection], [], [], 0.5)
                    if readable and not self.connection.recv(1024):
                        return  # the provider (or the proxy for it) closed the connection
                    if time.monotonic() - last >= KEEPALIVE_SECONDS:
                        self.wfile.write(b"\n")
                        self.wfile.flush()
                        last = time.monotonic()
            except OSError:
                return


def serve(
    work: Work,
    digest: str,
    *,
    port: int = PORT,
    grace: float = 2.0,
    start_grace: float = 120.0,
    say: Callable[[str], None] = lambda _text: None,
) -> None:
    """Serve until :meth:`Work.finished` says the provider is gone, or a SIGTERM (the Job or
    its namespace deleted) comes: a container's PID 1 has no default action for it."""
    server = StagerServer(("0.0.0.0", port), work, digest)  # noqa: S104 - a pod's own IP
    thread = threading.Thread(target=server.serve_forever, args=(0.2,), daemon=True)
    thread.start()
    say(f"serving on port {port}")
    if threading.current_thread() is threading.main_thread():  # the pod's PID 1: no default
        signal.signal(signal.SIGTERM, lambda _signum, _frame: server.stopping.set())
    try:
        while not (server.stopping.is_set() or work.finished(grace, start_grace)):
            time.sleep(0.2)
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        work.close()
    say("no provider holds the server any more: done")
