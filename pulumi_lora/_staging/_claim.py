"""Staged directories on the claim, by content key: locked, marked in use, verified, collected.

Per key, on the claim: ``<root>/<key>/`` (the staged directory), ``<root>/.<key>.lock`` (an
exclusive ``flock`` by every staging, reuse and removal of the key, across every stager on the
claim), ``<root>/.<key>.used`` (its mtime: the key's last staging, reuse or release) and, while
a staging fetches, ``<root>/.<key>.tmp-*``. A directory is renamed to a hidden name before
removal, so no pod ever sees half of one (docs/staging.md, "Revisions and cleanup").
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pulumi_lora._staging._errors import (
    AdapterConfigInvalid,
    DigestMismatch,
    SourceRefused,
    VolumeUnusable,
)
from pulumi_lora._staging._source import KEY_HEX
from pulumi_lora._staging._verify import verify_staged

__all__ = [
    "STALE_MARGIN",
    "STALE_SECONDS",
    "Entries",
    "Plan",
    "collect",
    "key_lock",
    "mark_used",
    "plan",
    "release",
    "unstage",
    "verify_keys",
]

_KEY = re.compile(rf"^[0-9a-f]{{{KEY_HEX}}}$")
_ENTRY = re.compile(
    rf"^(?:(?P<final>[0-9a-f]{{{KEY_HEX}}})"
    rf"|\.(?P<key>[0-9a-f]{{{KEY_HEX}}})\.(?P<kind>lock|used|tmp-|removing-|old-)(?P<rest>.*))$"
)
STALE_MARGIN = 600.0
"""Seconds past a stager's ``--deadline`` after which a staging's temporary directory is dead:
sealing and the rename after the fetch's last byte take far less."""
STALE_SECONDS = 3600.0 + STALE_MARGIN
"""A temporary directory older than this is dead, for ``stage-serve``'s default ``--deadline``
(3600 s, ``_transfer.DEFAULT_DEADLINE``) plus the margin."""


def _checked(keys: Sequence[str]) -> None:
    bad = [key for key in keys if _KEY.fullmatch(key) is None]
    if bad:
        raise SourceRefused(f"not content keys ({KEY_HEX} hex): {', '.join(map(repr, bad))}")


def _lock_path(root: Path, key: str) -> Path:
    return root / f".{key}.lock"


def _mark_path(root: Path, key: str) -> Path:
    return root / f".{key}.used"


@contextmanager
def key_lock(
    root: Path, key: str, *, shared: bool = False, wait: bool = True, required: bool = True
) -> Iterator[bool]:
    """``flock`` on ``<root>/.<key>.lock`` while the block lasts (shared: verifications);
    yields whether it is held: ``False`` when ``wait`` is false and another holds it, or when
    the lock file cannot be made and it is not ``required`` (a read-only root, by hand). The
    file exists while someone holds or waits for it: a file its last holder removed while this
    one waited is not held, the one at the path is taken instead."""
    path = _lock_path(root, key)
    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if required or exc.errno not in {errno.EROFS, errno.EACCES, errno.EPERM}:
                raise
            yield False
            return
        try:
            fcntl.flock(descriptor, mode)
        except BlockingIOError:
            os.close(descriptor)
            yield False
            return
        if _same_file(descriptor, path):
            break
        os.close(descriptor)
    try:
        yield True
    finally:
        _let_go(descriptor, path)


