"""Checking staged files: digests, adapter_config.json, the server's LoRA flags, in words."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pulumi_lora._staging._errors import AdapterConfigInvalid, AdapterIncompatible, DigestMismatch
from pulumi_lora._staging._verify import (
    MANIFEST,
    AdapterConfig,
    FileFacts,
    ServerLimits,
    check_against_server,
    hash_file,
    manifest_text,
    parse_adapter_config,
    parse_manifest,
    verify_directory,
    verify_fetched,
    verify_staged,
)

CONFIG = {"peft_type": "LORA", "r": 16, "target_modules": ["q_proj", "v_proj", "o_proj"]}


def write_adapter(directory: Path, weights: bytes = b"w" * 3000) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps(CONFIG))
    (directory / "adapter_model.safetensors").write_bytes(weights)
    return {
        name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
        for name in ("adapter_config.json", "adapter_model.safetensors")
    }


def test_hashing_streams_and_counts_every_byte(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # a little over 2 MiB: three blocks
    (tmp_path / "f").write_bytes(data)
    seen: list[int] = []
    facts = hash_file(tmp_path / "f", seen.append)
    assert facts.size == len(data) and facts.sha256 == hashlib.sha256(data).hexdigest()
    assert seen == [1 << 20, 1 << 20, len(data) - (2 << 20)]


def test_a_verified_directory_reports_each_file_and_the_config(tmp_path: Path) -> None:
    digests = write_adapter(tmp_path / "a")
    facts, config = verify_directory(tmp_path / "a", files=sorted(digests), digests=digests)
    assert {name: f.sha256 for name, f in facts.items()} == digests
    assert config == AdapterConfig(rank=16, target_modules=frozenset({"qkv_proj", "o_proj"}))


def test_a_flipped_byte_names_the_file_and_both_digests(tmp_path: Path) -> None:
    digests = write_adapter(tmp_path / "a")
    weights = tmp_path / "a" / "adapter_model.safetensors"
    flipped = bytearray(weights.read_bytes())
    flipped[1234] ^= 0x01
    weights.write_bytes(bytes(flipped))
    with pytest.raises(DigestMismatch) as mismatch:
        verify_directory(tmp_path / "a", files=sorted(digests), digests=digests)
    actual = hashlib.sha256(flipped).hexdigest()
    assert mismatch.value.file == "adapter_model.safetensors"
    assert str(mismatch.value) == (
        f"adapter_model.safetensors: sha256 {actual} differs from the pinned "
        f"{digests['adapter_model.safetensors']}: the source serves other bytes than the digests "
        "pin: check the digest and the source's revision; nothing was put in place"
    )


def test_a_missing_or_an_undeclared_file_is_a_mismatch(tmp_path: Path) -> None:
    digests = write_adapter(tmp_path / "a")
    (tmp_path / "a" / "extra.bin").write_bytes(b"x")
    with pytest.raises(
        DigestMismatch, match=r"extra\.bin is in the staged directory but not declared"
    ):
        verify_directory(tmp_path / "a", files=sorted(digests), digests=digests)
    (tmp_path / "a" / "extra.bin").unlink()
    (tmp_path / "a" / "adapter_model.safetensors").unlink()
    with pytest.raises(DigestMismatch, match=r"adapter_model\.safetensors is missing"):
        verify_directory(tmp_path / "a", files=sorted(digests), digests=digests)


def fetched_facts(directory: Path) -> dict[str, FileFacts]:
    """What the writer computed for each file of ``directory`` (here: from its bytes)."""
    return {path.name: hash_file(path) for path in directory.iterdir()}


def test_a_fetched_directory_is_checked_from_its_facts_not_read_again(tmp_path: Path) -> None:
    """The weights changed on disk after they were written and hashed: not read again, the
    facts computed while writing are what is checked and recorded."""
    digests = write_adapter(tmp_path / "a")
    facts = fetched_facts(tmp_path / "a")
    (tmp_path / "a" / "adapter_model.safetensors").write_bytes(b"changed after the write")
    found, config = verify_fetched(tmp_path / "a", facts, files=sorted(digests), digests=digests)
    assert found == facts and config.rank == 16


def test_a_fetched_directory_holds_only_what_was_fetched(tmp_path: Path) -> None:
    digests = write_adapter(tmp_path / "a")
    facts = fetched_facts(tmp_path / "a")
    (tmp_path / "a" / "planted.bin").write_bytes(b"x")
    with pytest.raises(DigestMismatch) as planted:
        verify_fetched(tmp_path / "a", facts, files=(), digests=digests)
    assert planted.value.detail == "planted.bin is in the staged directory but was not fetched"
    (tmp_path / "a" / "planted.bin").unlink()
    (tmp_path / "a" / "adapter_model.safetensors").unlink()
    with pytest.raises(DigestMismatch, match=r"adapter_model\.safetensors is missing"):
        verify_fetched(tmp_path / "a", facts, files=sorted(digests), digests=digests)


def test_the_config_checked_is_the_config_hashed(tmp_path: Path) -> None:
    digests = write_adapter(tmp_path / "a")
    facts = fetched_facts(tmp_path / "a")
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps({**CONFIG, "r": 4}))
    with pytest.raises(
        DigestMismatch, match=r"adapter_config\.json changed in the staged directory"
    ):
        verify_fetched(tmp_path / "a", facts, files=sorted(digests), digests=digests)


def test_a_symlink_is_refused(tmp_path: Path) -> None:
    digests = write_adapter(tmp_path / "a")
    (tmp_path / "a" / "link").symlink_to("/etc/hostname")
    with pytest.raises(DigestMismatch, match="link is not a plain file or directory"):
        verify_directory(tmp_path / "a", files=sorted(digests), digests=digests)


def test_a_directory_without_adapter_config_is_not_an_adapter(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "w.bin").write_bytes(b"w")
    with pytest.raises(AdapterConfigInvalid) as invalid:
        verify_directory(tmp_path / "a", files=[], digests={})
    assert str(invalid.value) == (
        "adapter_config.json is missing: stage a PEFT LoRA adapter directory: "
        "adapter_config.json with peft_type LORA, r and target_modules"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{nope", "adapter_config.json is not JSON (Expecting property name"),
        ("[1]", "adapter_config.json is not a JSON object"),
        ('{"peft_type": "IA3", "r": 8}', "peft_type is 'IA3', not 'LORA': not a LoRA adapter"),
        ('{"peft_type": "LORA", "r": "8"}', "r is '8', not a positive integer"),
        ('{"peft_type": "LORA", "r": true}', "r is True, not a positive integer"),
        ('{"peft_type": "LORA", "r": 8}', "target_modules is None, not a module name"),
        ('{"peft_type": "LORA", "r": 8, "target_modules": []}', "target_modules is []"),
    ],
)
def test_adapter_config_errors_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(AdapterConfigInvalid) as invalid:
        parse_adapter_config(text)
    assert words in str(invalid.value) and invalid.value.file == "adapter_config.json"


def test_peft_shorthands_normalize_as_sglang_does() -> None:
    def modules(value: object) -> frozenset[str]:
        text = json.dumps({"peft_type": "lora", "r": 4, "target_modules": value})
        return parse_adapter_config(text).target_modules

    assert modules("all-linear") == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    assert modules("model.layers.0.self_attn.k_proj") == {"qkv_proj"}
    assert modules(["gate_proj", "up_proj", "down_proj"]) == {"gate_up_proj", "down_proj"}


def test_server_flags_bound_rank_and_modules() -> None:
    config = AdapterConfig(rank=32, target_modules=frozenset({"qkv_proj", "o_proj"}))
    check_against_server(config, ServerLimits(max_lora_rank=32, target_modules=("all",)))
    check_against_server(config, ServerLimits(target_modules=("q_proj", "k_proj", "o_proj")))
    with pytest.raises(AdapterIncompatible) as rank:
        check_against_server(config, ServerLimits(max_lora_rank=16))
    assert str(rank.value).startswith(
        "adapter_config.json: rank r=32 exceeds the server's --max-lora-rank 16: raise "
        "--max-lora-rank or widen --lora-target-modules"
    )
    with pytest.raises(AdapterIncompatible) as modules:
        check_against_server(config, ServerLimits(target_modules=("q_proj", "v_proj")))
    assert modules.value.detail == (
        "adapter_config.json: target modules o_proj are not in the server's "
        "--lora-target-modules q_proj v_proj"
    )


def record(directory: Path, key: str = "k" * 16) -> dict[str, str]:
    """An adapter directory with its manifest, as staging leaves it; returns its digests."""
    digests = write_adapter(directory)
    facts, _config = verify_directory(directory, files=sorted(digests), digests=digests)
    (directory / MANIFEST).write_text(manifest_text(key, "hf://acme/x@" + "1" * 40, facts))
    return digests


def test_a_recorded_directory_verifies_without_digests(tmp_path: Path) -> None:
    digests = record(tmp_path / "a")
    facts, config = verify_staged(tmp_path / "a", key="k" * 16, files=(), digests={})
    assert {name: f.sha256 for name, f in facts.items()} == digests  # the manifest is no file
    assert config.rank == 16


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("no manifest", f"{MANIFEST} is missing"),
        ("flipped", "adapter_model.safetensors: sha256"),
        ("extra", "extra.bin is in the staged directory but not declared"),
        ("missing", "adapter_model.safetensors is missing from the staged directory"),
        ("other key", f"{MANIFEST} names the key 'kkkkkkkkkkkkkkkk', not 'other'"),
        ("not json", f"{MANIFEST} is not JSON"),
        ("bad entry", f"{MANIFEST} has a malformed entry for 'adapter_config.json'"),
        ("other pin", "adapter_config.json: sha256"),
    ],
)
def test_a_recorded_directory_that_changed_is_a_mismatch(
    tmp_path: Path, change: str, words: str
) -> None:
    directory = tmp_path / "a"
    record(directory)
    manifest = directory / MANIFEST
    key, pinned = "k" * 16, {}
    if change == "no manifest":
        manifest.unlink()
    elif change == "flipped":
        (directory / "adapter_model.safetensors").write_bytes(b"w" * 2999 + b"x")
    elif change == "extra":
        (directory / "extra.bin").write_bytes(b"x")
    elif change == "missing":
        (directory / "adapter_model.safetensors").unlink()
    elif change == "other key":
        key = "other"
    elif change == "not json":
        manifest.write_text("{")
    elif change == "bad entry":
        document = json.loads(manifest.read_text())
        document["files"]["adapter_config.json"]["sha256"] = "nothex"
        manifest.write_text(json.dumps(document))
    else:  # the request pins another digest than the one recorded
        pinned = {"adapter_config.json": "0" * 64}
    with pytest.raises(DigestMismatch) as mismatch:
        verify_staged(directory, key=key, files=(), digests=pinned)
    assert words in str(mismatch.value)


def test_a_manifest_lists_only_plain_relative_names() -> None:
    text = json.dumps(
        {"version": 1, "key": "k", "files": {"../x": {"bytes": 1, "sha256": "a" * 64}}}
    )
    with pytest.raises(DigestMismatch, match=r"lists '\.\./x', not a plain relative path"):
        parse_manifest(text, key="k")
