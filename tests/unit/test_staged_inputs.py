"""A staged adapter's inputs (issue 40): ``source`` instead of ``path``, checked before anything
touches a cluster, each failure on the property a user fixes."""

from __future__ import annotations

from typing import Any

import pytest

from pulumi_lora._lifecycle import AdapterState
from pulumi_lora._models import AdapterArgs
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
