"""hf:// over plain GETs: where the token goes, the Hub's own sha256 and sizes, its pages, its
errors and rate limits, and verification from the facts computed while writing."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from pulumi_lora._staging import _verify
from pulumi_lora._staging._errors import (
    DigestMismatch,
    SourceFileMissing,
    SourceUnauthorized,
    SourceUnreachable,
)
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._hub import (
    announced_by,
    hub_error,
    linked_sha256,
    parse_tree_page,
    retry_wait,
)
from pulumi_lora._staging._source import HfSource, parse_source
from pulumi_lora._staging._verify import FileFacts
from pulumi_lora.testing.hub import PlayedHub

from .conftest import ADAPTER_CONFIG, TOKEN, leftovers, make_adapter
from .played import PlayedHttp, Reply

CONFIG = json.dumps(ADAPTER_CONFIG).encode()
WEIGHTS = "adapter_model.safetensors"
COMMIT = "a" * 40
SOURCE = HfSource(repo_id="acme/x", revision=COMMIT)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def cdn() -> Iterator[PlayedHttp]:
    """Another origin than `played` (another port): the Hub's CDN."""
    server = PlayedHttp()
    try:
        yield server
    finally:
        server.close()


def resolve(repo: str, name: str) -> str:
    return f"GET /{repo}/resolve/{COMMIT}/{name}"


def serve_lfs(hub: PlayedHttp, cdn: PlayedHttp, repo: str, body: bytes, **linked: str) -> None:
    """The Hub's answers for ``repo`` at `COMMIT`: the config in git, the weights in LFS (a
    redirect to the CDN announcing ``linked`` X-Linked-* headers, their own by default)."""
    hub.routes[resolve(repo, "adapter_config.json")] = Reply(body=CONFIG)
    headers = {
        "Location": f"{cdn.url}/blob",
        "X-Repo-Commit": COMMIT,
        "X-Linked-Etag": linked.get("etag", f'"{sha(body)}"'),
        "X-Linked-Size": linked.get("size", str(len(body))),
    }
    hub.routes[resolve(repo, WEIGHTS)] = Reply(302, headers)
    cdn.routes["GET /blob"] = Reply(body=body)


def test_the_token_goes_to_the_hub_and_never_to_another_origin(
    played: PlayedHttp, cdn: PlayedHttp, tmp_path: Path
) -> None:
    """A redirect on the Hub (a renamed repository) keeps the token; the one to the CDN, another
    origin, drops it (httpx2's rule for a redirect away from the origin)."""
    weights = os.urandom(64 << 10)
    serve_lfs(played, cdn, "acme/renamed", weights)
    moved = {"Location": f"/acme/renamed/resolve/{COMMIT}/{WEIGHTS}"}
    played.routes[resolve("acme/tok", WEIGHTS)] = Reply(307, moved)
    played.routes[resolve("acme/tok", "adapter_config.json")] = Reply(body=CONFIG)
    request = parse_source(f"hf://acme/tok@{COMMIT}", files=["adapter_config.json", WEIGHTS])
    result = stage(request, tmp_path, env={"HF_ENDPOINT": played.url, "HF_TOKEN": TOKEN})
    assert result.files[WEIGHTS] == FileFacts(size=len(weights), sha256=sha(weights))
    bearer = f"Bearer {TOKEN}"
    assert played.count(resolve("acme/tok", "adapter_config.json")).authorizations == [bearer]
    assert played.count(resolve("acme/tok", WEIGHTS)).authorizations == [bearer]
    assert played.count(resolve("acme/renamed", WEIGHTS)).authorizations == [bearer]
    assert cdn.count("GET /blob").authorizations == [None]


