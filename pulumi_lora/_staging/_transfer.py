"""Bounds on one staging's downloads: how many bytes, until when, and never down to plain http.

The deadline reaches every httpx2 socket operation (`bound_client`). boto3's calls run in a
daemon thread abandoned at the deadline, which never writes to the volume.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from pulumi_lora._staging._errors import InsecureRedirect, SourceTooLarge, SourceTooSlow

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_MAX_BYTES",
    "Progress",
    "TransferLimits",
    "active",
    "bound_client",
    "pumped",
    "refuse_long_waits",
    "refuse_plain_http",
    "waited",
]

T = TypeVar("T")

DEFAULT_MAX_BYTES = 16 << 30
"""16 GiB over all of an adapter's files: far above a LoRA adapter's size (megabytes to a few
gigabytes), far below what an endless answer would write."""
DEFAULT_DEADLINE = 3600.0
"""One hour for the whole fetch: the default 16 GiB at about 5 MB/s."""


@dataclass(frozen=True)
class TransferLimits:
    """The bounds of one staging's downloads (``pulumi-lora stage --max-bytes --deadline``)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    """Bytes over all files fetched."""
    deadline: float = DEFAULT_DEADLINE
    """Seconds from the start of the staging (the `Progress` made) to the end of its fetch."""

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or not (self.deadline > 0 and math.isfinite(self.deadline)):
            raise ValueError("max_bytes and deadline must be positive")


