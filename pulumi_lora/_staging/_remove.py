"""Removing staged directories no CR and no pod names any more (``pulumi-lora unstage``).

The provider decides what is unused (it sees the CRs and the pods); the cleanup Job runs this
on the claim. A directory leaves its final path in one rename (to a hidden name), then goes, so
no pod ever sees half of it; temporary directories a killed stager left for the same key go too.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from pulumi_lora._staging._errors import SourceRefused, VolumeUnusable
from pulumi_lora._staging._source import KEY_HEX

__all__ = ["unstage"]

_KEY = re.compile(rf"^[0-9a-f]{{{KEY_HEX}}}$")


def unstage(root: Path, keys: Sequence[str]) -> dict[str, list[str]]:
    """Remove ``root/<key>`` for each key, and ``root/.<key>.tmp-*`` left by a killed stager:
    ``{"removed": [...], "absent": [...]}``. Raises ``SourceRefused`` for a key that is not a
    content key (nothing else under ``root`` is ever touched)."""
    bad = [key for key in keys if _KEY.fullmatch(key) is None]
    if bad:
        raise SourceRefused(f"not content keys ({KEY_HEX} hex): {', '.join(map(repr, bad))}")
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
