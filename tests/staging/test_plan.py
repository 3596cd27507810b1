"""The staging Job as values (issue 40): the claim, the manifest, the result. Pure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pulumi_lora._staging._errors import DigestMismatch, StagingError, VolumeNotMounted
from pulumi_lora._staging._plan import (
    JOB_ROOT,
    SERVER_LABEL,
    AdapterMount,
    adapter_mount,
    checked_document,
    job_document,
    server_flags,
    server_job,
    stage_result,
)
from pulumi_lora._staging._serve import PORT, token_digest

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
    settings: dict[str, Any] = {
        "namespace": "models",
        "mount": AdapterMount("adapters", "/adapters"),
        "image": "registry.example.com/pulumi-lora:0.3.0",
        **overrides,
    }
    return server_job("pulumi-lora-stager-0a1b2c3d4e", token_digest("tok-3f9a"), **settings)


def test_the_job_serves_the_stager_with_least_privilege() -> None:
    manifest = job(secret_name="hub-token", hf_endpoint="https://hub.example.com")
    assert manifest["metadata"]["name"] == "pulumi-lora-stager-0a1b2c3d4e"
    assert manifest["metadata"]["labels"][SERVER_LABEL] == "pulumi-lora-stager-0a1b2c3d4e"
    spec = manifest["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] == 0  # gone once ended
    assert spec["activeDeadlineSeconds"] > 3600
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
    args = container["args"]
    assert args[:3] == ["stage-serve", "--root", JOB_ROOT]
    assert args[args.index("--token-sha256") + 1] == token_digest("tok-3f9a")
    assert "tok-3f9a" not in json.dumps(manifest)  # the token itself never leaves the provider
    assert container["ports"] == [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
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


def test_flags_and_sub_path_reach_the_server() -> None:
    manifest = job(mount=AdapterMount("c", "/a", "sub"), server_flags=["--max-lora-rank", "8"])
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["args"][-2:] == ["--max-lora-rank", "8"]
    assert {"name": "adapters", "mountPath": JOB_ROOT, "subPath": "sub"} in container[
        "volumeMounts"
    ]
    env = {e["name"] for e in container["env"]}
    assert not env & {"HF_ENDPOINT", "HF_TOKEN", "AWS_ACCESS_KEY_ID"}  # none given: none set


def test_a_result_document_is_read_as_the_stager_wrote_it() -> None:
    done = {"key": "k", "path": "/staging/k", "fetched": True, "bytes": 12, "seconds": 0.5}
    result = stage_result(checked_document(done))
    assert (result.key, result.fetched, result.bytes) == ("k", True, 12)
    assert stage_result(job_document(json.dumps(done), 0)) == result


def test_a_reported_failure_is_raised_as_the_stagers_own_error() -> None:
    message = "adapter_model.safetensors: sha256 x, declared y: the content is not what is pinned"
    failed = {"error": message, "reason": "DigestMismatch", "file": "adapter_model.safetensors"}
    with pytest.raises(DigestMismatch) as raised:
        checked_document(failed)
    assert str(raised.value) == message  # its advice already in it, not twice
    assert raised.value.file == "adapter_model.safetensors"
    with pytest.raises(StagingError) as other:
        job_document(json.dumps({"error": "x", "reason": "TooLong"}), 1)
    assert type(other.value) is StagingError


def test_no_result_names_the_image() -> None:
    with pytest.raises(StagingError, match=r"exit code 127.*pulumi-lora:image"):
        job_document("exec: pulumi-lora: not found", 127)
