"""Staging from a played Hugging Face Hub, as the Hub answers the stager's plain GETs."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pulumi_lora._staging._errors import (
    DigestMismatch,
    SourceFileMissing,
    SourceUnauthorized,
)
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import content_key, parse_source
from pulumi_lora._staging._verify import MANIFEST, ServerLimits
from pulumi_lora.testing.hub import PlayedHub

from .conftest import TOKEN, Adapter, leftovers, make_adapter, staged_names

WEIGHTS = "adapter_model.safetensors"


def publish(hub: PlayedHub, repo: str, adapter: Adapter, **kwargs: Any) -> str:
    return hub.publish(repo, adapter.files, lfs=frozenset({WEIGHTS}), **kwargs)


def test_a_pinned_commit_lands_verified_at_its_key_and_stages_once(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = publish(hub, "acme/once", adapter)
    request = parse_source(f"hf://acme/once@{commit}", digests=adapter.digests)
    env = {"HF_ENDPOINT": hub.endpoint}
    events: list[tuple[str, dict[str, Any]]] = []

    first = stage(request, tmp_path, env=env, log=lambda e, **f: events.append((e, f)))
    assert first.fetched and first.key == content_key(request)
    assert first.path == str(tmp_path / first.key)
    # No temporary directory, no hub bookkeeping: the directory and its in-use mark.
    assert leftovers(tmp_path) == staged_names(first.key)
    assert sorted(os.listdir(first.path)) == sorted([*adapter.files, MANIFEST])
    assert {n: (tmp_path / first.key / n).read_bytes() for n in adapter.files} == adapter.files
    assert {n: f.sha256 for n, f in first.files.items()} == adapter.digests
    assert first.document()["bytes"] == sum(map(len, adapter.files.values()))
    assert ("fetched_file", {"file": WEIGHTS, "bytes": 256 << 10}) in events

    fetched = len(hub.file_requests())
    again = stage(request, tmp_path, env=env)
    assert not again.fetched and again.path == first.path and again.files == first.files
    assert len(hub.file_requests()) == fetched  # nothing fetched again


def test_a_mirror_named_by_the_source_is_fetched_from_and_keyed_apart(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    """Issue 53: the request names its Hub (``source_endpoint``), the stager fetches from it,
    and its directory is not the public Hub's ``org/repo@commit``."""
    commit = publish(hub, "acme/mirrored", adapter)
    request = parse_source(f"hf://acme/mirrored@{commit}", hf_endpoint=hub.endpoint)
    result = stage(request, tmp_path, env={})  # no HF_ENDPOINT: the request's endpoint
    assert result.fetched and result.key == content_key(request)
    assert result.key != content_key(parse_source(f"hf://acme/mirrored@{commit}"))
    assert {n: f.sha256 for n, f in result.files.items()} == adapter.digests


def test_a_commit_without_digests_stages_every_file_checked_against_the_hubs_sha256(
    hub: PlayedHub, tmp_path: Path
) -> None:
    adapter = make_adapter()
    files = {**adapter.files, "README.md": b"# sql\n", ".gitattributes": b"* text\n"}
    commit = hub.publish("acme/listed", files, lfs=frozenset({WEIGHTS}))
    result = stage(
        parse_source(f"hf://acme/listed@{commit}"), tmp_path, env={"HF_ENDPOINT": hub.endpoint}
    )
    assert sorted(result.files) == ["README.md", "adapter_config.json", WEIGHTS]  # no dotfiles
    assert result.files[WEIGHTS].sha256 == adapter.digests[WEIGHTS]