def test_without_hf_token_no_authorization_is_sent(
    played: PlayedHttp, cdn: PlayedHttp, tmp_path: Path
) -> None:
    weights = os.urandom(1000)
    serve_lfs(played, cdn, "acme/open", weights)
    request = parse_source(f"hf://acme/open@{COMMIT}", files=["adapter_config.json", WEIGHTS])
    stage(request, tmp_path, env={"HF_ENDPOINT": played.url})
    assert played.count(resolve("acme/open", WEIGHTS)).authorizations == [None]


def test_bytes_other_than_the_hubs_sha256_fail_and_leave_nothing(
    played: PlayedHttp, cdn: PlayedHttp, tmp_path: Path
) -> None:
    """No digest pinned for the weights: the Hub's own sha256 (X-Linked-Etag) is checked."""
    weights, other = os.urandom(1000), os.urandom(1000)
    serve_lfs(played, cdn, "acme/lie", weights, etag=f'"{sha(other)}"')
    request = parse_source(
        f"hf://acme/lie@{COMMIT}", files=[WEIGHTS], digests={"adapter_config.json": sha(CONFIG)}
    )
    with pytest.raises(DigestMismatch) as mismatch:
        stage(request, tmp_path, env={"HF_ENDPOINT": played.url})
    assert mismatch.value.file == WEIGHTS
    assert mismatch.value.detail == (
        f"{WEIGHTS}: sha256 {sha(weights)} differs from the pinned {sha(other)}"
    )
    assert leftovers(tmp_path) == []


def test_a_git_sha1_etag_vouches_for_nothing(
    played: PlayedHttp, cdn: PlayedHttp, tmp_path: Path
) -> None:
    weights = os.urandom(1000)
    serve_lfs(played, cdn, "acme/sha1", weights, etag='"' + "b" * 40 + '"')
    request = parse_source(f"hf://acme/sha1@{COMMIT}", files=["adapter_config.json", WEIGHTS])
    result = stage(request, tmp_path, env={"HF_ENDPOINT": played.url})
    assert result.files[WEIGHTS].sha256 == sha(weights)


@pytest.mark.parametrize("how", ["x-linked-size", "short-body"])
def test_a_size_other_than_announced_fails(
    played: PlayedHttp, cdn: PlayedHttp, tmp_path: Path, how: str
) -> None:
    weights = os.urandom(1000)
    if how == "x-linked-size":
        serve_lfs(played, cdn, "acme/size", weights, size="999")
    else:  # the CDN announces 1000 bytes and closes after 10
        serve_lfs(played, cdn, "acme/size", weights)
        cdn.routes["GET /blob"] = Reply(headers={"Content-Length": "1000"}, body=weights[:10])
    request = parse_source(f"hf://acme/size@{COMMIT}", files=["adapter_config.json", WEIGHTS])
    with pytest.raises(SourceUnreachable) as unreachable:
        stage(request, tmp_path, env={"HF_ENDPOINT": played.url})
    assert unreachable.value.file == WEIGHTS
    assert unreachable.value.detail == (
        f"hf://acme/size@{COMMIT}: {WEIGHTS}: the transfer ended with another size than announced"
    )
    assert leftovers(tmp_path) == []


def test_a_listing_that_contradicts_the_download_is_a_mismatch(
    played: PlayedHttp, cdn: PlayedHttp, tmp_path: Path
) -> None:
    weights = os.urandom(1000)
    serve_lfs(played, cdn, "acme/two", weights)
    tree = [
        {"type": "file", "path": "adapter_config.json", "size": len(CONFIG), "oid": "c" * 40},
        {"type": "file", "path": WEIGHTS, "size": 1000, "lfs": {"oid": "0" * 64, "size": 1000}},
    ]
    played.routes[f"GET /api/models/acme/two/tree/{COMMIT}"] = Reply(body=json.dumps(tree).encode())
    with pytest.raises(DigestMismatch) as mismatch:
        stage(parse_source(f"hf://acme/two@{COMMIT}"), tmp_path, env={"HF_ENDPOINT": played.url})
    assert mismatch.value.detail == (
        f"{WEIGHTS}: the Hub lists sha256 {'0' * 64}, its download announces {sha(weights)}"
    )
    assert leftovers(tmp_path) == []


