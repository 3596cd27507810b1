"""Sources as users write them: parsed, pinned or refused in words, keyed by content."""

from __future__ import annotations

import hashlib

import pytest

from pulumi_lora._staging._errors import MutableSourceRefused, SourceRefused
from pulumi_lora._staging._source import (
    HfSource,
    HttpsSource,
    S3Source,
    content_key,
    parse_digest,
    parse_source,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA_A = "a" * 64
SHA_B = "b" * 64


def test_an_hf_commit_is_pinned_without_digests() -> None:
    request = parse_source(f"hf://acme/sql-lora@{COMMIT}")
    assert request.source == HfSource(repo_id="acme/sql-lora", revision=COMMIT)
    assert request.pinned and request.files == () and request.digests == {}


def test_a_branch_without_digests_is_refused_and_says_how_to_pin() -> None:
    with pytest.raises(MutableSourceRefused) as refused:
        parse_source("hf://acme/sql-lora@main")
    assert str(refused.value) == (
        "hf://acme/sql-lora@main names a branch or tag, not a commit, and no file has a digest: "
        "pin it: an hf:// source at a 40-hex commit, or a sha256 digest for every file "
        "(digests {FILE: SHA256}, or --digest FILE=SHA256); or accept changing content "
        "explicitly with allow_mutable"
    )
    assert refused.value.reason == "MutableSource"


def test_no_revision_means_main_and_is_mutable() -> None:
    with pytest.raises(MutableSourceRefused, match="@main names a branch"):
        parse_source("hf://acme/sql-lora")
    request = parse_source("hf://acme/sql-lora", allow_mutable=True)
    assert request.source == HfSource(repo_id="acme/sql-lora", revision="main")


def test_a_branch_with_every_file_pinned_is_accepted() -> None:
    request = parse_source(
        "hf://acme/sql-lora@v2", digests={"adapter_config.json": SHA_A, "w.safetensors": SHA_B}
    )
    assert request.pinned and request.files == ("adapter_config.json", "w.safetensors")


def test_one_unpinned_file_makes_an_s3_prefix_mutable() -> None:
    with pytest.raises(MutableSourceRefused) as refused:
        parse_source("s3://models/sql/", files=["README.md"], digests={"a.json": SHA_A})
    assert refused.value.detail == (
        "s3://models/sql/ is an S3 prefix, whose objects can be overwritten, "
        "and 1 file(s) have no digest (README.md)"
    )


def test_allow_mutable_accepts_an_unpinned_prefix() -> None:
    request = parse_source("s3://models/sql/", allow_mutable=True, s3_endpoint="http://minio:9000/")
    assert request.source == S3Source(bucket="models", prefix="sql/", endpoint="http://minio:9000")
    assert not request.pinned


def test_https_needs_a_file_list_and_plain_http_only_to_loopback() -> None:
    with pytest.raises(SourceRefused, match="an https source needs its file list"):
        parse_source("https://files.example/sql/", allow_mutable=True)
    with pytest.raises(SourceRefused, match=r"use https:// \(plain http only to a loopback host\)"):
        parse_source("http://files.example/sql/", files=["a"], allow_mutable=True)
    request = parse_source("http://127.0.0.1:8080/sql/", digests={"a.json": SHA_A})
    assert request.source == HttpsSource(base_url="http://127.0.0.1:8080/sql/")


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("acme/sql-lora", "has no scheme: use hf://, s3:// or https://"),
        ("gs://bucket/x/", "unknown scheme gs://"),
        ("hf://sql-lora@" + COMMIT, "the repository is not org/repo"),
        ("hf://acme/a--b@" + COMMIT, "the repository is not org/repo"),
        ("hf://datasets/acme/x@" + COMMIT, "only model repositories"),
        ("hf://acme/x@bad rev", "is not a commit, branch or tag"),
        ("s3://Bad_Bucket/x/", "is not an S3 bucket name"),
        ("s3://models/sql", "the prefix must end with '/'"),
        ("s3://models/a/../b/", "'.' or '..' part"),
        ("https://user:pw@files.example/x/", "would put secrets in the state"),
        ("https://files.example/x/?sig=abc", "would put secrets in the state"),
        ("https://files.example/x", "must end with '/'"),
    ],
)
def test_malformed_sources_are_refused_in_words(uri: str, words: str) -> None:
    with pytest.raises(SourceRefused) as refused:
        parse_source(uri, files=["a.json"], allow_mutable=True)
    assert words in str(refused.value)
    assert "pw" not in str(refused.value) and "sig=abc" not in str(refused.value)


def test_an_endpoint_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(SourceRefused) as refused:
        parse_source("s3://models/x/", allow_mutable=True, s3_endpoint="http://k:secret@minio/")
    assert "secret" not in str(refused.value)
    assert "AWS_ACCESS_KEY_ID" in str(refused.value)


@pytest.mark.parametrize("name", ["../etc/passwd", "/abs", "a//b", ".hidden", "a/./b", "a\\b", ""])
def test_file_names_stay_inside_the_staged_directory(name: str) -> None:
    with pytest.raises(SourceRefused, match="is not a plain relative path"):
        parse_source(f"hf://acme/x@{COMMIT}", files=[name])


