"""Staged directories on the claim: verified in place (`pulumi-lora verify-staged`) and removed
in one rename (`pulumi-lora unstage`), nothing else touched."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pulumi_lora._commands._stage import unstage_command
from pulumi_lora._staging import _fetch
from pulumi_lora._staging._claim import STALE_MARGIN, STALE_SECONDS, unstage, verify_keys
from pulumi_lora._staging._errors import SourceRefused
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import parse_source
from pulumi_lora._staging._transfer import DEFAULT_DEADLINE
from pulumi_lora.testing.hub import PlayedHub

from .conftest import Adapter

WEIGHTS = "adapter_model.safetensors"

KEY, OTHER = "0123456789abcdef", "fedcba9876543210"


def staged(root: Path, name: str) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text("{}")
    (directory / "adapter_config.json").chmod(0o444)
    return directory


def aged(path: Path, seconds: float) -> Path:
    when = time.time() - seconds
    os.utime(path, (when, when))
    return path


def test_the_named_directory_and_its_dead_leftovers_go_and_nothing_else(tmp_path: Path) -> None:
    staged(tmp_path, KEY)
    aged(staged(tmp_path, f".{KEY}.tmp-abc"), 2 * STALE_SECONDS)  # a killed stager's
    staged(tmp_path, OTHER)
    assert unstage(tmp_path, [KEY, "1111111111111111"]) == {
        "removed": [KEY],
        "absent": ["1111111111111111"],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == [OTHER]


def test_unstage_never_removes_a_live_staging_of_another_stager(tmp_path: Path) -> None:
    """Issue 53's reproduction: ``unstage(root, [key])`` removed a live
    ``.<key>.tmp-inprogress``. A temporary directory goes only once older than the stagers'
    deadline and a margin (``STALE_SECONDS`` by default)."""
    staged(tmp_path, KEY)
    live = staged(tmp_path, f".{KEY}.tmp-inprogress")
    assert unstage(tmp_path, [KEY]) == {"removed": [KEY], "absent": []}
    assert live.is_dir() and not (tmp_path / KEY).exists()
    assert STALE_SECONDS == DEFAULT_DEADLINE + STALE_MARGIN  # stage-serve's default --deadline


def test_a_concurrent_stagers_complete_directory_is_kept_not_replaced(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another stager (one that does not take the key's lock: an older image, a volume without
    ``flock``) renames the same content into place while this one fetches: this staging keeps
    that directory, verified again, and discards its own (issue 53)."""
    commit = hub.publish("acme/raced", adapter.files, lfs=frozenset({WEIGHTS}))
    request = parse_source(f"hf://acme/raced@{commit}")
    env = {"HF_ENDPOINT": hub.endpoint}
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    theirs = Path(stage(request, elsewhere, env=env).path)
    fetch_files = _fetch.fetch_files
    installed: dict[str, int] = {}

    def racing(*args: Any) -> Any:
        fetched = fetch_files(*args)
        os.rename(theirs, root / theirs.name)  # theirs lands first, complete and verified
        installed["inode"] = (root / theirs.name).stat().st_ino
        return fetched

    monkeypatch.setattr(_fetch, "fetch_files", racing)
    result = stage(request, root, env=env)
    assert Path(result.path).stat().st_ino == installed["inode"]  # theirs, kept in place
    assert verify_keys(root, [result.key]) == {result.key: "verified"}
    hidden = sorted(p.name for p in root.iterdir() if p.name.startswith("."))
    assert hidden == [f".{result.key}.used"]  # its in-use mark; nothing partial or aside


def test_anything_but_a_content_key_is_refused(tmp_path: Path) -> None:
    staged(tmp_path, "models")
    for bad in ("models", "../x", ".", KEY + "0"):
        with pytest.raises(SourceRefused):
            unstage(tmp_path, [bad])
    assert (tmp_path / "models").is_dir()


def test_the_command_reports_in_the_termination_log(tmp_path: Path) -> None:
    root, log = tmp_path / "root", tmp_path / "termination-log"
    staged(root, KEY)
    log.write_text("")
    done = CliRunner().invoke(
        unstage_command, [KEY, "--root", str(root), "--termination-log", str(log)]
    )
    assert done.exit_code == 0, done.output
    assert json.loads(log.read_text()) == {"removed": [KEY], "absent": []}
    failed = CliRunner().invoke(
        unstage_command, ["nope", "--root", str(root), "--termination-log", str(log)]
    )
    assert failed.exit_code == 1
    assert json.loads(log.read_text())["reason"] == "InvalidSource"


def test_a_staged_directory_is_verified_against_its_manifest_in_place(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = hub.publish("acme/verified", adapter.files, lfs=frozenset({WEIGHTS}))
    result = stage(
        parse_source(f"hf://acme/verified@{commit}"), tmp_path, env={"HF_ENDPOINT": hub.endpoint}
    )
    key = result.key
    assert verify_keys(tmp_path, [key, OTHER]) == {key: "verified", OTHER: "missing"}
    weights = tmp_path / key / WEIGHTS
    weights.chmod(0o644)
    weights.write_bytes(b"changed")
    assert WEIGHTS in verify_keys(tmp_path, [key])[key]
    staged(tmp_path, KEY)  # a directory no stager recorded
    assert "never recorded" in verify_keys(tmp_path, [KEY])[KEY]