def test_a_listing_over_pages_stages_every_file(tmp_path: Path) -> None:
    """The Hub pages its tree (1000 entries a page): every page is read, hidden files left out."""
    adapter = make_adapter()
    files = {**adapter.files, "README.md": b"# r\n", ".gitattributes": b"*\n", "sub/x.bin": b"x"}
    with PlayedHub(tree_page=2) as hub:
        commit = hub.publish("acme/pages", files, lfs=frozenset({WEIGHTS}))
        result = stage(
            parse_source(f"hf://acme/pages@{commit}"), tmp_path, env={"HF_ENDPOINT": hub.endpoint}
        )
        pages = [r.path for r in hub.requests if "/tree/" in r.path]
    assert sorted(result.files) == ["README.md", "adapter_config.json", WEIGHTS, "sub/x.bin"]
    assert len(pages) == 3 and "cursor=2" in pages[1] and "cursor=4" in pages[2]
    assert (Path(result.path) / "sub" / "x.bin").read_bytes() == b"x"


def test_a_rate_limit_within_the_deadline_is_asked_again(
    played: PlayedHttp, tmp_path: Path
) -> None:
    route = resolve("acme/busy", "adapter_config.json")
    played.queued[route] = [Reply(429, {"Retry-After": "0"}), Reply(503, {"Retry-After": "0"})]
    played.routes[route] = Reply(body=CONFIG)
    request = parse_source(f"hf://acme/busy@{COMMIT}", digests={"adapter_config.json": sha(CONFIG)})
    result = stage(request, tmp_path, env={"HF_ENDPOINT": played.url})
    assert result.fetched and played.count(route).requests == 3


