"""Staging from a real S3-compatible server on loopback (moto's ``moto_server``) through boto3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx2
import pytest
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._staging._errors import (
    DigestMismatch,
    SourceFileMissing,
    SourceTooLarge,
    SourceUnauthorized,
)
from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import content_key, parse_source
from pulumi_lora._staging._transfer import TransferLimits

from .conftest import Adapter, MotoServer, leftovers, staged_names
from .played import PlayedHttp, Reply

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
    assert first.fetched and leftovers(tmp_path) == staged_names(first.key)
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


# --- Who the stager signs as (issue 53): web identity, Pod Identity, a public bucket --------

ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::adapters/id/*"}
    ],
}
"""The stager's role may read the objects under ``adapters/id/`` and nothing else."""


@pytest.fixture(scope="module")
def role(moto: MotoServer, bucket: Any) -> str:
    """An IAM role for the stager, as IRSA and Pod Identity hand out: its ARN."""
    iam = boto3.client("iam", endpoint_url=moto.endpoint, **admin(moto))
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": "arn:aws:iam::123456789012:oidc-provider/oidc.eks"},
                "Action": "sts:AssumeRoleWithWebIdentity",
            }
        ],
    }
    arn = str(
        iam.create_role(RoleName="stager", AssumeRolePolicyDocument=json.dumps(trust))["Role"][
            "Arn"
        ]
    )
    iam.put_role_policy(
        RoleName="stager", PolicyName="read-adapters", PolicyDocument=json.dumps(ROLE_POLICY)
    )
    return arn


def admin(moto: MotoServer) -> dict[str, str]:
    return {
        "aws_access_key_id": moto.env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": moto.env["AWS_SECRET_ACCESS_KEY"],
        "region_name": "us-east-1",
    }


@contextmanager
def signed_only(moto: MotoServer, unchecked: int = 0) -> Iterator[None]:
    """moto checks every request's signature and the signer's IAM policies (its IAM
    authentication), but for the first ``unchecked`` actions: STS's AssumeRoleWithWebIdentity is
    unsigned by design, and moto cannot check an unsigned request. An unsigned GetObject of a
    private object is refused (403) either way."""
    httpx2.post(f"{moto.endpoint}/moto-api/reset-auth", content=str(unchecked).encode())
    try:
        yield
    finally:
        httpx2.post(f"{moto.endpoint}/moto-api/reset-auth", content=b"inf")


def test_a_web_identity_signs_the_requests_for_a_private_bucket(
    moto: MotoServer, bucket: Any, role: str, adapter: Adapter, tmp_path: Path
) -> None:
    """EKS IRSA: AWS_ROLE_ARN and a projected token file, no key. The requests used to go
    unsigned (AccessDenied); moto now checks they are signed by the role STS handed out."""
    upload(bucket, "id/irsa/", adapter.files)
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2ln")
    env = {
        "AWS_ROLE_ARN": role,
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token),
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_STS": moto.endpoint,
    }
    request = parse_source(
        "s3://adapters/id/irsa/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    with signed_only(moto, unchecked=1):
        result = stage(request, tmp_path / "root", env=env)
    assert result.fetched and result.key == content_key(request)
    assert {n: f.sha256 for n, f in result.files.items()} == adapter.digests

    # The role's policy is what moto checked: outside adapters/id/ it is refused.
    upload(bucket, "elsewhere/", adapter.files)
    other = parse_source(
        "s3://adapters/elsewhere/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    with signed_only(moto, unchecked=1), pytest.raises(SourceUnauthorized, match="AccessDenied"):
        stage(other, tmp_path / "root", env=env)


def test_pod_identity_credentials_sign_the_requests(
    moto: MotoServer, bucket: Any, role: str, adapter: Adapter, tmp_path: Path, played: PlayedHttp
) -> None:
    """EKS Pod Identity: the agent's URL and a token file; the agent hands out the role's
    credentials to a request carrying the token."""
    sts = boto3.client("sts", endpoint_url=moto.endpoint, **admin(moto))
    issued = sts.assume_role(RoleArn=role, RoleSessionName="pod-identity")["Credentials"]
    expiry = datetime.now(UTC) + timedelta(hours=1)
    played.routes["GET /v1/credentials"] = Reply(
        headers={"Content-Type": "application/json"},
        body=json.dumps(
            {
                "AccessKeyId": issued["AccessKeyId"],
                "SecretAccessKey": issued["SecretAccessKey"],
                "Token": issued["SessionToken"],
                "Expiration": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ).encode(),
    )
    token = tmp_path / "eks-pod-identity-token"
    token.write_text("pod-identity-token")
    upload(bucket, "id/pod/", adapter.files)
    env = {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": f"{played.url}/v1/credentials",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(token),
        "AWS_REGION": "us-east-1",
    }
    request = parse_source(
        "s3://adapters/id/pod/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    with signed_only(moto):
        result = stage(request, tmp_path / "root", env=env)
    assert result.fetched and sorted(result.files) == sorted(adapter.files)
    assert played.count("GET /v1/credentials").authorizations == ["pod-identity-token"]


def test_no_credentials_for_a_bucket_not_marked_public_says_how_to_give_them(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path
) -> None:
    upload(bucket, "id/none/", adapter.files)
    request = parse_source(
        "s3://adapters/id/none/", digests=adapter.digests, s3_endpoint=moto.endpoint
    )
    with pytest.raises(SourceUnauthorized) as refused:
        stage(request, tmp_path, env={"AWS_REGION": "us-east-1"})
    message = str(refused.value)
    assert message.startswith("s3://adapters/id/none/: no AWS credentials in the stager's ")
    for way in ("source_secret_name", "source_service_account", "source_public=True"):
        assert way in message


def test_a_bucket_marked_public_is_fetched_without_signing(
    moto: MotoServer, bucket: Any, adapter: Adapter, tmp_path: Path, played: PlayedHttp
) -> None:
    """No credential is looked for: not even the keys or the agent the environment names."""
    for name, data in adapter.files.items():
        bucket.put_object(Bucket="adapters", Key=f"open/{name}", Body=data, ACL="public-read")
    request = parse_source(
        "s3://adapters/open/", digests=adapter.digests, s3_endpoint=moto.endpoint, s3_public=True
    )
    env = {
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIA-NOT-A-KEY-OF-MOTO",
        "AWS_SECRET_ACCESS_KEY": "wrong",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": f"{played.url}/v1/credentials",
    }
    result = stage(request, tmp_path, env=env)
    assert result.fetched and sorted(result.files) == sorted(adapter.files)
    assert played.count("GET /v1/credentials").requests == 0


def test_a_web_identity_whose_token_cannot_be_read_says_so(tmp_path: Path) -> None:
    request = parse_source("s3://adapters/id/x/", digests={"adapter_config.json": "0" * 64})
    env = {
        "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/stager",
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "no-token"),
        "AWS_REGION": "us-east-1",
    }
    with pytest.raises(SourceUnauthorized, match="the web identity token file could not be read"):
        stage(request, tmp_path / "root", env=env)