def test_a_flipped_byte_fails_naming_the_file_and_leaves_nothing(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    served = bytearray(adapter.files[WEIGHTS])
    served[4096] ^= 0x80
    commit = hub.publish(
        "acme/flipped", {**adapter.files, WEIGHTS: bytes(served)}, lfs=frozenset({WEIGHTS})
    )
    request = parse_source(f"hf://acme/flipped@{commit}", digests=adapter.digests)
    with pytest.raises(DigestMismatch) as mismatch:
        stage(request, tmp_path, env={"HF_ENDPOINT": hub.endpoint})
    assert mismatch.value.file == WEIGHTS
    assert str(mismatch.value).startswith(
        f"{WEIGHTS}: sha256 {hashlib.sha256(served).hexdigest()} differs from the pinned "
        f"{adapter.digests[WEIGHTS]}"
    )
    assert leftovers(tmp_path) == []  # neither the final directory nor a temporary one


def test_a_private_repo_needs_hf_token_and_the_token_stays_off_the_cdn(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = publish(hub, "acme/private", adapter, private=True)
    request = parse_source(f"hf://acme/private@{commit}", digests=adapter.digests)
    with pytest.raises(SourceUnauthorized) as refused:
        stage(request, tmp_path, env={"HF_ENDPOINT": hub.endpoint})
    assert str(refused.value) == (
        f"hf://acme/private@{commit}: adapter_config.json: HTTP 401: the repository is private, "
        "or does not exist: give the stager credentials with read access to it: a Secret named "
        "by source_secret_name (HF_TOKEN for hf://; AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
        "for s3://), or for s3:// a ServiceAccount with a workload identity (IRSA, Pod Identity) "
        "named by source_service_account"
    )
    assert leftovers(tmp_path) == []

    hub.requests.clear()
    result = stage(request, tmp_path, env={"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN})
    assert result.fetched and sorted(result.files) == sorted(adapter.files)
    assert TOKEN not in repr(result.document())
    # The Hub got the token; the CDN (another origin) did not, as with the real Hub's CDN.
    assert all(r.authorized for r in hub.requests if not r.path.startswith("/cdn/"))
    assert [r.authorized for r in hub.requests if r.path.startswith("/cdn/")] == [False]


def test_a_wrong_token_is_unauthorized_too(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = publish(hub, "acme/private2", adapter, private=True)
    request = parse_source(f"hf://acme/private2@{commit}", digests=adapter.digests)
    with pytest.raises(SourceUnauthorized) as refused:
        stage(request, tmp_path, env={"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "hf_wrong"})
    assert "hf_wrong" not in str(refused.value)


def test_a_missing_file_and_a_missing_revision_are_named(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = publish(hub, "acme/missing", adapter)
    env = {"HF_ENDPOINT": hub.endpoint}
    request = parse_source(
        f"hf://acme/missing@{commit}", digests={**adapter.digests, "extra.bin": "0" * 64}
    )
    with pytest.raises(SourceFileMissing) as missing:
        stage(request, tmp_path, env=env)
    assert missing.value.file == "extra.bin"
    assert missing.value.detail == (
        f"hf://acme/missing@{commit}: extra.bin: no such file at this revision"
    )
    with pytest.raises(SourceFileMissing, match=r"no revision '1{40}' in the repository"):
        stage(parse_source(f"hf://acme/missing@{'1' * 40}"), tmp_path, env=env)
    assert leftovers(tmp_path) == []


def test_an_adapter_beyond_the_servers_flags_is_refused_before_it_lands(
    hub: PlayedHub, tmp_path: Path
) -> None:
    adapter = make_adapter(r=64)
    commit = publish(hub, "acme/wide", adapter)
    request = parse_source(f"hf://acme/wide@{commit}", digests=adapter.digests)
    with pytest.raises(Exception, match="rank r=64 exceeds the server's --max-lora-rank 16"):
        stage(
            request,
            tmp_path,
            env={"HF_ENDPOINT": hub.endpoint},
            limits=ServerLimits(max_lora_rank=16, target_modules=("all",)),
        )
    assert leftovers(tmp_path) == []


def test_a_changed_staged_directory_is_staged_again(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    commit = publish(hub, "acme/heal", adapter)
    request = parse_source(f"hf://acme/heal@{commit}", digests=adapter.digests)
    env = {"HF_ENDPOINT": hub.endpoint}
    first = stage(request, tmp_path, env=env)
    weights = Path(first.path) / WEIGHTS
    weights.chmod(0o644)
    weights.write_bytes(b"tampered")
    events: list[str] = []
    healed = stage(request, tmp_path, env=env, log=lambda e, **_f: events.append(e))
    assert healed.fetched and "restage" in events
    assert weights.read_bytes() == adapter.files[WEIGHTS]
    assert leftovers(tmp_path) == staged_names(first.key)


def test_a_planted_directory_without_a_manifest_is_staged_again(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path
) -> None:
    """The recommended form, a commit without digests: a directory at the key holding only an
    adapter_config.json and a junk file is not taken for the adapter."""
    commit = publish(hub, "acme/planted", adapter)
    request = parse_source(f"hf://acme/planted@{commit}")
    planted = tmp_path / content_key(request)
    planted.mkdir()
    (planted / "adapter_config.json").write_bytes(adapter.files["adapter_config.json"])
    (planted / "junk.bin").write_bytes(b"junk")
    events: list[tuple[str, dict[str, Any]]] = []
    result = stage(
        request,
        tmp_path,
        env={"HF_ENDPOINT": hub.endpoint},
        log=lambda e, **f: events.append((e, f)),
    )
    assert result.fetched and result.path == str(planted)
    assert (
        "restage",
        {
            "key": result.key,
            "reason": f"{MANIFEST} is missing: the directory's content was never recorded",
        },
    ) in events
    assert sorted(os.listdir(planted)) == sorted([*adapter.files, MANIFEST])
    assert leftovers(tmp_path) == staged_names(result.key)


@pytest.mark.parametrize("change", ["flipped", "extra", "missing", "manifest-only"])
def test_a_staged_directory_is_reused_only_as_its_manifest_records_it(
    hub: PlayedHub, adapter: Adapter, tmp_path: Path, change: str
) -> None:
    """Without digests too: every file present with the sha256 recorded when it was fetched, no
    other file (an extra weights file would be loaded too)."""
    commit = publish(hub, f"acme/kept-{change}", adapter)
    request = parse_source(f"hf://acme/kept-{change}@{commit}")
    env = {"HF_ENDPOINT": hub.endpoint}
    first = stage(request, tmp_path, env=env)
    fetched = len(hub.file_requests())
    again = stage(request, tmp_path, env=env)
    assert not again.fetched and again.files == first.files
    assert len(hub.file_requests()) == fetched  # intact: nothing fetched

    staged = Path(first.path)
    staged.chmod(0o755)
    weights = staged / WEIGHTS
    if change == "flipped":
        data = bytearray(weights.read_bytes())
        data[100] ^= 0x01
        weights.chmod(0o644)
        weights.write_bytes(bytes(data))
    elif change == "extra":
        (staged / "adapter_model.bin").write_bytes(b"other weights")
    elif change == "missing":
        weights.unlink()
    else:  # a directory whose every file but the manifest is gone
        for name in adapter.files:
            (staged / name).unlink()
    events: list[str] = []
    healed = stage(request, tmp_path, env=env, log=lambda e, **_f: events.append(e))
    assert healed.fetched and "restage" in events and "already_staged" not in events
    assert sorted(os.listdir(staged)) == sorted([*adapter.files, MANIFEST])
    assert weights.read_bytes() == adapter.files[WEIGHTS]
    assert leftovers(tmp_path) == staged_names(first.key)


def test_a_staging_that_starts_mid_download_of_another_leaves_it_whole(
    hub: PlayedHub, tmp_path: Path
) -> None:
    """What a stager server does: stagings on threads of one process, one starting while
    another reads its weights. Each staging used to install ``huggingface_hub``'s client
    factory, which closes the shared session the other was reading from (``ReadError``
    mid-download); both now land, verified."""
    big, small = make_adapter(weights_bytes=40 << 20), make_adapter()
    first = parse_source(f"hf://acme/mid-big@{publish(hub, 'acme/mid-big', big)}")
    second = parse_source(f"hf://acme/mid-small@{publish(hub, 'acme/mid-small', small)}")
    env = {"HF_ENDPOINT": hub.endpoint}
    during: list[Any] = []

    def log(event: str, **fields: Any) -> None:
        if event == "fetch_progress" and not during:  # mid-way through the big weights
            with ThreadPoolExecutor(max_workers=1) as pool:
                during.append(pool.submit(stage, second, tmp_path, env=env).result())

    result = stage(first, tmp_path, env=env, log=log)
    assert during and during[0].key == content_key(second)
    assert result.fetched and result.key == content_key(first)
    data = (tmp_path / result.key / WEIGHTS).read_bytes()
    assert hashlib.sha256(data).hexdigest() == big.digests[WEIGHTS]
