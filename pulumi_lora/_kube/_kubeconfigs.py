"""``KUBECONFIG``'s files merged as kubectl merges them.

The first definition of each name wins; missing files are skipped; relative paths resolve
against their own file's folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

_FILE_FIELDS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}
"""Per section, the fields of an entry that name a file (relative to its kubeconfig)."""
_SECTIONS = {"clusters": "cluster", "users": "user", "contexts": "context"}


def kubeconfig_files(value: str) -> list[Path]:
    """Pure: the files a ``KUBECONFIG`` value lists, in order, empty entries and repeats
    dropped (kubectl's rule)."""
    seen: list[Path] = []
    for part in value.split(os.pathsep):
        if part and (path := Path(part).expanduser()) not in seen:
            seen.append(path)
    return seen


def merge(documents: Sequence[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """Pure: one kubeconfig from ``(file, its parsed content)`` in ``KUBECONFIG``'s order."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    for section in _SECTIONS:
        merged[section] = []
    for path, document in documents:
        if not merged.get("current-context") and document.get("current-context"):
            merged["current-context"] = document["current-context"]
        for section, body in _SECTIONS.items():
            names = {entry.get("name") for entry in merged[section]}
            for entry in document.get(section) or ():
                if isinstance(entry, Mapping) and entry.get("name") not in names:
                    names.add(entry.get("name"))
                    merged[section].append(_absolute(section, body, entry, path.parent))
    return merged


def _absolute(section: str, body: str, entry: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """Pure: ``entry`` with its file references made absolute against ``folder``."""
    inner = dict(entry.get(body) or {})
    for name in _FILE_FIELDS.get(section, ()):
        if isinstance(value := inner.get(name), str) and value and not Path(value).is_absolute():
            inner[name] = str(folder / value)
    plugin = inner.get("exec")
    if isinstance(plugin, Mapping):
        command = plugin.get("command")
        if isinstance(command, str) and "/" in command and not Path(command).is_absolute():
            inner["exec"] = {**plugin, "command": str(folder / command)}
    return {**entry, body: inner}


def load_merged(value: str) -> tuple[dict[str, Any], Path | None]:
    """The merged kubeconfig of ``KUBECONFIG=value`` and the first file read (for what the
    merge could not make absolute); a listed file that does not exist is skipped."""
    documents: list[tuple[Path, Mapping[str, Any]]] = []
    for path in kubeconfig_files(value):
        if not path.is_file():
            continue
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(document, Mapping):
            raise ValueError(f"{path} is not a kubeconfig (a YAML mapping)")
        documents.append((path, document))
    if not documents:
        raise FileNotFoundError(f"none of the files KUBECONFIG lists exists: {value}")
    return merge(documents), documents[0][0]
