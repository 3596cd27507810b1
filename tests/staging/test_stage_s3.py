"""Staging from a real S3-compatible server on loopback (moto's ``moto_server``) through boto3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._staging._errors import DigestMismatch, SourceFileMissing, SourceTooLarge
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import parse_source
from pulumi_lora._staging._transfer import TransferLimits

from .conftest import Adapter, MotoServer, leftovers

# moto_server starts in about a second: once per module, so the module is in the full tier.
WEIGHTS = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def bucket(moto: MotoServer) -> Iterator[Any]:
    client = boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        aws_access_key_id=moto.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=moto.env["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="adapters")
    yield client


def upload(client: Any, prefix: str, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        client.put_object(Bucket="adapters", Key=prefix + name, Body=data)


def test_a_pinned_prefix_lands_verified_at_its_key_and_stages_once(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    upload(bucket, "sql/", adapter.files)
    request = parse_source("s3://adapters/sql/", digests=adapter.digests, s3_endpoint=moto.endpoint)
    events: list[str] = []
    first = stage(request, tmp_path, env=moto.env, log=lambda e, **_f: events.append(e))
    assert first.fetched and leftovers(tmp_path) == [first.key]
    assert {n: (Path(first.path) / n).read_bytes() for n in adapter.files} == adapter.files
    assert events.count("fetched_file") == 2

    # Staging again fetches nothing: with the objects gone it still succeeds from the volume.
    for name in adapter.files:
        bucket.delete_object(Bucket="adapters", Key=f"sql/{name}")
    again = stage(request, tmp_path, env=moto.env)
    assert not again.fetched and again.files == first.files


def test_the_endpoint_can_come_from_aws_endpoint_url(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    upload(bucket, "env/", adapter.files)
    request = parse_source("s3://adapters/env/", digests=adapter.digests)
    result = stage(request, tmp_path, env={**moto.env, "AWS_ENDPOINT_URL": moto.endpoint})
    assert sorted(result.files) == sorted(adapter.files)


def test_an_unpinned_prefix_is_listed_when_allowed(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    upload(bucket, "listed/", {**adapter.files, "sub/notes.txt": b"n", ".keep": b""})
    request = parse_source("s3://adapters/listed/", allow_mutable=True, s3_endpoint=moto.endpoint)
    result = stage(request, tmp_path, env=moto.env)
    assert sorted(result.files) == ["adapter_config.json", WEIGHTS, "sub/notes.txt"]


def test_a_flipped_byte_fails_naming_the_file_and_leaves_nothing(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    served = bytearray(adapter.files[WEIGHTS])
    served[-1] ^= 0x01
    upload(bucket, "flipped/", {**adapter.files, WEIGHTS: bytes(served)})
    request = parse_source(
        "s3://adapters/flipped/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    with pytest.raises(DigestMismatch) as mismatch:
        stage(request, tmp_path, env=moto.env)
    assert mismatch.value.file == WEIGHTS
    assert leftovers(tmp_path) == []


def test_a_missing_object_and_a_missing_bucket_are_named(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    upload(bucket, "partial/", {"adapter_config.json": adapter.files["adapter_config.json"]})
    request = parse_source(
        "s3://adapters/partial/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    with pytest.raises(SourceFileMissing) as missing:
        stage(request, tmp_path, env=moto.env)
    assert missing.value.file == WEIGHTS
    assert missing.value.detail == (f"s3://adapters/partial/{WEIGHTS}: no such object (NoSuchKey)")
    nowhere = parse_source(
        "s3://no-such-bucket/x/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    with pytest.raises(SourceFileMissing, match=r"no such bucket \(NoSuchBucket\)"):
        stage(nowhere, tmp_path, env=moto.env)
    assert leftovers(tmp_path) == []


def test_credentials_never_reach_messages_or_results(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    upload(bucket, "secret/", adapter.files)
    request = parse_source(
        "s3://adapters/secret/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    result = stage(request, tmp_path, env=moto.env)
    text = repr(result.document())
    assert moto.env["AWS_SECRET_ACCESS_KEY"] not in text
    assert moto.env["AWS_ACCESS_KEY_ID"] not in text


def test_a_listed_key_that_is_no_plain_path_reaches_the_termination_log(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    """check_file_name's ValueError on a listed key used to end the command in a traceback."""
    upload(bucket, "ad/", {**adapter.files, "x//y.bin": b"y"})
    log = tmp_path / "termination-log"
    log.write_text("")
    result = CliRunner().invoke(
        cli,
        [
            "stage",
            "--source=s3://adapters/ad/",
            "--allow-mutable",
            f"--s3-endpoint={moto.endpoint}",
            f"--root={tmp_path / 'root'}",
            f"--termination-log={log}",
        ],
        env=moto.env,
        catch_exceptions=False,
    )
    assert (result.exit_code, result.stdout) == (1, "")
    document = json.loads(log.read_text())
    assert document["reason"] == "InvalidSource" and document["file"] == "x//y.bin"
    assert document["error"].startswith(
        "s3://adapters/ad/: the source lists 'x//y.bin', not a plain relative file path"
    )
    assert result.stderr.splitlines()[-1] == f"Error: {document['error']}"
    assert leftovers(tmp_path / "root") == []


def test_a_listing_beyond_max_bytes_is_refused_before_any_object_is_fetched(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    upload(bucket, "big/", adapter.files)
    request = parse_source("s3://adapters/big/", allow_mutable=True, s3_endpoint=moto.endpoint)
    events: list[str] = []
    with pytest.raises(SourceTooLarge, match=r"the files listed add up to \d+ bytes, more than"):
        stage(
            request,
            tmp_path,
            env=moto.env,
            transfer=TransferLimits(max_bytes=100 << 10),
            log=lambda e, **_f: events.append(e),
        )
    assert "fetch_file" not in events
    assert leftovers(tmp_path) == []
