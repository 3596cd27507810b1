"""Checking a staged directory: every file's sha256, ``adapter_config.json``, the server's flags.

No network and no I/O library. A directory is reused only if it holds exactly its manifest's
files with their digests (`verify_staged`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pulumi_lora._staging._errors import AdapterConfigInvalid, AdapterIncompatible, DigestMismatch
from pulumi_lora._staging._source import check_file_name

__all__ = [
    "ADAPTER_CONFIG",
    "ALL_TARGET_MODULES",
    "MANIFEST",
    "SUPPORTED_TARGET_MODULES",
    "AdapterConfig",
    "FileFacts",
    "ServerLimits",
    "check_against_server",
    "check_digests",
    "hash_file",
    "manifest_text",
    "normalize_target_modules",
    "parse_adapter_config",
    "parse_manifest",
    "staged_files",
    "verify_directory",
    "verify_fetched",
    "verify_staged",
]

ADAPTER_CONFIG = "adapter_config.json"
MANIFEST = ".pulumi-lora-staged.json"
"""The staged directory's own record (a hidden name: no source file can take it)."""
MANIFEST_VERSION = 1
_SHA256_HEX = frozenset("0123456789abcdef")
BLOCK = 1 << 20
"""Bytes read at a time while hashing."""

SUPPORTED_TARGET_MODULES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "qkv_proj",
    "gate_up_proj",
    "embed_tokens",
    "lm_head",
)
"""The names SGLang's ``--lora-target-modules`` accepts, besides ``all``, in its order."""
ALL_TARGET_MODULES = "all"

# SGLang stacks q/k/v and gate/up into one module each, and knows a few embedding aliases
# (python/sglang/srt/lora/utils.py: get_normalized_target_modules).
_STACKED = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
    "vocab_emb": "embed_tokens",
    "embeddings": "embed_tokens",
    "word_embeddings": "embed_tokens",
    "output": "lm_head",
}
_ALL_LINEAR = frozenset({"qkv_proj", "o_proj", "gate_up_proj", "down_proj"})


@dataclass(frozen=True)
class FileFacts:
    """One staged file: its size and sha256."""

    size: int
    sha256: str


@dataclass(frozen=True)
class AdapterConfig:
    """What staging checks in ``adapter_config.json``."""

    rank: int
    target_modules: frozenset[str]
    """Normalized as SGLang does (``q_proj`` → ``qkv_proj``, …)."""


@dataclass(frozen=True)
class ServerLimits:
    """The target server's LoRA flags, as values (``None``: not checked)."""

    max_lora_rank: int | None = None
    """``--max-lora-rank``."""
    target_modules: tuple[str, ...] | None = None
    """``--lora-target-modules`` (``all`` allowed)."""


def normalize_target_modules(names: Iterable[str]) -> frozenset[str]:
    """SGLang's module names: the last dotted part, with q/k/v and gate/up stacked. Pure."""
    return frozenset(_STACKED.get(base, base) for base in (n.rsplit(".", 1)[-1] for n in names))


def parse_adapter_config(text: str, *, file: str = ADAPTER_CONFIG) -> AdapterConfig:
    """``peft_type`` LoRA, ``r`` a positive int, ``target_modules`` names; else
    ``AdapterConfigInvalid`` naming ``file``. Pure."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AdapterConfigInvalid(f"{file} is not JSON ({exc})", file=file) from None
    if not isinstance(config, dict):
        raise AdapterConfigInvalid(f"{file} is not a JSON object", file=file)
    peft_type = config.get("peft_type")
    if not isinstance(peft_type, str) or peft_type.upper() != "LORA":
        raise AdapterConfigInvalid(
            f"{file}: peft_type is {peft_type!r}, not 'LORA': not a LoRA adapter", file=file
        )
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise AdapterConfigInvalid(f"{file}: r is {rank!r}, not a positive integer", file=file)
    return AdapterConfig(rank=rank, target_modules=_modules(config.get("target_modules"), file))


def _modules(value: object, file: str) -> frozenset[str]:
    if value == "all-linear":
        return _ALL_LINEAR
    if isinstance(value, str) and value:
        return normalize_target_modules([value])
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return normalize_target_modules(value)
    raise AdapterConfigInvalid(
        f"{file}: target_modules is {value!r}, not a module name or a list of them", file=file
    )


def check_against_server(config: AdapterConfig, limits: ServerLimits) -> None:
    """``AdapterIncompatible`` when the adapter exceeds the server's flags. Pure."""
    if limits.max_lora_rank is not None and config.rank > limits.max_lora_rank:
        raise AdapterIncompatible(
            f"{ADAPTER_CONFIG}: rank r={config.rank} exceeds the server's "
            f"--max-lora-rank {limits.max_lora_rank}",
            file=ADAPTER_CONFIG,
        )
    if limits.target_modules is None:
        return
    allowed = (
        frozenset(SUPPORTED_TARGET_MODULES)
        if ALL_TARGET_MODULES in limits.target_modules
        else normalize_target_modules(limits.target_modules)
    )
    beyond = sorted(config.target_modules - allowed)
    if beyond:
        raise AdapterIncompatible(
            f"{ADAPTER_CONFIG}: target modules {', '.join(beyond)} are not in the server's "
            f"--lora-target-modules {' '.join(limits.target_modules)}",
            file=ADAPTER_CONFIG,
        )


