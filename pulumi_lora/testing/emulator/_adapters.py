"""Reading adapter directories for real, and SGLang's names for LoRA target modules.

SGLang reads ``adapter_config.json`` with ``LoRAConfig(path)``: a path that is not a directory is
taken for a Hugging Face Hub repo id and downloaded (which fails offline, as the emulator always
is); a directory without the file fails with Python's ``FileNotFoundError`` text; one without a
weights file (``*.safetensors``, ``*.bin``, ``*.pt``) fails once the config fits. The messages
below are those texts, naming the path as the server sees it (the container path, even when
``--emulator-fs-root`` maps it to a host directory).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from pulumi_lora._staging._verify import (  # SGLang's module names, kept once
    _ALL_LINEAR,
    ALL_TARGET_MODULES,
    normalize_target_modules,
)
from pulumi_lora.testing.emulator._state import AdapterReadError, AdapterSpec

__all__ = [
    "ALL_TARGET_MODULES",
    "normalize_target_modules",
    "read_adapter",
]

_REPO_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")
_CONFIG_FILE = "adapter_config.json"
_WEIGHTS = ("*.safetensors", "*.bin", "*.pt")
"""The weight files SGLang's loader looks for in an adapter's directory (``model_loader``)."""


def read_adapter(
    path: str, fs_root: Path | None = None, mounts: Sequence[tuple[str, Path]] = ()
) -> AdapterSpec:
    """The adapter at ``path`` (in the volume mounted there, else under ``fs_root`` if given);
    ``AdapterReadError`` if unusable."""
    directory = _host_path(path, fs_root, mounts)
    if not directory.is_dir():
        raise AdapterReadError(_hub_error(path))
    config_file = directory / _CONFIG_FILE
    try:
        raw = config_file.read_text(encoding="utf-8")
    except OSError as exc:
        shown = os.path.join(path, _CONFIG_FILE)
        raise AdapterReadError(f"[Errno {exc.errno}] {exc.strerror}: {shown!r}") from exc
    spec = _parse_config(raw)
    if any(next(directory.glob(pattern), None) for pattern in _WEIGHTS):
        return spec
    missing = f"Cannot find any model weights with `{path}`"
    return AdapterSpec(rank=spec.rank, target_modules=spec.target_modules, missing_weights=missing)


def _host_path(path: str, fs_root: Path | None, mounts: Sequence[tuple[str, Path]] = ()) -> Path:
    """Where ``path`` lives on this machine: in the volume mounted at the longest prefix of it,
    else under ``fs_root`` like a volume mount, if given."""
    for mount_path, host in sorted(mounts, key=lambda m: len(m[0]), reverse=True):
        inside = PurePosixPath(path)
        if inside == PurePosixPath(mount_path) or PurePosixPath(mount_path) in inside.parents:
            return _host_path(str(inside.relative_to(mount_path)), host)
    if fs_root is None:
        return Path(path)
    relative = PurePosixPath(path.lstrip("/"))
    if ".." in relative.parts:
        return fs_root / "\0"  # never a directory: a mount cannot be escaped
    return fs_root.joinpath(*relative.parts)


def _hub_error(path: str) -> str:
    """What ``huggingface_hub`` says offline for a path that is not a local directory."""
    if _REPO_ID.match(path) and "--" not in path and ".." not in path and len(path) <= 96:
        return (
            "An error happened while trying to locate the files on the Hub and we cannot find "
            "the appropriate snapshot folder for the specified revision on the local disk. "
            "Please check your internet connection and try again."
        )
    return (
        "Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
        f"'{path}'. Use `repo_type` argument if needed."
    )


def _parse_config(raw: str) -> AdapterSpec:
    """``r`` and ``target_modules`` of an ``adapter_config.json``, failing as SGLang would."""
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise AdapterReadError(str(exc)) from exc
    if not isinstance(config, dict):
        raise AdapterReadError(f"'{type(config).__name__}' object is not subscriptable")
    for key in ("r", "target_modules"):
        if key not in config:
            raise AdapterReadError(repr(key))
    rank, modules = config["r"], config["target_modules"]
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise AdapterReadError(f"Invalid LoRA rank in {_CONFIG_FILE}: {rank!r}")
    return AdapterSpec(rank=rank, target_modules=_modules_of(modules))


def _modules_of(modules: object) -> frozenset[str]:
    """``target_modules`` may be a list of names or PEFT's string shorthand."""
    if modules == "all-linear":
        return _ALL_LINEAR
    if isinstance(modules, str):
        return normalize_target_modules([modules])
    if isinstance(modules, list) and all(isinstance(item, str) for item in modules):
        return normalize_target_modules(modules)
    raise AdapterReadError(f"Invalid target_modules in {_CONFIG_FILE}: {modules!r}")
