"""Stages one request: fetch into a temporary directory beside the final one, verify, rename.

``<root>/<key>`` is either absent or complete and verified. Every staging holds the key's lock
on the claim (``_claim.key_lock``) from its reuse check to its rename, and marks the key used.
`stage` raises only staging errors.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi_lora._staging._claim import key_lock, mark_used
from pulumi_lora._staging._clients import fetch_files
from pulumi_lora._staging._errors import (
    AdapterConfigInvalid,
    DigestMismatch,
    SourceUnreachable,
    StagingError,
    VolumeFull,
    VolumeUnusable,
    as_staging_error,
)
from pulumi_lora._staging._source import StagingRequest, content_key
from pulumi_lora._staging._transfer import Progress, TransferLimits
from pulumi_lora._staging._verify import (
    MANIFEST,
    AdapterConfig,
    FileFacts,
    ServerLimits,
    manifest_text,
    verify_fetched,
    verify_staged,
)

__all__ = ["StageResult", "stage"]

Log = Callable[..., None]


def _quiet(_event: str, **_fields: Any) -> None:
    """The default log: says nothing."""


@dataclass(frozen=True)
class StageResult:
    """A staged, verified directory: what the Job reports."""

    key: str
    path: str
    files: dict[str, FileFacts]
    config: AdapterConfig
    seconds: float
    fetched: bool
    """False when the directory was already staged and verified."""
    source: str = ""
    bytes_fetched: int = field(default=0)

    @property
    def bytes(self) -> int:
        """The staged directory's size."""
        return sum(facts.size for facts in self.files.values())

    def document(self) -> dict[str, Any]:
        """The JSON result line (and termination message)."""
        return {
            "key": self.key,
            "path": self.path,
            "source": self.source,
            "files": {
                name: {"bytes": facts.size, "sha256": facts.sha256}
                for name, facts in sorted(self.files.items())
            },
            "bytes": self.bytes,
            "fetched": self.fetched,
            "bytesFetched": self.bytes_fetched,
            "rank": self.config.rank,
            "targetModules": sorted(self.config.target_modules),
            "seconds": round(self.seconds, 3),
        }


def stage(
    request: StagingRequest,
    root: Path,
    *,
    limits: ServerLimits | None = None,
    transfer: TransferLimits | None = None,
    env: Mapping[str, str] | None = None,
    log: Log = _quiet,
) -> StageResult:
    """Stage ``request`` at ``<root>/<content key>`` and return what is there.

    ``transfer`` bounds the fetch (bytes over all files, seconds from now; the defaults of
    `TransferLimits` when ``None``); ``env`` holds the clients' settings and credentials
    (``os.environ`` by default); ``log`` hears ``event, **fields`` (never a credential).
    Raises a ``StagingError``, and nothing else.
    """
    started = time.monotonic()
    env = os.environ if env is None else env
    key = content_key(request)
    final = root / key
    progress = Progress(log, transfer)
    try:
        _make_root(root)
        log("stage", key=key, source=request.source.uri, files=len(request.files) or None)
        with key_lock(root, key):  # no other staging, reuse or removal of the key meanwhile
            reused = _reuse(final, request, limits, log)
            if reused is None:
                facts, config = _fetch(
                    request, root, final, env=env, limits=limits, progress=progress, log=log
                )
                log("staged", key=key, path=str(final), bytes=progress.total_bytes)
            else:
                facts, config = reused
            mark_used(root, key)
    except StagingError:
        raise
    except Exception as exc:
        raise _translated(exc, progress.file, root) from exc
    return StageResult(
        key=key,
        path=str(final),
        files=facts,
        config=config,
        seconds=time.monotonic() - started,
        fetched=reused is None,
        source=request.source.uri,
        bytes_fetched=0 if reused is not None else progress.total_bytes,
    )


def _reuse(
    final: Path, request: StagingRequest, limits: ServerLimits | None, log: Log
) -> tuple[dict[str, FileFacts], AdapterConfig] | None:
    """What is at ``final``, if it verifies against its manifest; ``None``: stage it (again)."""
    if not final.exists() and not final.is_symlink():
        return None
    try:
        if final.is_symlink() or not final.is_dir():
            raise DigestMismatch(f"{final.name} is not a plain directory")
        staged = verify_staged(
            final, key=final.name, files=request.files, digests=request.digests, limits=limits
        )
    except (DigestMismatch, AdapterConfigInvalid) as exc:
        log("restage", key=final.name, reason=str(exc.detail))
        return None
    log("already_staged", key=final.name)
    return staged