def test_digests_are_parsed_from_file_equals_sha256() -> None:
    assert parse_digest(f"sub/w.safetensors=sha256:{SHA_A.upper()}") == ("sub/w.safetensors", SHA_A)
    with pytest.raises(SourceRefused, match="is not FILE=SHA256"):
        parse_digest(SHA_A)
    with pytest.raises(SourceRefused, match="digest of w is not 64 hex characters of sha256"):
        parse_digest("w=abc")


def test_the_content_key_is_stable_and_follows_the_content() -> None:
    pinned = {"adapter_config.json": SHA_A, "w.safetensors": SHA_B}
    key = content_key(parse_source(f"hf://acme/x@{COMMIT}", digests=pinned))
    # The documented recipe: 16 hex of sha256 over the canonical JSON (sorted keys, no spaces).
    canonical = (
        '{"digests":{"adapter_config.json":"' + SHA_A + '","w.safetensors":"' + SHA_B + '"},'
        '"files":["adapter_config.json","w.safetensors"],'
        '"source":{"revision":"' + COMMIT + '","uri":"hf://acme/x@' + COMMIT + '"}}'
    )
    assert key == hashlib.sha256(canonical.encode()).hexdigest()[:16] == "a6395ff7f0196103"
    reordered = dict(reversed(list(pinned.items())))
    assert content_key(parse_source(f"hf://acme/x@{COMMIT}", digests=reordered)) == key
    others = [
        parse_source(f"hf://acme/x@{'1' * 40}", digests=pinned),
        parse_source(f"hf://acme/y@{COMMIT}", digests=pinned),
        parse_source(f"hf://acme/x@{COMMIT}", digests={**pinned, "w.safetensors": SHA_A}),
        parse_source(f"hf://acme/x@{COMMIT}", digests=pinned, files=["README.md"]),
        parse_source(f"hf://acme/x@{COMMIT}"),
    ]
    keys = {content_key(request) for request in others}
    assert len(keys) == len(others) and key not in keys
    assert all(len(k) == 16 and int(k, 16) >= 0 for k in keys)


def test_allow_mutable_does_not_change_the_key_but_the_s3_endpoint_does() -> None:
    pinned = {"a.json": SHA_A}
    plain = parse_source("s3://models/x/", digests=pinned)
    assert content_key(parse_source("s3://models/x/", digests=pinned, allow_mutable=True)) == (
        content_key(plain)
    )
    elsewhere = parse_source("s3://models/x/", digests=pinned, s3_endpoint="http://minio:9000")
    assert content_key(elsewhere) != content_key(plain)


def test_the_hub_endpoint_is_part_of_the_key_and_the_public_hub_keeps_its_keys() -> None:
    """Issue 53: a mirror's ``org/repo@commit`` may hold other bytes than the public Hub's."""
    public = parse_source(f"hf://acme/x@{COMMIT}")
    mirror = parse_source(f"hf://acme/x@{COMMIT}", hf_endpoint="https://hub.example.com/")
    assert mirror.source == HfSource(
        repo_id="acme/x", revision=COMMIT, endpoint="https://hub.example.com"
    )
    other = parse_source(f"hf://acme/x@{COMMIT}", hf_endpoint="https://hub2.example.com")
    assert len({content_key(public), content_key(mirror), content_key(other)}) == 3
    # The same mirror however written; the public Hub named explicitly is no mirror.
    same = parse_source(f"hf://acme/x@{COMMIT}", hf_endpoint="HTTPS://Hub.Example.com")
    assert content_key(same) == content_key(mirror)
    for hub in ("https://huggingface.co", "https://huggingface.co/", "https://HuggingFace.co:443"):
        named = parse_source(f"hf://acme/x@{COMMIT}", hf_endpoint=hub)
        assert named.source == public.source and content_key(named) == content_key(public)


def test_a_request_without_new_settings_reads_as_before() -> None:
    """A stager of an earlier version refuses unknown fields: defaults stay out of the JSON."""
    hub = parse_source(f"hf://acme/x@{COMMIT}").to_json()
    assert hub == f'{{"source":{{"kind":"hf","repo_id":"acme/x","revision":"{COMMIT}"}},' + (
        '"files":[],"digests":{},"allow_mutable":false}'
    )
    bucket = parse_source("s3://models/x/", digests={"a.json": SHA_A}, s3_public=True)
    assert type(bucket).from_json(bucket.to_json()) == bucket


def test_a_public_bucket_is_carried_but_keyed_as_the_same_content() -> None:
    pinned = {"a.json": SHA_A}
    public = parse_source("s3://models/x/", digests=pinned, s3_public=True)
    assert public.source == S3Source(bucket="models", prefix="x/", public=True)
    assert content_key(public) == content_key(parse_source("s3://models/x/", digests=pinned))


@pytest.mark.parametrize("uri", [f"hf://acme/x@{COMMIT}", "https://files.example/x/"])
def test_public_applies_to_s3_only(uri: str) -> None:
    with pytest.raises(SourceRefused, match=r"^source_public applies to s3:// sources"):
        parse_source(uri, files=["a.json"], digests={"a.json": SHA_A}, s3_public=True)


def test_a_hub_endpoint_applies_to_hf_only() -> None:
    with pytest.raises(SourceRefused, match="a Hub endpoint was given for a s3:// source"):
        parse_source("s3://models/x/", allow_mutable=True, hf_endpoint="https://hub.example.com")