class Progress:
    """Counts the bytes fetched, logs each file's start, every ``step`` bytes and its end, and
    enforces the limits (raising `SourceTooLarge` or `SourceTooSlow`, naming the file).

    The reports follow the bytes, not the clock: a 1 GiB file logs 64 lines at the default step
    whatever the network's speed. The deadline starts when the progress is made.
    """

    def __init__(
        self,
        log: Callable[..., None],
        limits: TransferLimits | None = None,
        step: int = 16 << 20,
    ) -> None:
        self._log = log
        self._step = step
        self.limits = limits or TransferLimits()
        self._deadline = time.monotonic() + self.limits.deadline
        self.file: str | None = None
        """The file being fetched (errors name it)."""
        self.file_bytes = 0
        self.total_bytes = 0
        self._next = step

    def start(self, file: str, size: int | None = None) -> None:
        """A file starts; ``size`` is what the source declares for it, when known."""
        self.file, self.file_bytes, self._next = file, 0, self._step
        self._log("fetch_file", file=file, bytes=size)
        self.time_left()
        self.declare(size)

    def declare(self, size: int | None) -> None:
        """The source declares the current file's size: refused unless it fits the limit."""
        left = self.limits.max_bytes - self.total_bytes
        if size is not None and size > left:
            raise SourceTooLarge(
                f"{self.file}: the source declares {size} bytes, more than the {left} bytes "
                f"left of --max-bytes {self.limits.max_bytes}",
                file=self.file,
            )

    def declare_all(self, sizes: Iterable[int], what: str) -> None:
        """A listing declares every file's size: refused unless they fit together."""
        total = sum(sizes)
        if total > self.limits.max_bytes:
            raise SourceTooLarge(
                f"{what}: the files listed add up to {total} bytes, more than --max-bytes "
                f"{self.limits.max_bytes}"
            )

    def add(self, count: int) -> None:
        """``count`` more bytes of the current file arrived (negative: a client restarted)."""
        self.file_bytes += count
        self.total_bytes += count
        if self.total_bytes > self.limits.max_bytes:
            raise SourceTooLarge(
                f"{self.file}: the source sent more than --max-bytes {self.limits.max_bytes} "
                "over all files: cut off",
                file=self.file,
            )
        self.time_left()
        if self.file_bytes >= self._next:
            self._log("fetch_progress", file=self.file, bytes=self.file_bytes)
            self._next = (self.file_bytes // self._step + 1) * self._step

    def done(self) -> None:
        """The current file is complete."""
        self._log("fetched_file", file=self.file, bytes=self.file_bytes)

    def time_left(self) -> float:
        """Seconds left before the deadline; `SourceTooSlow` once it has passed."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise self.too_slow()
        return left

    def past_deadline(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() >= self._deadline

    def too_slow(self) -> SourceTooSlow:
        """The error for a fetch still running at the deadline."""
        where = f"{self.file}: " if self.file else ""
        return SourceTooSlow(
            f"{where}the fetch did not end within --deadline {self.limits.deadline:g} s "
            f"({self.total_bytes} bytes fetched)",
            file=self.file,
        )


@dataclass(frozen=True)
class _Transfer:
    progress: Progress
    https_only: bool


_ACTIVE: ContextVar[_Transfer | None] = ContextVar("pulumi_lora_staging_transfer", default=None)
"""The transfer this thread is running, for the socket wrappers and the request hooks."""


@contextmanager
def active(progress: Progress, *, https_only: bool) -> Iterator[None]:
    """Bound this thread's requests through `bound_client` clients by ``progress``; refuse
    plain http when ``https_only``."""
    token = _ACTIVE.set(_Transfer(progress, https_only))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


# --- httpx2 (the Hub's and https sources): every socket wait within the deadline -----------


def _within_deadline(operation: Callable[[float | None], T], timeout: float | None) -> T:
    """``operation(timeout)`` with ``timeout`` cut to what is left of the active transfer's
    deadline; a wait ended by the deadline is `SourceTooSlow`, whatever the library calls it."""
    transfer = _ACTIVE.get()
    if transfer is None:
        return operation(timeout)
    left = transfer.progress.time_left()
    cut = timeout is None or left < timeout
    try:
        return operation(left if cut else timeout)
    except Exception:
        if cut and transfer.progress.past_deadline():
            raise transfer.progress.too_slow() from None
        raise


_READ_BYTES = 1 << 20
"""Bytes one read may take from the socket: httpcore2 asks for 64 KiB, and each read costs a
trip through the HTTP parser and the deadline; the parser keeps whatever comes beyond."""


class _DeadlineStream:
    """A network stream (httpcore2's) whose waits end at the deadline, read in up to
    `_READ_BYTES` at a time."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        size = max(max_bytes, _READ_BYTES)
        data: bytes = _within_deadline(lambda t: self._inner.read(size, t), timeout)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _within_deadline(lambda t: self._inner.write(buffer, t), timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        inner = _within_deadline(
            lambda t: self._inner.start_tls(ssl_context, server_hostname, t), timeout
        )
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """A network backend handing out `_DeadlineStream`s; connecting waits within the deadline."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> _DeadlineStream:
        stream = _within_deadline(
            lambda t: self._inner.connect_tcp(host, port, t, local_address, socket_options),
            timeout,
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> _DeadlineStream:
        stream = _within_deadline(
            lambda t: self._inner.connect_unix_socket(path, t, socket_options), timeout
        )
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bound_client(client: Any) -> Any:
    """``client`` (a blocking httpx2 client) with every connection
    pool's network backend bounded by the active transfer's deadline (inert outside `active`), and
    `refuse_plain_http` on every request. Returns ``client``.

    httpx2 builds its pools itself and offers no argument for their network backend: it is
    swapped in after, on the client's transport and each proxy mount. A client without the
    expected pool raises ``TypeError`` rather than stage without a deadline.
    """
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            raise TypeError(f"{type(transport).__name__} has no connection pool to bound")
        if not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    hooks = client.event_hooks
    if refuse_plain_http not in hooks["request"]:
        hooks["request"].append(refuse_plain_http)
    return client


def refuse_plain_http(request: Any) -> None:
    """A request hook: once the active transfer is https, `InsecureRedirect` for a request
    over plain http (a redirect's next hop, or a Hub download location)."""
    transfer = _ACTIVE.get()
    if transfer is None or not transfer.https_only or request.url.scheme == "https":
        return
    file = transfer.progress.file
    where = f"{file}: " if file else ""
    raise InsecureRedirect(
        f"{where}the https source redirected to plain http on {request.url.host}", file=file
    )


def refuse_long_waits(response: Any) -> None:
    """A response hook: an answer asking to retry after more than what is left of the deadline
    (``Retry-After``, as a rate limit does) is `SourceTooSlow` now, not after the wait."""
    transfer = _ACTIVE.get()
    if transfer is None or response.status_code < 400:
        return
    value = response.headers.get("retry-after", "")
    if value.strip().isdigit() and int(value) >= transfer.progress.time_left():
        raise transfer.progress.too_slow()


# --- boto3: blocking calls in a thread, waited for until the deadline ------------------------


def pumped(produce: Callable[[], Iterable[T]], progress: Progress) -> Generator[T, None, None]:
    """The items of ``produce()``, iterated in a daemon thread and handed over here, each
    waited for at most until the deadline (then `SourceTooSlow`). The thread's exceptions are
    raised here. Close the iterator when done early: the thread then stops at its next item."""
    items: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=4)
    stop = threading.Event()

    def run() -> None:
        produced: Iterator[T] | None = None
        try:
            produced = iter(produce())
            for item in produced:
                if not _hand_over(items, (True, item), stop):
                    return
        except BaseException as exc:  # handed over: raised in the waiting thread
            _hand_over(items, (False, exc), stop)
            return
        finally:
            close = getattr(produced, "close", None)  # a generator's: its own clean-up
            if close is not None:
                close()
        _hand_over(items, (False, None), stop)

    threading.Thread(target=run, name="pulumi-lora-stage-fetch", daemon=True).start()
    try:
        while True:
            try:
                fetched, value = items.get(timeout=progress.time_left())
            except queue.Empty:
                raise progress.too_slow() from None
            if fetched:
                yield value
            elif value is None:
                return
            else:
                raise value
    finally:
        stop.set()


def _hand_over(
    items: queue.Queue[tuple[bool, Any]], item: tuple[bool, Any], stop: threading.Event
) -> bool:
    """Put ``item`` once there is room, unless the taker stopped; whether it was put."""
    while not stop.is_set():
        try:
            items.put(item, timeout=0.1)
        except queue.Full:
            continue
        return True
    return False


def waited(call: Callable[[], T], progress: Progress) -> T:
    """``call()`` run in a daemon thread, waited for at most until the deadline."""
    with closing(pumped(lambda: (call(),), progress)) as results:
        return next(results)
