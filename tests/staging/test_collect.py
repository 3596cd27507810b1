"""The collection of staged directories on a claim (issue 53): each key's lock, its in-use mark
and the grace period; a live staging, another stager's complete directory and anything but a
content key are never removed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from pulumi_lora._staging._claim import (
    Entries,
    collect,
    key_lock,
    plan,
    release,
)
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import parse_source
from pulumi_lora.testing.hub import PlayedHub

from .conftest import Adapter

KEY, OTHER, THIRD = "0123456789abcdef", "fedcba9876543210", "00000000000000aa"
HOUR = 3600.0
LFS = frozenset({"adapter_model.safetensors"})


def staged(root: Path, name: str, age: float = 0.0) -> Path:
    """A directory ``root/name`` last changed ``age`` seconds ago."""
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text("{}")
    (directory / "adapter_config.json").chmod(0o444)
    aged(directory, age)
    return directory


def aged(path: Path, age: float) -> Path:
    when = time.time() - age
    os.utime(path, (when, when))
    return path


def marked(root: Path, key: str, age: float) -> Path:
    mark = root / f".{key}.used"
    mark.touch()
    return aged(mark, age)


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_a_collection_removes_only_what_no_cr_names_once_unused_for_the_grace_period(
    tmp_path: Path,
) -> None:
    staged(tmp_path, KEY, age=2 * HOUR)
    marked(tmp_path, KEY, age=2 * HOUR)  # released two hours ago: goes
    staged(tmp_path, OTHER, age=2 * HOUR)
    marked(tmp_path, OTHER, age=60)  # reused a minute ago: stays
    staged(tmp_path, THIRD, age=2 * HOUR)  # named by a CR: stays, however old
    old = staged(tmp_path, "1111111111111111", age=2 * HOUR)  # no mark (an older stager's)
    young = staged(tmp_path, "2222222222222222", age=60)
    staged(tmp_path, "models", age=2 * HOUR)  # not a content key: never touched
    (tmp_path / ".3333333333333333.used").touch()  # a mark whose directory went
    got = collect(tmp_path, [THIRD], grace=600, stale=HOUR)
    assert got == {"removed": [KEY, old.name], "young": [young.name, OTHER], "busy": []}
    assert names(tmp_path) == sorted([OTHER, f".{OTHER}.used", THIRD, young.name, "models"])


def test_a_released_key_stays_for_the_grace_period_and_goes_with_a_later_collection(
    tmp_path: Path,
) -> None:
    """A delete releases its key (a replacement reuses the directory within the grace period);
    a later collection on the claim removes it once the period passed."""
    staged(tmp_path, KEY, age=2 * HOUR)
    marked(tmp_path, KEY, age=2 * HOUR)
    assert collect(tmp_path, [], grace=600, released=[KEY])["young"] == [KEY]
    assert (tmp_path / KEY).is_dir()
    later = time.time() + 601
    assert collect(tmp_path, [], grace=600, clock=lambda: later)["removed"] == [KEY]
    assert names(tmp_path) == []
    assert release(tmp_path, KEY) is False  # nothing there: no mark made
    assert names(tmp_path) == []


def test_a_key_in_use_by_a_staging_is_kept_whatever_its_age(tmp_path: Path) -> None:
    """Its lock held (a staging, a reuse, a verification, on any stager of the claim): busy."""
    staged(tmp_path, KEY, age=2 * HOUR)
    live = staged(tmp_path, f".{KEY}.tmp-abc", age=2 * HOUR)
    with key_lock(tmp_path, KEY) as held:
        assert held
        assert collect(tmp_path, [], grace=0, stale=0) == {
            "removed": [],
            "young": [],
            "busy": [KEY],
        }
        with key_lock(tmp_path, KEY, shared=True, wait=False) as shared:
            assert not shared  # an exclusive lock excludes a verification too
    assert (tmp_path / KEY).is_dir() and live.is_dir()
    assert collect(tmp_path, [], grace=0, stale=0)["removed"] == [KEY]
    assert names(tmp_path) == []


def test_a_lock_removed_while_waited_for_is_not_taken(tmp_path: Path) -> None:
    """A lock's last holder removes its file; one that waited on the removed file then takes
    the one at the path (made anew), so two never both hold the key's lock."""
    taken, done = threading.Event(), threading.Event()
    results: list[bool] = []

    def waiter() -> None:
        with key_lock(tmp_path, KEY) as held:
            results.append(held)
            taken.set()
            done.wait(10)

    with key_lock(tmp_path, KEY):
        thread = threading.Thread(target=waiter)
        thread.start()
    # Let go (the file removed): the waiter took the lock of the file at the path, made anew.
    assert taken.wait(10) and results == [True]
    with key_lock(tmp_path, KEY, wait=False) as second:
        assert not second  # the waiter holds the lock at the path, not a removed file
    done.set()
    thread.join(10)
    assert names(tmp_path) == []  # its last holder removed the lock file


def test_the_plan_for_one_key() -> None:
    now = 10_000.0
    fresh = Entries(final=now - 5000, mark=now - 10, temporary={".k.tmp-a": now - 10})
    kept = plan(fresh, now=now, grace=600, stale=HOUR)
    assert not kept.remove_final and kept.remove == () and not kept.forget
    old = Entries(final=now - 5000, temporary={".k.tmp-a": now - 5000}, aside=(".k.old-1",))
    gone = plan(old, now=now, grace=600, stale=HOUR)
    assert gone.remove_final and gone.remove == (".k.tmp-a", ".k.old-1") and gone.forget
    staging = Entries(temporary={".k.tmp-a": now - 10})
    assert not plan(staging, now=now, grace=0, stale=HOUR).forget  # its staging still runs


def test_a_staging_marks_its_key_used_and_a_reuse_refreshes_the_mark(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = hub.publish("acme/marked", adapter.files, lfs=LFS)
    request = parse_source(f"hf://acme/marked@{commit}")
    env = {"HF_ENDPOINT": hub.endpoint}
    key = stage(request, tmp_path, env=env).key
    mark = tmp_path / f".{key}.used"
    assert names(tmp_path) == sorted([key, mark.name])  # no lock file once nobody holds it
    aged(mark, 2 * HOUR)
    assert stage(request, tmp_path, env=env).fetched is False
    assert time.time() - mark.stat().st_mtime < HOUR  # refreshed: a collection keeps it
    assert collect(tmp_path, [], grace=600)["young"] == [key]
