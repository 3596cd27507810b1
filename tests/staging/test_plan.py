"""The staging Job as values (issue 40): the claim, the manifest, the result. Pure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pulumi_lora._staging._errors import DigestMismatch, StagingError, VolumeNotMounted
from pulumi_lora._staging._plan import (
    BATCH_LABEL,
    BATCH_LIMIT,
    JOB_ROOT,
    KEY_LABEL,
    AdapterMount,
    adapter_mount,
    batch_job,
    job_name,
    server_flags,
    stage_outcome,
    staging_job,
)
from pulumi_lora._staging._source import StagingRequest, content_key, parse_source

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "ab" * 32
CLAIM = {"name": "weights", "persistentVolumeClaim": {"claimName": "adapters"}}
SCRATCH = {"name": "scratch", "emptyDir": {}}
MOUNT = {"name": "weights", "mountPath": "/adapters", "readOnly": True}


def test_the_one_claim_the_sglang_container_mounts_is_found() -> None:
    mount = adapter_mount([SCRATCH, CLAIM], [MOUNT], None, "models/llama")
    assert mount == AdapterMount("adapters", "/adapters")
    assert mount.staged_path("0011223344556677") == "/adapters/0011223344556677"


def test_a_claim_mounted_under_a_sub_path_is_staged_under_it() -> None:
    mounted = {**MOUNT, "mountPath": "/data/loras/", "subPath": "loras"}
    mount = adapter_mount([CLAIM], [mounted], "adapters", "models/llama")
    assert mount.sub_path == "loras" and mount.staged_path("k") == "/data/loras/k"


def test_no_claim_or_several_is_a_clear_error() -> None:
    with pytest.raises(VolumeNotMounted) as none:
        adapter_mount([SCRATCH], [{"name": "scratch", "mountPath": "/tmp"}], None, "m/llama")
    assert "mounts 0 PersistentVolumeClaims (none)" in str(none.value)
    assert "extraVolumes and extraVolumeMounts" in str(none.value)
    other = {"name": "more", "persistentVolumeClaim": {"claimName": "more-adapters"}}
    mounts = [MOUNT, {"name": "more", "mountPath": "/more"}]
    with pytest.raises(VolumeNotMounted) as several:
        adapter_mount([CLAIM, other], mounts, None, "m/llama")
    assert "(adapters at /adapters, more-adapters at /more)" in str(several.value)
    assert "or volume_claim naming it" in str(several.value)
    assert adapter_mount([CLAIM, other], mounts, "more-adapters", "m/llama").mount_path == "/more"
    with pytest.raises(VolumeNotMounted, match="does not mount PersistentVolumeClaim x"):
        adapter_mount([CLAIM], [MOUNT], "x", "m/llama")


def test_the_servers_lora_flags_reach_the_stager() -> None:
    extra = ["--max-lora-rank", "64", "--lora-target-modules", "q_proj", "v_proj", "--tp", "2"]
    assert server_flags(extra) == [
        "--max-lora-rank",
        "64",
        "--lora-target-modules",
        "q_proj v_proj",
    ]
    assert server_flags(["--max-lora-rank=16", "--lora-target-modules=all"]) == [
        "--max-lora-rank",
        "16",
        "--lora-target-modules",
        "all",
    ]
    assert server_flags(["--enable-lora"]) == []


def job(**overrides: Any) -> dict[str, Any]:
    request = parse_source(f"hf://acme/sql-lora@{COMMIT}")
    settings: dict[str, Any] = {
        "namespace": "models",
        "mount": AdapterMount("adapters", "/adapters"),
        "image": "registry.example.com/pulumi-lora:0.3.0",
        **overrides,
    }
    return staging_job(request, content_key(request), **settings)


def test_the_job_runs_the_stager_with_least_privilege() -> None:
    manifest = job(secret_name="hub-token", hf_endpoint="https://hub.example.com")
    key = content_key(parse_source(f"hf://acme/sql-lora@{COMMIT}"))
    assert manifest["metadata"]["name"] == job_name(key) == f"pulumi-lora-stage-{key}"
    spec = manifest["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["limits"]["memory"]
    source = f"hf://acme/sql-lora@{COMMIT}"
    assert container["args"][:5] == ["stage", "--source", source, "--root", JOB_ROOT]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_ENDPOINT"]["value"] == "https://hub.example.com"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hub-token",
        "key": "HF_TOKEN",
        "optional": True,
    }
    assert all("value" not in e for n, e in env.items() if n.startswith(("HF_TOKEN", "AWS_")))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["adapters"]["persistentVolumeClaim"] == {"claimName": "adapters"}
    assert {"name": "adapters", "mountPath": JOB_ROOT} in container["volumeMounts"]


def test_workload_identity_gets_its_service_account_and_token() -> None:
    pod = job(service_account="stager")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "stager" and pod["automountServiceAccountToken"] is True


def test_digests_endpoint_and_flags_become_arguments() -> None:
    request = parse_source(
        "s3://bucket/sql/", digests={"adapter_config.json": SHA}, s3_endpoint="http://127.0.0.1:9"
    )
    manifest = staging_job(
        request,
        content_key(request),
        namespace="m",
        mount=AdapterMount("c", "/a", "sub"),
        image="i",
        server_flags=["--max-lora-rank", "8"],
    )
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--digest") + 1] == f"adapter_config.json={SHA}"
    assert args[args.index("--s3-endpoint") + 1] == "http://127.0.0.1:9"
    assert args[-2:] == ["--max-lora-rank", "8"]
    assert {"name": "adapters", "mountPath": JOB_ROOT, "subPath": "sub"} in container[
        "volumeMounts"
    ]


def test_the_result_is_read_from_the_termination_message() -> None:
    done = {"key": "k", "path": "/staging/k", "fetched": True, "bytes": 12, "seconds": 0.5}
    result = stage_outcome(json.dumps(done), 0)
    assert (result.key, result.fetched, result.bytes) == ("k", True, 12)


def test_a_reported_failure_is_raised_as_the_stagers_own_error() -> None:
    message = "adapter_model.safetensors: sha256 x, declared y: the content is not what is pinned"
    failed = {"error": message, "reason": "DigestMismatch", "file": "adapter_model.safetensors"}
    with pytest.raises(DigestMismatch) as raised:
        stage_outcome(json.dumps(failed), 1)
    assert str(raised.value) == message  # its advice already in it, not twice
    assert raised.value.file == "adapter_model.safetensors"
    with pytest.raises(StagingError) as other:
        stage_outcome(json.dumps({"error": "x", "reason": "TooLong"}), 1)
    assert type(other.value) is StagingError


def test_no_result_names_the_image() -> None:
    with pytest.raises(StagingError, match=r"exit code 127.*pulumi-lora:image"):
        stage_outcome("exec: pulumi-lora: not found", 127)


def test_a_batch_job_stages_every_request_with_one_credential_set() -> None:
    requests = [parse_source(f"hf://acme/a{i}@{COMMIT}") for i in range(3)]
    manifest = batch_job(
        requests,
        namespace="models",
        mount=AdapterMount("adapters", "/adapters"),
        image="i",
        secret_name="hub-token",
        hf_endpoint="https://hub.example.com",
        server_flags=["--max-lora-rank", "8"],
    )
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:3] == ["stage-batch", "--root", JOB_ROOT]
    assert args[-5:-3] == ["--max-lora-rank", "8"]
    assert [StagingRequest.from_json(text) for text in args[-3:]] == requests
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_ENDPOINT"]["value"] == "https://hub.example.com"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hub-token"
    assert pod["automountServiceAccountToken"] is False
    labels = manifest["metadata"]["labels"]
    assert KEY_LABEL not in labels and BATCH_LABEL in labels  # no one content key names it
    reordered = batch_job(
        requests[::-1], namespace="models", mount=AdapterMount("adapters", "/adapters"), image="i"
    )
    assert reordered["metadata"]["name"] == manifest["metadata"]["name"]  # named by the keys


def test_a_batch_holds_two_to_the_limit() -> None:
    mount = AdapterMount("adapters", "/adapters")
    one = [parse_source(f"hf://acme/a@{COMMIT}")]
    with pytest.raises(ValueError, match="2 to"):
        batch_job(one, namespace="m", mount=mount, image="i")
    many = [parse_source(f"hf://acme/a{i}@{COMMIT}") for i in range(BATCH_LIMIT + 1)]
    with pytest.raises(ValueError, match="2 to"):
        batch_job(many, namespace="m", mount=mount, image="i")
