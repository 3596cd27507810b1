"""Staged directories on the claim, by content key: verified in place, or removed.

A directory is renamed to a hidden name before removal, so no pod ever sees half of one.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from pulumi_lora._staging._errors import (
    AdapterConfigInvalid,
    DigestMismatch,
    SourceRefused,
    VolumeUnusable,
)
from pulumi_lora._staging._source import KEY_HEX
from pulumi_lora._staging._verify import verify_staged

__all__ = ["unstage", "verify_keys"]

_KEY = re.compile(rf"^[0-9a-f]{{{KEY_HEX}}}$")


def _checked(keys: Sequence[str]) -> None:
    bad = [key for key in keys if _KEY.fullmatch(key) is None]
    if bad:
        raise SourceRefused(f"not content keys ({KEY_HEX} hex): {', '.join(map(repr, bad))}")


def verify_keys(root: Path, keys: Sequence[str]) -> dict[str, str]:
    """Each ``root/<key>`` checked against its manifest: key → ``"verified"``, ``"missing"``,
    or what is wrong (a file changed, missing or extra, as ``verify_staged`` says). Raises
    ``SourceRefused`` for a key that is not a content key."""
    _checked(keys)
    found: dict[str, str] = {}
    for key in keys:
        directory = root / key
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


def unstage(root: Path, keys: Sequence[str]) -> dict[str, list[str]]:
    """Remove ``root/<key>`` for each key, and ``root/.<key>.tmp-*`` left by a killed stager:
    ``{"removed": [...], "absent": [...]}``. Raises ``SourceRefused`` for a key that is not a
    content key (nothing else under ``root`` is ever touched)."""
    _checked(keys)
    removed: list[str] = []
    absent: list[str] = []
    for key in keys:
        final = root / key
        leftovers = list(root.glob(f".{key}.tmp-*"))
        if final.is_dir():
            aside = root / f".{key}.removing-{os.getpid()}-{time.monotonic_ns()}"
            try:
                os.rename(final, aside)
            except OSError as exc:
                raise VolumeUnusable(f"{final}: cannot remove ({exc.strerror})") from None
            leftovers.append(aside)
            removed.append(key)
        else:
            absent.append(key)
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
    return {"removed": removed, "absent": absent}