def check_digests(found: Mapping[str, FileFacts], expected: Mapping[str, str]) -> None:
    """Every pinned file present with its digest. Pure.

    ``DigestMismatch`` names the first file (sorted) that is missing or differs.
    """
    for name in sorted(expected):
        facts = found.get(name)
        if facts is None:
            raise DigestMismatch(f"{name} is missing from the staged directory", file=name)
        if facts.sha256 != expected[name]:
            raise DigestMismatch(
                f"{name}: sha256 {facts.sha256} differs from the pinned {expected[name]}", file=name
            )


def hash_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> FileFacts:
    """Size and sha256 of ``path``, read in blocks (``on_bytes`` hears each block's size)."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as stream:
        while block := stream.read(BLOCK):
            digest.update(block)
            size += len(block)
            if on_bytes is not None:
                on_bytes(len(block))
    return FileFacts(size=size, sha256=digest.hexdigest())


def staged_files(directory: Path) -> list[str]:
    """Every regular file under ``directory`` as a relative POSIX path, sorted, but the manifest;
    a symlink or any other kind of entry is a ``DigestMismatch`` (plain files only)."""
    names: list[str] = []
    for current, dirs, files in os.walk(directory, followlinks=False):
        base = Path(current)
        for name in [*dirs, *files]:
            path = base / name
            relative = path.relative_to(directory).as_posix()
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise DigestMismatch(f"{relative} is not a plain file or directory", file=relative)
        names += [(base / name).relative_to(directory).as_posix() for name in files]
    return sorted(name for name in names if name != MANIFEST)


def verify_directory(
    directory: Path,
    *,
    files: Iterable[str],
    digests: Mapping[str, str],
    limits: ServerLimits | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> tuple[dict[str, FileFacts], AdapterConfig]:
    """The staged directory holds exactly ``files`` (every file, when ``files`` is empty:
    an unpinned listing), each pinned one with its digest, and a LoRA ``adapter_config.json``
    within ``limits``. Reads and hashes every file; returns each file's facts and the adapter's
    config."""
    present = staged_files(directory)
    _check_names(present, files)
    facts = {name: hash_file(directory / name, on_bytes) for name in present}
    return facts, _check_content(directory, facts, digests, limits)


def verify_fetched(
    directory: Path,
    fetched: Mapping[str, FileFacts],
    *,
    files: Iterable[str],
    digests: Mapping[str, str],
    limits: ServerLimits | None = None,
) -> tuple[dict[str, FileFacts], AdapterConfig]:
    """`verify_directory` for a directory just fetched, from the facts computed as its files
    were written (``fetched``): nothing is hashed again. Every file in the directory must be one
    fetched; ``adapter_config.json`` is read, and must still have its fetched sha256."""
    present = staged_files(directory)
    unknown = sorted(set(present) - set(fetched))
    if unknown:
        raise DigestMismatch(
            f"{unknown[0]} is in the staged directory but was not fetched", file=unknown[0]
        )
    _check_names(present, files)
    facts = {name: fetched[name] for name in present}
    return facts, _check_content(directory, facts, digests, limits)


def _check_names(present: Iterable[str], files: Iterable[str]) -> None:
    """The directory holds exactly the declared ``files`` (any, when none is declared)."""
    found, wanted = set(present), sorted(files)
    if wanted:
        extra = sorted(found - set(wanted))
        if extra:
            raise DigestMismatch(
                f"{extra[0]} is in the staged directory but not declared", file=extra[0]
            )
    missing = sorted(set(wanted) - found)
    if missing:
        raise DigestMismatch(f"{missing[0]} is missing from the staged directory", file=missing[0])


def _check_content(
    directory: Path,
    facts: Mapping[str, FileFacts],
    digests: Mapping[str, str],
    limits: ServerLimits | None,
) -> AdapterConfig:
    """Every pinned digest, and a LoRA ``adapter_config.json`` (the bytes hashed in
    ``facts``) within ``limits``."""
    check_digests(facts, digests)
    if ADAPTER_CONFIG not in facts:
        raise AdapterConfigInvalid(f"{ADAPTER_CONFIG} is missing", file=ADAPTER_CONFIG)
    data = (directory / ADAPTER_CONFIG).read_bytes()
    if hashlib.sha256(data).hexdigest() != facts[ADAPTER_CONFIG].sha256:
        raise DigestMismatch(
            f"{ADAPTER_CONFIG} changed in the staged directory while it was checked",
            file=ADAPTER_CONFIG,
        )
    config = parse_adapter_config(data.decode("utf-8", errors="replace"))
    if limits is not None:
        check_against_server(config, limits)
    return config


def manifest_text(key: str, source: str, facts: Mapping[str, FileFacts]) -> str:
    """The manifest of a staged directory: its key, its source and every file's facts. Pure."""
    document = {
        "version": MANIFEST_VERSION,
        "key": key,
        "source": source,
        "files": {
            name: {"bytes": facts[name].size, "sha256": facts[name].sha256}
            for name in sorted(facts)
        },
    }
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def parse_manifest(text: str, *, key: str) -> dict[str, FileFacts]:
    """The files a manifest records for the directory ``key``; ``DigestMismatch`` when it is
    not one (not JSON, another version or key, a malformed entry). Pure."""

    def invalid(why: str) -> DigestMismatch:
        return DigestMismatch(f"{MANIFEST} {why}", file=MANIFEST)

    try:
        document = json.loads(text)
    except ValueError:
        raise invalid("is not JSON") from None
    if not isinstance(document, dict) or document.get("version") != MANIFEST_VERSION:
        raise invalid(f"is not a version {MANIFEST_VERSION} manifest")
    if document.get("key") != key:
        raise invalid(f"names the key {document.get('key')!r}, not {key!r}")
    files = document.get("files")
    if not isinstance(files, dict) or not files:
        raise invalid("lists no file")
    recorded: dict[str, FileFacts] = {}
    for name, entry in files.items():
        size = entry.get("bytes") if isinstance(entry, dict) else None
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        if (
            not isinstance(size, int)
            or isinstance(size, bool)
            or size < 0
            or not isinstance(sha, str)
            or len(sha) != 64
            or not set(sha) <= _SHA256_HEX
        ):
            raise invalid(f"has a malformed entry for {name!r}")
        try:
            recorded[check_file_name(name)] = FileFacts(size=size, sha256=sha)
        except ValueError:
            raise invalid(f"lists {name!r}, not a plain relative path") from None
    return recorded


