"""Reading adapter directories for real, and SGLang's names for LoRA target modules.

SGLang reads ``adapter_config.json`` with ``LoRAConfig(path)``: a path that is not a directory is
taken for a Hugging Face Hub repo id and downloaded (which fails offline, as the emulator always
is); a directory without the file fails with Python's ``FileNotFoundError`` text; one without a
weights file (``*.safetensors``, ``*.bin``, ``*.pt``) fails once the config fits. The messages
below are those texts, naming the path as the server sees it (the container path, even when
``--emulator-fs-root`` maps it to a host directory).

SGLang loads weights that are NaN or infinite without a word, and every generation through them
then computes NaN logits; the floating-point tensors of ``*.safetensors`` files are read for that
(``AdapterSpec.finite``). Other weight formats are taken as finite.
"""

from __future__ import annotations

import json
import os
import re
import struct
import sys
from array import array
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
        finite = all(_finite_weights(f.read_bytes()) for f in directory.glob("*.safetensors"))
        return spec if finite else AdapterSpec(spec.rank, spec.target_modules, finite=False)
    missing = f"Cannot find any model weights with `{path}`"
    return AdapterSpec(rank=spec.rank, target_modules=spec.target_modules, missing_weights=missing)


#: Bytes per element of safetensors' floating-point dtypes, and the exponent's bits in each
#: element's top 16 bits: all of them set is NaN or ±Inf (IEEE 754).
_FLOATS = {"F64": (8, 0x7FF0), "F32": (4, 0x7F80), "F16": (2, 0x7C00), "BF16": (2, 0x7F80)}


def _finite_weights(raw: bytes) -> bool:
    """Whether every floating-point tensor of a safetensors file is finite (a file that is not
    one counts as finite: the emulator reads weights only for this)."""
    try:
        (size,) = struct.unpack_from("<Q", raw)
        header = json.loads(raw[8 : 8 + size])
        data = memoryview(raw)[8 + size :]
        tensors = [
            (_FLOATS[info["dtype"]], data[info["data_offsets"][0] : info["data_offsets"][1]])
            for key, info in header.items()
            if key != "__metadata__" and info["dtype"] in _FLOATS
        ]
    except (struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return True
    return all(_finite(tensor, width, mask) for (width, mask), tensor in tensors)


def _finite(tensor: memoryview, width: int, mask: int) -> bool:
    """Whether no little-endian element of ``tensor`` has every exponent bit set.

    Each element's top byte is looked at first, at C speed: real weights never have the
    exponent's high bits all set there (``0x7F`` or ``0xFF`` for F32), so only an adapter
    broken on purpose costs the exact check.
    """
    top = bytes(tensor[width - 1 :: width])
    if not top.translate(None, _NOT_CANDIDATE[mask >> 8]):
        return True
    halves = array("H", bytes(tensor[: len(tensor) - len(tensor) % width]))
    if sys.byteorder == "big":
        halves.byteswap()
    return all(h & mask != mask for h in halves[width // 2 - 1 :: width // 2])


#: For each exponent's top byte, every byte value that lacks one of its bits (deleted by the
#: fast path: whatever remains may be NaN or infinite).
_NOT_CANDIDATE = {
    high: bytes(b for b in range(256) if b & high != high)
    for high in {mask >> 8 for _, mask in _FLOATS.values()}
}


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
