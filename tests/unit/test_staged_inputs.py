"""A staged adapter's inputs (issue 40): ``source`` instead of ``path``, checked before anything
touches a cluster, each failure on the property a user fixes."""

from __future__ import annotations

from typing import Any

import pytest

from pulumi_lora import _lifecycle
from pulumi_lora._args import AdapterArgs
from pulumi_lora._lifecycle import AdapterState
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._pulumi._outputs import outputs, with_staged_path
from pulumi_lora._pulumi._properties import UNKNOWN
from pulumi_lora._staging._source import content_key, parse_source

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "ab" * 32
BASE = {"adapter_name": "sql-lora", "inference_service": "llama", "namespace": "models"}


def failures(**inputs: Any) -> dict[str, str]:
    """The check's failures, property → message."""
    checked = LoRAAdapterProvider().check({}, {**BASE, **inputs})
    return {f.property: f.reason for f in checked.failures}


def test_a_source_at_a_commit_needs_no_path_and_no_digests() -> None:
    assert failures(source=f"hf://acme/sql-lora@{COMMIT}") == {}


def test_an_s3_prefix_with_a_digest_per_file_is_pinned() -> None:
    digests = {"adapter_config.json": SHA, "adapter_model.safetensors": SHA}
    assert failures(source="s3://adapters/sql-lora/", digests=digests) == {}


def test_neither_path_nor_source_says_both_on_path() -> None:
    found = failures()
    assert list(found) == ["path"]
    assert "path or source is required" in found["path"]


def test_path_and_source_exclude_each_other() -> None:
    found = failures(path="/adapters/sql", source=f"hf://acme/sql-lora@{COMMIT}")
    assert list(found) == ["path"] and "exclude each other" in found["path"]


@pytest.mark.parametrize(
    "source", ["hf://acme/sql-lora", "hf://acme/sql-lora@main", "s3://adapters/sql-lora/"]
)
def test_a_mutable_source_without_digests_is_refused_unless_allowed(source: str) -> None:
    found = failures(source=source)
    assert list(found) == ["digests"]
    assert "has a digest" in found["digests"] and "digests {FILE: SHA256}" in found["digests"]
    assert failures(source=source, allow_mutable=True) == {}


def test_a_malformed_source_is_refused_on_source() -> None:
    found = failures(source="ftp://host/adapter/")
    assert list(found) == ["source"] and "unknown scheme ftp://" in found["source"]
    found = failures(source="https://user:pw@host/adapter/", allow_mutable=True)
    assert list(found) == ["source"] and "pw" not in found["source"]


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://hub.example.com",
        "http://127.0.0.1:9000",
        "http://minio.storage.svc:9000",
        "http://minio.storage.svc.cluster.local:9000/",
        "http://minio:9000",
    ],
)
def test_an_endpoint_is_https_or_loopback_or_in_the_cluster(endpoint: str) -> None:
    assert failures(source=f"hf://acme/sql-lora@{COMMIT}", source_endpoint=endpoint) == {}


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [
        ("http://hub.example.com", "plain http only to a loopback or cluster-internal host"),
        ("http://10.0.0.7:9000", "plain http only to a loopback or cluster-internal host"),
        ("https://key:hunter2@s3.example.com", "carries credentials"),
        ("s3.example.com", "not an http(s) URL"),
    ],
)
def test_an_endpoint_that_would_expose_weights_or_keys_is_refused(
    endpoint: str, words: str
) -> None:
    found = failures(source="s3://adapters/a/", source_endpoint=endpoint, allow_mutable=True)
    assert list(found) == ["source_endpoint"] and words in found["source_endpoint"]
    assert "hunter2" not in found["source_endpoint"]


def test_an_endpoint_for_an_https_source_is_refused() -> None:
    found = failures(
        source="https://cdn.example.com/a/", digests={"a.bin": SHA}, source_endpoint="https://x"
    )
    assert list(found) == ["source_endpoint"]


def test_staging_settings_without_a_source_are_refused() -> None:
    found = failures(path="/adapters/sql", digests={"a.bin": SHA}, volume_claim="adapters")
    assert list(found) == ["source"]
    assert "digests, volume_claim apply to a staged adapter" in found["source"]


def test_unknown_values_during_preview_are_checked_once_known() -> None:
    assert failures(source=UNKNOWN) == {}
    assert failures(source="hf://acme/sql-lora@main", digests=UNKNOWN) == {}
    assert failures(path=UNKNOWN) == {}