def verify_staged(
    directory: Path,
    *,
    key: str,
    files: Iterable[str],
    digests: Mapping[str, str],
    limits: ServerLimits | None = None,
) -> tuple[dict[str, FileFacts], AdapterConfig]:
    """A directory staged before, checked before it is reused: its manifest (`MANIFEST`) agrees
    with the request (the declared ``files``, the pinned ``digests``), and the directory holds
    exactly the recorded files (none missing, none extra: an extra weights file would be loaded
    too) with the recorded sha256, and a LoRA ``adapter_config.json`` within ``limits``.
    ``DigestMismatch`` (or ``AdapterConfigInvalid``) otherwise."""
    path = directory / MANIFEST
    if path.is_symlink() or not path.is_file():
        raise DigestMismatch(
            f"{MANIFEST} is missing: the directory's content was never recorded", file=MANIFEST
        )
    recorded = parse_manifest(path.read_text(encoding="utf-8", errors="replace"), key=key)
    wanted = sorted(files)
    if wanted and wanted != sorted(recorded):
        raise DigestMismatch(f"{MANIFEST} records other files than declared", file=MANIFEST)
    check_digests(recorded, digests)
    return verify_directory(
        directory,
        files=sorted(recorded),
        digests={name: entry.sha256 for name, entry in recorded.items()},
        limits=limits,
    )