def _fetch(
    request: StagingRequest,
    root: Path,
    final: Path,
    *,
    env: Mapping[str, str],
    limits: ServerLimits | None,
    progress: Progress,
    log: Log,
) -> tuple[dict[str, FileFacts], AdapterConfig]:
    """Fetch into a temporary directory (each file hashed and flushed as it is written), verify
    from those facts, record the manifest, seal, rename into place."""
    temporary = _temporary(root, final.name)
    try:
        fetched = fetch_files(request, temporary, env, progress)
        facts, config = verify_fetched(
            temporary,
            fetched.files,
            files=request.files,
            digests={**fetched.vouched, **request.digests},
            limits=limits,
        )
        manifest = manifest_text(final.name, request.source.uri, facts)
        _write_flushed(temporary / MANIFEST, manifest.encode())
        _seal(temporary)
        return _install(temporary, final, request, limits, log) or (facts, config)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _translated(exc: Exception, file: str | None, root: Path) -> StagingError:
    """Any exception as a staging error: the volume's and the network's own ``OSError``s by
    their errno, anything else by `as_staging_error` (its type and message, naming ``file``)."""
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror):
        where = f"{file}: " if file else ""
        return SourceUnreachable(f"{where}the connection failed ({exc})", file=file)
    if isinstance(exc, OSError):
        return _volume_error(exc, file, root)
    return as_staging_error(exc, file=file)


def _make_root(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VolumeUnusable(f"{root}: cannot create the staging root ({exc.strerror})") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise VolumeUnusable(f"{root}: the staging root is not writable by this user")


def _temporary(root: Path, key: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=root))


def _write_flushed(path: Path, data: bytes) -> None:
    with path.open("wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())


def _seal(directory: Path) -> None:
    """Files read-only and every directory's entries flushed to the volume, before the rename
    makes them visible (each file was flushed by its writer after its last byte)."""
    for current, _dirs, files in os.walk(directory, topdown=False):
        for name in files:
            (Path(current) / name).chmod(0o444)
        Path(current).chmod(0o755)
        _fsync_directory(Path(current))


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _install(
    temporary: Path,
    final: Path,
    request: StagingRequest,
    limits: ServerLimits | None,
    log: Log,
) -> tuple[dict[str, FileFacts], AdapterConfig] | None:
    """Rename ``temporary`` to ``final``. A directory already there is verified again and
    kept when it verifies (a stager that ignored the lock renamed the same content first: its
    facts are returned); only one that does not (the one this staging replaces) is set aside
    and removed after the rename."""
    aside: Path | None = None
    if final.exists() or final.is_symlink():
        kept = _verified_there(final, request, limits)
        if kept is not None:
            log("staged_concurrently", key=final.name)
            return kept
        aside = final.with_name(f".{final.name}.removing-{os.getpid()}-{time.monotonic_ns()}")
        os.rename(final, aside)
    try:
        os.rename(temporary, final)
    except OSError as exc:
        if exc.errno not in {errno.EEXIST, errno.ENOTEMPTY}:
            raise
        # Another stager renamed the same content into place meanwhile: keep it if it verifies.
        there = verify_staged(
            final, key=final.name, files=request.files, digests=request.digests, limits=limits
        )
        log("staged_concurrently", key=final.name)
        return there
    finally:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    _fsync_directory(final.parent)
    return None


def _verified_there(
    final: Path, request: StagingRequest, limits: ServerLimits | None
) -> tuple[dict[str, FileFacts], AdapterConfig] | None:
    """What is at ``final`` if it verifies against its manifest and ``request``, else None."""
    if final.is_symlink() or not final.is_dir():
        return None
    try:
        return verify_staged(
            final, key=final.name, files=request.files, digests=request.digests, limits=limits
        )
    except (DigestMismatch, AdapterConfigInvalid):
        return None


def _volume_error(exc: OSError, file: str | None, root: Path) -> StagingError:
    where = f" while writing {file}" if file else ""
    if exc.errno in {errno.ENOSPC, errno.EDQUOT}:
        return VolumeFull(f"no space left on the volume at {root}{where}", file=file)
    if exc.errno in {errno.EACCES, errno.EPERM, errno.EROFS}:
        return VolumeUnusable(f"{root}: {exc.strerror}{where}", file=file)
    return StagingError(f"staging into {root} failed{where}: {exc}", file=file)