def _let_go(descriptor: int, path: Path) -> None:
    """Unlock; the last holder removes the lock file (one waiting on it then takes the one at
    the path, made anew), so a claim keeps no lock file of a key nobody works on."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other holder: the last
        if _same_file(descriptor, path):
            path.unlink()
    except OSError:
        pass  # another holder (it removes the file), or a read-only root: it stays
    finally:
        os.close(descriptor)


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)


def mark_used(root: Path, key: str) -> None:
    """The key is in use now: its mark's mtime (made if need be). Under the key's lock by a
    staging or reuse; by a release without it (a later mtime only keeps a directory longer)."""
    _mark_path(root, key).touch()


def release(root: Path, key: str) -> bool:
    """A CR stopped naming ``key``: its mark refreshed if the directory is there, so a
    collection keeps it for the grace period (a replacement reuses it). Whether it was there."""
    _checked([key])
    final = root / key
    if final.is_symlink() or not final.is_dir():
        return False
    mark_used(root, key)
    return True


def verify_keys(root: Path, keys: Sequence[str]) -> dict[str, str]:
    """Each ``root/<key>`` checked against its manifest, under the key's shared lock (never
    while it stages or goes): key → ``"verified"``, ``"missing"``, or what is wrong (a file
    changed, missing or extra, as ``verify_staged`` says). Raises ``SourceRefused`` for a key
    that is not a content key."""
    _checked(keys)
    found: dict[str, str] = {}
    for key in keys:
        directory = root / key
        with key_lock(root, key, shared=True, required=False):
            if directory.is_symlink() or not directory.is_dir():
                found[key] = "missing"
                continue
            try:
                verify_staged(directory, key=key, files=(), digests={})
            except (DigestMismatch, AdapterConfigInvalid) as exc:
                found[key] = exc.detail
            else:
                found[key] = "verified"
    return found


@dataclass(frozen=True)
class Entries:
    """What the claim holds of one key, as modification times (seconds since the epoch)."""

    final: float | None = None
    """``<key>/``; ``None``: absent."""
    mark: float | None = None
    """``.<key>.used``; ``None``: absent (a directory staged before marks existed)."""
    temporary: Mapping[str, float] = field(default_factory=dict)
    """``.<key>.tmp-*`` by name: stagings, live or killed."""
    aside: tuple[str, ...] = ()
    """``.<key>.removing-*`` and ``.old-*``: already out of the final path, dead."""


@dataclass(frozen=True)
class Plan:
    """Pure: what a collection does to one key it holds the lock of."""

    remove_final: bool
    remove: tuple[str, ...]
    """Other entries to remove: dead temporary directories, directories set aside."""
    forget: bool
    """Nothing else of the key is left: its mark goes too."""


def plan(entries: Entries, *, now: float, grace: float, stale: float) -> Plan:
    """Pure: the staged directory goes once its mark (else the directory itself) is ``grace``
    seconds old; a temporary directory once it is ``stale`` seconds old (past the stagers'
    deadline: never a live staging, even of a stager that ignores the lock); what was set aside
    always; the mark once nothing else of the key is left."""
    used = entries.mark if entries.mark is not None else entries.final
    remove_final = entries.final is not None and used is not None and now - used >= grace
    dead = tuple(sorted(name for name, mtime in entries.temporary.items() if now - mtime >= stale))
    left = (entries.final is not None and not remove_final) or len(dead) < len(entries.temporary)
    return Plan(remove_final, (*dead, *sorted(entries.aside)), forget=not left)


@dataclass
class _Found:
    final: float | None = None
    mark: float | None = None
    temporary: dict[str, float] = field(default_factory=dict)
    aside: list[str] = field(default_factory=list)

    def entries(self) -> Entries:
        return Entries(self.final, self.mark, self.temporary, tuple(self.aside))


def scan(root: Path, only: str | None = None) -> dict[str, Entries]:
    """Every content key the claim holds anything of (``only`` that one), with what it holds:
    ``_ENTRY`` names only, nothing else under ``root`` is ever looked at or touched."""
    found: dict[str, _Found] = {}
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return {}
    for name in names:
        matched = _ENTRY.fullmatch(name)
        key = matched and (matched["final"] or matched["key"])
        if not matched or not key or only not in {None, key}:
            continue
        try:
            status = os.lstat(root / name)
        except FileNotFoundError:
            continue  # gone meanwhile (another collector, a rename)
        got = found.setdefault(key, _Found())  # a lock file alone (its holder killed) too
        kind = matched["kind"]
        if matched["final"]:
            got.final = status.st_mtime if stat.S_ISDIR(status.st_mode) else None
        elif kind == "used":
            got.mark = status.st_mtime
        elif kind == "tmp-":
            got.temporary[name] = status.st_mtime
        elif kind != "lock":  # the lock file is its holders' (the last one removes it)
            got.aside.append(name)
    return {key: got.entries() for key, got in found.items()}


def collect(
    root: Path,
    named: Sequence[str],
    *,
    grace: float,
    stale: float = STALE_SECONDS,
    released: Sequence[str] = (),
    clock: Callable[[], float] = time.time,
) -> dict[str, list[str]]:
    """Release ``released``, then remove what no CR names any more (``named``: every key some
    CR on a workload mounting the claim names). For each other key on the claim, and only
    under its lock (a key staging, reused or verified right now is ``busy``, kept): its
    directory once unused for ``grace`` seconds (``young`` until then), temporary directories
    older than ``stale``. ``{"removed": [...], "young": [...], "busy": [...]}`` by key."""
    _checked([*named, *released])
    for key in released:
        release(root, key)
    removed: list[str] = []
    young: list[str] = []
    busy: list[str] = []
    keep = set(named)
    for key in sorted(set(scan(root)) - keep):
        with key_lock(root, key, wait=False) as held:
            if not held:
                busy.append(key)
                continue
            entries = scan(root, key).get(key, Entries())  # as it is now, and stays meanwhile
            decided = plan(entries, now=clock(), grace=grace, stale=stale)
            doomed = _set_aside(root, key, decided)
        _remove(doomed)
        if decided.remove_final:
            removed.append(key)
        elif entries.final is not None:
            young.append(key)
    return {"removed": removed, "young": young, "busy": busy}


def _set_aside(root: Path, key: str, decided: Plan) -> list[Path]:
    """Under the key's lock: the final directory out of its path in one rename, the mark gone
    when nothing else is left; returns what to remove once the lock is let go."""
    doomed = [root / name for name in decided.remove]
    if decided.remove_final:
        final = root / key
        aside = root / f".{key}.removing-{os.getpid()}-{time.monotonic_ns()}"
        try:
            os.rename(final, aside)
        except OSError as exc:
            raise VolumeUnusable(f"{final}: cannot remove ({exc.strerror})") from None
        doomed.append(aside)
    if decided.forget:
        _mark_path(root, key).unlink(missing_ok=True)
    return doomed


def _remove(paths: Sequence[Path]) -> None:
    """Remove each directory (a symlink planted at a final path: the link, not its target)."""
    for path in paths:
        if path.is_symlink():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


def unstage(
    root: Path, keys: Sequence[str], *, stale: float = STALE_SECONDS
) -> dict[str, list[str]]:
    """Remove ``root/<key>`` for each key now, whatever its mark (``pulumi-lora unstage``, by
    hand), waiting for its lock (never while it stages); temporary directories a killed stager
    left only when older than ``stale`` seconds: ``{"removed": [...], "absent": [...]}``.
    Raises ``SourceRefused`` for a key that is not a content key (nothing else under ``root``
    is ever touched)."""
    _checked(keys)
    removed: list[str] = []
    absent: list[str] = []
    for key in keys:
        if not root.is_dir():
            absent.append(key)
            continue
        with key_lock(root, key):
            entries = scan(root, key).get(key, Entries())
            decided = plan(entries, now=time.time(), grace=-math.inf, stale=stale)
            doomed = _set_aside(root, key, decided)
        _remove(doomed)
        (removed if decided.remove_final else absent).append(key)
    return {"removed": removed, "absent": absent}