def test_a_fresh_staging_hashes_nothing_again(
    hub: PlayedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verification takes the facts computed while writing; only reusing a staged directory
    reads its files again."""
    adapter = make_adapter()
    commit = hub.publish("acme/once-hashed", adapter.files, lfs=frozenset({WEIGHTS}))
    hashed: list[str] = []
    real = _verify.hash_file

    def counted(path: Path, *args: object) -> FileFacts:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(_verify, "hash_file", counted)
    request = parse_source(f"hf://acme/once-hashed@{commit}", digests=adapter.digests)
    first = stage(request, tmp_path, env={"HF_ENDPOINT": hub.endpoint})
    assert first.fetched and hashed == []
    again = stage(request, tmp_path, env={"HF_ENDPOINT": hub.endpoint})
    assert not again.fetched and sorted(hashed) == sorted(adapter.files)


# --- the pure rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "error", "detail"),
    [
        (
            401,
            {"X-Error-Code": "GatedRepo"},
            SourceUnauthorized,
            "HTTP 401: the repository is gated",
        ),
        (
            403,
            {"X-Error-Message": "Access to this resource is disabled."},
            SourceUnauthorized,
            "HTTP 403: the repository is gated or disabled for this token",
        ),
        (
            401,
            {"X-Error-Code": "RepoNotFound"},
            SourceUnauthorized,
            "HTTP 401: the repository is private, or does not exist",
        ),
        (401, {}, SourceUnauthorized, "HTTP 401: the repository is private, or does not exist"),
        (
            401,
            {"X-Error-Message": "Invalid credentials in Authorization header"},
            SourceUnauthorized,
            "f.bin: HTTP 401",
        ),
        (404, {"X-Error-Code": "RepoNotFound"}, SourceFileMissing, "f.bin: no such repository"),
        (
            404,
            {"X-Error-Code": "EntryNotFound"},
            SourceFileMissing,
            "no such file at this revision",
        ),
        (404, {}, SourceFileMissing, "f.bin: HTTP 404"),
        (500, {}, SourceUnreachable, "f.bin: HTTP 500"),
    ],
)
def test_the_hubs_failures_read_as_huggingface_hub_reads_them(
    status: int, headers: dict[str, str], error: type[Exception], detail: str
) -> None:
    mapped = hub_error(status, httpx2.Headers(headers), SOURCE, "f.bin")
    assert type(mapped) is error and mapped.file == "f.bin"
    assert mapped.detail.startswith(f"hf://acme/x@{COMMIT}: ") and detail in mapped.detail


def test_a_missing_revision_names_the_revision_not_the_file() -> None:
    headers = httpx2.Headers({"X-Error-Code": "RevisionNotFound"})
    mapped = hub_error(404, headers, SOURCE, "f.bin")
    assert mapped.detail == f"hf://acme/x@{COMMIT}: no revision '{COMMIT}' in the repository"


def test_a_401_off_the_hub_is_no_missing_repository() -> None:
    mapped = hub_error(401, httpx2.Headers(), SOURCE, "f.bin", from_hub=False)
    assert mapped.detail == f"hf://acme/x@{COMMIT}: f.bin: HTTP 401"


def test_only_a_sha256_is_a_linked_etag() -> None:
    digest = sha(b"x")
    assert linked_sha256(f'"{digest}"') == digest
    assert linked_sha256(f'W/"{digest.upper()}"') == digest
    assert linked_sha256('"' + "b" * 40 + '"') is None  # a git sha1
    assert linked_sha256(None) is None and linked_sha256('"nope"') is None


def test_the_sizes_announced_are_the_linked_ones_and_the_last_bodys() -> None:
    redirect = httpx2.Response(
        302,
        headers={"X-Linked-Etag": f'"{sha(b"x")}"', "X-Linked-Size": "1", "Content-Length": "0"},
    )
    final = httpx2.Response(200, headers={"Content-Length": "1"})
    assert announced_by([redirect, final]).sizes == {1}
    assert announced_by([redirect, final]).sha256 == sha(b"x")
    encoded = httpx2.Response(200, headers={"Content-Length": "7", "Content-Encoding": "gzip"})
    assert announced_by([encoded]).sizes == frozenset() and announced_by([encoded]).sha256 is None


def test_a_rate_limit_or_a_server_error_is_asked_again_a_few_times() -> None:
    assert retry_wait(429, "3", 1) == 3.0
    assert [retry_wait(503, None, attempt) for attempt in (1, 2, 3)] == [1.0, 2.0, None]
    assert retry_wait(404, "3", 1) is None and retry_wait(200, None, 1) is None


@pytest.mark.parametrize(
    ("page", "words"),
    [
        ({"files": []}, "not a JSON list"),
        ([{"type": "symlink"}], "an entry is not a file or a directory"),
        ([{"type": "file", "path": "a"}], "a file entry has no path or size"),
        ([{"type": "file", "path": "a", "size": True}], "a file entry has no path or size"),
        ([{"type": "file", "path": "a", "size": 1, "lfs": {"oid": "x"}}], "a: its LFS entry"),
    ],
)
def test_a_page_that_is_not_the_hubs_is_refused(page: object, words: str) -> None:
    with pytest.raises(SourceUnreachable, match="the Hub's file list is malformed") as refused:
        parse_tree_page(page, SOURCE.uri)
    assert words in str(refused.value)


def test_a_page_lists_files_with_the_sha256_of_lfs_ones() -> None:
    digest = sha(b"w")
    page = [
        {"type": "directory", "path": "sub", "oid": "d" * 40},
        {"type": "file", "path": "sub/a.json", "size": 2, "oid": "e" * 40},
        {"type": "file", "path": "w.bin", "size": 1, "lfs": {"oid": digest, "size": 1}},
    ]
    assert [(f.path, f.size, f.sha256) for f in parse_tree_page(page, SOURCE.uri)] == [
        ("sub/a.json", 2, None),
        ("w.bin", 1, digest),
    ]