def staged_outputs(**inputs: Any) -> dict[str, Any]:
    """What a created staged adapter's outputs hold (path: the staged directory)."""
    args = AdapterArgs.parse({**BASE, **inputs, "path": "/adapters/0123456789abcdef"})
    return outputs(args, AdapterState(uid="u", generation=1, spec={}, annotations={}))


def test_a_staged_adapters_outputs_carry_its_directory_and_content_key() -> None:

    outs = staged_outputs(source=f"hf://acme/sql-lora@{COMMIT}")
    key = content_key(parse_source(f"hf://acme/sql-lora@{COMMIT}"))
    assert outs["content_key"] == key and outs["source"] == f"hf://acme/sql-lora@{COMMIT}"
    assert outs["path"] == "/adapters/0123456789abcdef"
    assert "content_key" not in staged_outputs_by_path()


def staged_outputs_by_path() -> dict[str, Any]:

    args = AdapterArgs.parse({**BASE, "path": "/adapters/sql"})
    return outputs(args, AdapterState(uid="u", generation=1, spec={}, annotations={}))


def test_unchanged_content_keeps_the_staged_path_and_new_content_stages_again() -> None:

    source = f"hf://acme/sql-lora@{COMMIT}"
    olds = staged_outputs(source=source)
    news = {**BASE, "source": source}
    assert with_staged_path(olds, news)["path"] == olds["path"]
    other = {**news, "source": "hf://acme/sql-lora@" + "f" * 40}
    assert "path" not in with_staged_path(olds, other)
    assert "path" not in with_staged_path(olds, {**news, "volume_claim": "other"})
    assert with_staged_path(olds, {**news, "source": UNKNOWN}) == {**news, "source": UNKNOWN}
    assert with_staged_path(olds, {**news, "digests": UNKNOWN})["digests"] == UNKNOWN


def test_a_new_hub_endpoint_is_new_content_that_is_staged_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 53: the mirror's ``org/repo@commit`` is not the public Hub's; changing
    ``source_endpoint`` used to keep the old directory (the same content key)."""
    source = f"hf://acme/sql-lora@{COMMIT}"
    olds = staged_outputs(source=source)
    mirror = {**BASE, "source": source, "source_endpoint": "https://hub.example.com"}
    assert "path" not in with_staged_path(olds, mirror)
    provider = LoRAAdapterProvider()
    assert provider.diff("models/sql-lora", olds, mirror).changes
    staged: list[AdapterArgs] = []

    def stage(args: AdapterArgs, *_a: Any, **_k: Any) -> AdapterArgs:
        staged.append(args)
        return args.replace(path="/adapters/fedcba9876543210")

    def swap(args: AdapterArgs, *_a: Any, **_k: Any) -> AdapterState:
        return AdapterState(uid="u", generation=2, spec={}, annotations={})

    monkeypatch.setattr(_lifecycle, "staged", stage)
    monkeypatch.setattr(_lifecycle, "update", swap)
    monkeypatch.setattr(_lifecycle, "unstage_unused", lambda *_a, **_k: None)
    outs = provider.update("models/sql-lora", olds, mirror).outs or {}
    assert [a.source_endpoint for a in staged] == ["https://hub.example.com"]
    assert outs["content_key"] != olds["content_key"]
    # The public Hub named explicitly is the same content as no endpoint: nothing to stage.
    public = {**mirror, "source_endpoint": "https://huggingface.co"}
    assert with_staged_path(olds, public)["path"] == olds["path"]


def test_source_public_marks_an_s3_bucket_only_and_is_no_new_content() -> None:
    digests = {"adapter_config.json": SHA}
    assert failures(source="s3://adapters/sql/", digests=digests, source_public=True) == {}
    found = failures(source=f"hf://acme/sql-lora@{COMMIT}", source_public=True)
    assert list(found) in (["source"], ["source_public"])
    assert "source_public applies to s3:// sources" in next(iter(found.values()))
    found = failures(path="/adapters/sql", source_public=True)
    assert found == {"source": "source_public apply to a staged adapter: give source too"}
    olds = staged_outputs(source="s3://adapters/sql/", digests=digests)
    news = {**BASE, "source": "s3://adapters/sql/", "digests": digests, "source_public": True}
    assert with_staged_path(olds, news)["path"] == olds["path"]  # the same directory
