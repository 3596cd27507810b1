"""What every source client shares: where its bytes land, and how it reads a source's answers.

`write_chunks` is the one writer of fetched bytes: it counts, hashes, writes and fsyncs, so a
fetched file is never read back to be verified.
"""

from __future__ import annotations

import hashlib
import os
import queue
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx2

from pulumi_lora._staging._errors import (
    SourceFileMissing,
    SourceRefused,
    SourceUnauthorized,
    SourceUnreachable,
    StagingError,
)
from pulumi_lora._staging._source import check_file_name
from pulumi_lora._staging._transfer import Progress
from pulumi_lora._staging._verify import FileFacts

__all__ = [
    "EXTRA_MISSING",
    "TIMEOUT",
    "Fetched",
    "by_status",
    "hidden",
    "listed",
    "tls_context",
    "write_chunks",
]

EXTRA_MISSING = "staging from {scheme}:// needs {module}: pip install 'pulumi-lora[staging]'"

TIMEOUT = httpx2.Timeout(60.0, connect=10.0)
"""Each wait for a connection or a chunk; the whole fetch has the deadline of `_transfer`."""

_TLS_LOCK = threading.Lock()
_tls_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def tls_context() -> ssl.SSLContext:
    """httpx2's default TLS context (the system's CAs, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``),
    made once per process and those two settings: loading the CAs costs tens of milliseconds,
    which every staging of a stager server would pay again."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _TLS_LOCK:
        context = _tls_contexts.get(key)
        if context is None:
            context = _tls_contexts[key] = httpx2.create_ssl_context(trust_env=True)
        return context


@dataclass(frozen=True)
class Fetched:
    """What a client fetched into the directory."""

    files: dict[str, FileFacts]
    """Every file written: its size and sha256, computed as it was written."""
    vouched: dict[str, str]
    """The sha256 the source itself vouches for (the Hub's, of its LFS files): checked with the
    pinned digests."""


def write_chunks(chunks: Iterable[bytes], path: Path, progress: Progress) -> FileFacts:
    """Write ``chunks`` to ``path`` (its folders made), each counted (and bounded) before it is
    hashed and written; the file is flushed to the volume after its last chunk (its earlier
    bytes already on their way: `_Writeback`). Returns its size and sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    size = 0
    with (
        path.open("wb") as stream,
        _Writeback(stream.fileno()) as writeback,
        _Sink(stream) as sink,
    ):
        for chunk in chunks:
            progress.add(len(chunk))
            sink.put(chunk)
            size += len(chunk)
            writeback.wrote(size)
        sha256 = sink.finish()
        stream.flush()
        writeback.finish()
        os.fsync(stream.fileno())
    return FileFacts(size=size, sha256=sha256)


_INLINE_BYTES = 4 << 20
"""Bytes of a file hashed and written by the reader before a thread of its own takes over."""
_QUEUED_CHUNKS = 64
"""Chunks waiting to be hashed and written at most (the reader waits beyond: memory stays
bounded)."""


class _Sink:
    """Hashes and writes a file's chunks in order: its first `_INLINE_BYTES` at once, the rest
    in a thread of its own, so the reader goes back to the network while a chunk is hashed and
    written. A small file never starts the thread."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._digest = hashlib.sha256()
        self._inline = 0
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None
        self._failure: OSError | None = None

    def __enter__(self) -> _Sink:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop()

    def put(self, chunk: bytes) -> None:
        """Hash and write ``chunk`` after every chunk put before it; a failed write of an
        earlier chunk is raised here."""
        if self._failure is not None:
            raise self._failure
        if self._queue is None:
            self._take(chunk)
            self._inline += len(chunk)
            if self._inline >= _INLINE_BYTES:
                self._queue = queue.Queue(maxsize=_QUEUED_CHUNKS)
                self._thread = threading.Thread(
                    target=self._run, args=(self._queue,), name="pulumi-lora-stage-write"
                )
                self._thread.start()
            return
        self._queue.put(chunk)

    def finish(self) -> str:
        """Wait until every chunk is hashed and written; their sha256."""
        self._stop()
        if self._failure is not None:
            raise self._failure
        return self._digest.hexdigest()

    def _take(self, chunk: bytes) -> None:
        self._digest.update(chunk)
        self._stream.write(chunk)

    def _stop(self) -> None:
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self, chunks: queue.Queue[bytes | None]) -> None:
        while (chunk := chunks.get()) is not None:
            if self._failure is None:  # after a failure, only drain: the reader must not wait
                try:
                    self._take(chunk)
                except OSError as exc:
                    self._failure = exc


_FLUSH_STEP = 8 << 20
"""Bytes written between two flushes started behind the writer."""
_flush_data = getattr(os, "fdatasync", os.fsync)


class _Writeback:
    """Flushes a file being written to the volume every `_FLUSH_STEP` bytes, in a thread of its
    own (started at the first step: a small file never needs one), so the volume writes while
    the writer goes on reading, and the last fsync finds little left to write."""

    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor
        self._due = _FLUSH_STEP
        self._wake = threading.Event()
        self._ended = False
        self._failure: OSError | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Writeback:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._end()

    def wrote(self, size: int) -> None:
        """``size`` bytes are written so far."""
        if size < self._due:
            return
        self._due = size + _FLUSH_STEP
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pulumi-lora-stage-flush")
            self._thread.start()
        self._wake.set()

    def finish(self) -> None:
        """Wait for the flush under way; its failure is raised here, in the writer's thread."""
        self._end()
        if self._failure is not None:
            raise self._failure

    def _end(self) -> None:
        self._ended = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._ended:
                return
            try:
                _flush_data(self._descriptor)
            except OSError as exc:
                self._failure = exc
                return


def listed(where: str, name: str) -> str:
    """A file name a source listed, if it is a plain relative path; else `SourceRefused`."""
    try:
        return check_file_name(name)
    except ValueError:
        raise SourceRefused(
            f"{where}: the source lists {name!r}, not a plain relative file path (an empty, "
            "'.' or '..' part, or a leading '/'): remove it from the source, or declare the "
            "files to stage (--digest, --file)",
            file=name,
        ) from None


def hidden(path: str) -> bool:
    """Whether a listed path is hidden (a part starts with a dot): never staged from a listing."""
    return any(part.startswith(".") for part in path.split("/"))


def by_status(where: str, status: int | None, file: str | None) -> StagingError:
    """The staging error for an HTTP status a source answered, with nothing more specific."""
    if status in {401, 403}:
        return SourceUnauthorized(f"{where}: HTTP {status}", file=file)
    if status == 404:
        return SourceFileMissing(f"{where}: HTTP 404", file=file)
    return SourceUnreachable(f"{where}: HTTP {status}", file=file)
