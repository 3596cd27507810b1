"""Staging one request on the volume: fetch into a temporary directory beside the final one,
verify, rename into place.

``<root>/<key>`` is either absent or complete and verified: files land in
``<root>/.<key>.tmp-<random>``, which is removed on any failure; a directory already at
``<root>/<key>`` that verifies is used as it is (nothing fetched), one that does not is staged
again and replaced (set aside, renamed over, removed), so the final path never shows a partial
directory.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi_lora._staging._clients import Progress, fetch_files
from pulumi_lora._staging._errors import (
    AdapterConfigInvalid,
    DigestMismatch,
    StagingError,
    VolumeFull,
    VolumeUnusable,
)
from pulumi_lora._staging._source import StagingRequest, content_key
from pulumi_lora._staging._verify import (
    AdapterConfig,
    FileFacts,
    ServerLimits,
    verify_directory,
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
    env: Mapping[str, str] | None = None,
    log: Log = _quiet,
) -> StageResult:
    """Stage ``request`` at ``<root>/<content key>`` and return what is there.

    ``env`` holds the clients' settings and credentials (``os.environ`` by default); ``log``
    hears ``event, **fields`` (never a credential). Raises a ``StagingError``.
    """
    started = time.monotonic()
    env = os.environ if env is None else env
    key = content_key(request)
    final = root / key
    _make_root(root)
    log("stage", key=key, source=request.source.uri, files=len(request.files) or None)

    def result(
        facts: dict[str, FileFacts], config: AdapterConfig, fetched: int | None
    ) -> StageResult:
        return StageResult(
            key=key,
            path=str(final),
            files=facts,
            config=config,
            seconds=time.monotonic() - started,
            fetched=fetched is not None,
            source=request.source.uri,
            bytes_fetched=fetched or 0,
        )

    if final.is_dir():
        try:
            facts, config = verify_directory(
                final, files=request.files, digests=request.digests, limits=limits
            )
        except (DigestMismatch, AdapterConfigInvalid) as exc:
            log("restage", key=key, reason=str(exc.detail))
        else:
            log("already_staged", key=key)
            return result(facts, config, None)

    progress = Progress(log)
    temporary = _temporary(root, key)
    try:
        vouched = fetch_files(request, temporary, env, progress)
        shutil.rmtree(temporary / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping
        facts, config = verify_directory(
            temporary,
            files=request.files,
            digests={**vouched, **request.digests},
            limits=limits,
        )
        _seal(temporary)
        _install(temporary, final, request, limits, log)
    except OSError as exc:
        raise _volume_error(exc, progress.file, root) from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    log("staged", key=key, path=str(final), bytes=progress.total_bytes)
    return result(facts, config, progress.total_bytes)


def _make_root(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VolumeUnusable(f"{root}: cannot create the staging root ({exc.strerror})") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise VolumeUnusable(f"{root}: the staging root is not writable by this user")


def _temporary(root: Path, key: str) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=root))
    except OSError as exc:
        raise _volume_error(exc, None, root) from None


def _seal(directory: Path) -> None:
    """Files read-only and flushed to the volume, before the rename makes them visible."""
    for current, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(current) / name
            path.chmod(0o444)
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        Path(current).chmod(0o755)
    _fsync_directory(directory)


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
) -> None:
    """Rename ``temporary`` to ``final``; a directory there (one that failed verification) is
    set aside first and removed after. A concurrent stager's complete directory is kept."""
    aside: Path | None = None
    if final.exists():
        aside = final.with_name(f".{final.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.rename(final, aside)
    try:
        os.rename(temporary, final)
    except OSError as exc:
        if exc.errno not in {errno.EEXIST, errno.ENOTEMPTY}:
            raise
        # Another stager renamed the same content into place first: keep it if it verifies.
        verify_directory(final, files=request.files, digests=request.digests, limits=limits)
        log("staged_concurrently", key=final.name)
    finally:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    _fsync_directory(final.parent)


def _volume_error(exc: OSError, file: str | None, root: Path) -> StagingError:
    where = f" while writing {file}" if file else ""
    if exc.errno in {errno.ENOSPC, errno.EDQUOT}:
        return VolumeFull(f"no space left on the volume at {root}{where}", file=file)
    if exc.errno in {errno.EACCES, errno.EPERM, errno.EROFS}:
        return VolumeUnusable(f"{root}: {exc.strerror}{where}", file=file)
    return StagingError(f"staging into {root} failed{where}: {exc}", file=file)
