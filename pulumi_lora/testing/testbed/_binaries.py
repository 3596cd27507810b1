"""Finding the real etcd, kube-apiserver, kube-controller-manager and kubectl binaries, and
asking them their versions.

The testbed never mocks these programs: they are built from source by ``tools/provision.py`` into
the project's cache. Lookup order, first hit wins:

1. ``$PULUMI_LORA_BIN_DIR``;
2. ``${PULUMI_LORA_CACHE:-~/.cache/pulumi-lora}/bin``;
3. ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pulumi_lora.testing._cache import PROVISION_COMMAND, cache_dir

__all__ = [
    "BINARIES",
    "PROVISION_COMMAND",
    "Binary",
    "BinaryNotFoundError",
    "cache_dir",
    "find_binary",
    "search_dirs",
]

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
"""The programs a testbed runs, in start order."""


_VERSION_TIMEOUT = 30.0


class BinaryNotFoundError(FileNotFoundError):
    """A program the testbed needs is neither provisioned nor on PATH."""

    def __init__(self, name: str, searched: list[Path]) -> None:
        self.name = name
        self.searched = searched
        places = ", ".join(str(p) for p in searched) or "(no directory)"
        super().__init__(
            f"{name} not found (searched {places}, then PATH); "
            f"build it with `{PROVISION_COMMAND}` from the pulumi-lora repository"
        )


@dataclass(frozen=True)
class Binary:
    """One located program and the version it reports."""

    name: str
    """Program name (``etcd``, ``kube-apiserver``, ``kubectl``)."""
    path: Path
    """Absolute path of the executable that was found."""
    version: str
    """The version string the program itself reports (e.g. ``v1.36.3``, ``3.6.16``)."""


def search_dirs() -> list[Path]:
    """The directories searched before PATH, in order."""
    dirs = []
    explicit = os.environ.get("PULUMI_LORA_BIN_DIR")
    if explicit:
        dirs.append(Path(explicit).expanduser())
    dirs.append(cache_dir() / "bin")
    return dirs


def _locate(name: str) -> Path:
    dirs = search_dirs()
    for directory in dirs:
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.resolve()
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path).resolve()
    raise BinaryNotFoundError(name, dirs)


def _version(name: str, path: Path) -> str:
    """Ask the program for its version (etcd, kube-apiserver, kube-controller-manager: the first
    line; kubectl: JSON)."""
    if name == "kubectl":
        argv = [str(path), "version", "--client", "-o", "json"]
    else:
        argv = [str(path), "--version"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=_VERSION_TIMEOUT, check=False
    )
    out = done.stdout.strip()
    if name == "kubectl":
        try:
            version: str = json.loads(out)["clientVersion"]["gitVersion"]
        except (ValueError, KeyError, TypeError):
            return out or done.stderr.strip()
        return version
    first = out.splitlines()[0] if out else done.stderr.strip()
    # "etcd Version: 3.6.16" / "Kubernetes v1.36.3"
    return first.split()[-1] if first else "unknown"


_found: dict[tuple[str, tuple[Path, ...], str], Binary] = {}


def find_binary(name: str) -> Binary:
    """Locate ``name`` and read its version; raises :class:`BinaryNotFoundError` if absent.

    Results are memoised per lookup path, so a test session asks each program once.
    """
    key = (name, tuple(search_dirs()), os.environ.get("PATH", ""))
    cached = _found.get(key)
    if cached is not None and cached.path.exists():
        return cached
    path = _locate(name)
    binary = Binary(name=name, path=path, version=_version(name, path))
    _found[key] = binary
    return binary
