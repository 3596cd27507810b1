"""kube-proxy for pods in network namespaces: a TCP relay from a socket listening inside a
pod's namespace to an address in the host's.

:func:`listen_in_netns` makes the listening socket inside the namespace (a short-lived thread
joins it with ``setns(2)``; a socket keeps the namespace it was made in); :class:`Relay` accepts
there and connects out from the host's namespace, so the pod reaches the apiserver at
``127.0.0.1:<port>`` (``_incluster``) and the testbed's loopback pods at theirs (``_podnet``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import selectors
import socket
import threading
from pathlib import Path
from typing import Any

from pulumi_lora.testing.testbed._netns import NetnsError

__all__ = ["RELAY_THREAD_PREFIX", "Relay", "listen_in_netns"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

RELAY_THREAD_PREFIX = "pulumi-lora-relay-"
"""Every relay thread's name starts with this."""

_NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_SETNS_TIMEOUT = 10.0


def listen_in_netns(netns: str, host: str, port: int, *, backlog: int = 64) -> socket.socket:
    """A TCP socket listening on ``host:port`` inside network namespace ``netns``.

    A short-lived thread joins the namespace (``setns(2)`` on ``/run/netns/<netns>``; a thread's
    network namespace is its own), creates, binds and listens, and ends; the socket stays in
    that namespace. Raises :class:`NetnsError` naming the step that failed.
    """
    path = _NETNS_DIR / netns
    result: dict[str, Any] = {}

    def join_and_listen() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"setns({path}, CLONE_NEWNET): {os.strerror(code)}")
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(backlog)
            except BaseException:
                sock.close()
                raise
            result["socket"] = sock
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=join_and_listen, name=f"pulumi-lora-setns-{netns}")
    thread.start()
    thread.join(_SETNS_TIMEOUT)
    if thread.is_alive():  # pragma: no cover - setns and bind do not block
        raise NetnsError(f"listening on {host}:{port} in netns {netns} did not finish")
    if "error" in result:
        error = result["error"]
        raise NetnsError(f"cannot listen on {host}:{port} in netns {netns}: {error}") from error
    sock: socket.socket = result["socket"]
    return sock


class _Pipe:
    """One relayed connection: the pod's socket, the apiserver's, a bounded buffer each way."""

    __slots__ = ("buffers", "closed", "eof", "socks")

    def __init__(self, pod_side: socket.socket, host_side: socket.socket) -> None:
        self.socks = (pod_side, host_side)
        self.buffers = (bytearray(), bytearray())  # [i]: read from socks[i], to write to the other
        self.eof = [False, False]  # socks[i] sent EOF
        self.closed = False


class Relay:
    """A bounded TCP relay (one selector thread, no busy loop): kube-proxy for one pod.

    Accepts on ``listener`` (made by :func:`listen_in_netns`, so inside the pod's namespace) and
    connects each client to ``target`` from this process's own (host) namespace, copying both
    ways with half-closes honoured. At most ``max_connections`` at once (more are closed at
    accept); at most ``buffer_size`` bytes buffered per direction. Closes itself when the process
    ``pid`` exits (a pidfd in the selector), and on :meth:`close`.
    """

    def __init__(
        self,
        listener: socket.socket,
        target: tuple[str, int],
        *,
        name: str,
        pid: int | None = None,
        max_connections: int = 64,
        buffer_size: int = 65536,
        connect_timeout: float = 5.0,
    ) -> None:
        self.target = target
        self.name = name
        self._listener = listener
        self._max = max_connections
        self._chunk = buffer_size
        self._connect_timeout = connect_timeout
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._pipes: set[_Pipe] = set()
        self._pidfd: int | None = None
        self._released = False
        self._release_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, name=f"{RELAY_THREAD_PREFIX}{name}", daemon=True
        )
        self.accepted = 0
        self.refused = 0
        listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        if pid is not None:
            try:
                self._pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._stopping.set()  # already gone: serve nothing
            else:
                self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")

    @property
    def address(self) -> tuple[str, int]:
        """Where the relay listens (inside its namespace)."""
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Connections relayed right now."""
        return len(self._pipes)

    def start(self) -> Relay:
        """Start the relay's thread; returns self."""
        self._thread.start()
        return self

    def alive(self) -> bool:
        """True while the relay's thread runs."""
        return self._thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, drop every connection, join the thread. Idempotent."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._release()

    def _release(self) -> None:
        with self._release_lock:
            if self._released:
                return
            self._released = True
        for pipe in list(self._pipes):
            self._drop(pipe)
        for resource in (self._listener, self._wake_r, self._wake_w):
            resource.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        with contextlib.suppress(RuntimeError, OSError):
            self._selector.close()

    def _serve(self) -> None:
        try:
            while not self._stopping.is_set():
                for key, mask in self._selector.select():
                    tag = key.data
                    if tag == "accept":
                        self._accept()
                    elif tag in ("wake", "exit"):
                        self._stopping.set()
                    else:
                        pipe, side = tag
                        self._pump(pipe, side, mask)
        except Exception:  # pragma: no cover - a bug here must not pass silently
            _log.exception("relay %s failed", self.name)
        finally:
            self._release()
            _log.debug("relay %s closed (%d relayed)", self.name, self.accepted)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self._pipes) >= self._max:
            self.refused += 1
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=self._connect_timeout)
        except OSError as exc:
            _log.debug("relay %s: %s:%d unreachable: %s", self.name, *self.target, exc)
            self.refused += 1
            client.close()
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe = _Pipe(client, upstream)
        self._pipes.add(pipe)
        self.accepted += 1
        self._watch(pipe)

    def _pump(self, pipe: _Pipe, side: int, mask: int) -> None:
        if pipe.closed:  # dropped by its other side's event of the same select()
            return
        sock, other = pipe.socks[side], 1 - side
        try:
            if mask & selectors.EVENT_READ and not pipe.closed:
                data = sock.recv(self._chunk - len(pipe.buffers[side]))
                if data:
                    pipe.buffers[side].extend(data)
                else:
                    pipe.eof[side] = True
            if mask & selectors.EVENT_WRITE and not pipe.closed:
                pending = pipe.buffers[other]
                sent = sock.send(pending)
                del pending[:sent]
            for i in (0, 1):  # an EOF read on one side, once flushed, is a FIN on the other
                if pipe.eof[i] and not pipe.buffers[i]:
                    with contextlib.suppress(OSError):
                        pipe.socks[1 - i].shutdown(socket.SHUT_WR)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
                _log.debug("relay %s: %s", self.name, exc)
            self._drop(pipe)
            return
        if all(pipe.eof) and not any(pipe.buffers):
            self._drop(pipe)
            return
        self._watch(pipe)

    def _watch(self, pipe: _Pipe) -> None:
        """(Re-)register what each socket waits for: room to read into, data to write."""
        for i in (0, 1):
            events = 0
            if not pipe.eof[i] and len(pipe.buffers[i]) < self._chunk:
                events |= selectors.EVENT_READ
            if pipe.buffers[1 - i]:
                events |= selectors.EVENT_WRITE
            sock = pipe.socks[i]
            registered = sock in self._selector.get_map()
            if events and registered:
                self._selector.modify(sock, events, (pipe, i))
            elif events:
                self._selector.register(sock, events, (pipe, i))
            elif registered:
                self._selector.unregister(sock)

    def _drop(self, pipe: _Pipe) -> None:
        pipe.closed = True
        for sock in pipe.socks:
            with contextlib.suppress(KeyError, ValueError, RuntimeError):
                self._selector.unregister(sock)
            sock.close()
        self._pipes.discard(pipe)
