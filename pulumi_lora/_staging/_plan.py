"""The stager's Job as values: where the claim is mounted, the Job's manifest, results. Pure.

Plain dicts in, no client. The Job mounts the adapter claim read-write; SGLang's pods mount it
read-only (docs/staging.md).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from pulumi_lora._staging._errors import StagingError, VolumeNotMounted, reported
from pulumi_lora._staging._serve import PORT

__all__ = [
    "JOB_ROOT",
    "AdapterMount",
    "FetchSettings",
    "StageResult",
    "adapter_mount",
    "checked_document",
    "job_document",
    "server_flags",
    "server_job",
    "stage_result",
]

JOB_ROOT = "/staging"
"""Where the Job mounts the claim (the stager's ``--root``)."""
UID = 65532
"""The image's user (deploy/Dockerfile): non-root, also the volume's group (``fsGroup``)."""
SECRET_KEYS = ("HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
"""What the stager reads from ``source_secret_name``, each optional (docs/staging.md)."""
COMPONENT_LABEL = "app.kubernetes.io/component"
SERVER_LABEL = "pulumi-lora.dev/stager"


@dataclass(frozen=True)
class AdapterMount:
    """The claim the SGLang container mounts for adapters, and where."""

    claim: str
    mount_path: str
    sub_path: str = ""

    def staged_path(self, key: str) -> str:
        """The directory pods load for content ``key``: ``<mount path>/<key>``."""
        return posixpath.join(self.mount_path, key)


def adapter_mount(
    volumes: Sequence[Mapping[str, Any]],
    mounts: Sequence[Mapping[str, Any]],
    claim: str | None,
    isvc: str,
) -> AdapterMount:
    """Pure: the PersistentVolumeClaim the InferenceService ``isvc`` mounts in its SGLang
    container (its ``extraVolumes`` and ``extraVolumeMounts``): the one named ``claim``, or the
    only one. Raises :class:`VolumeNotMounted` naming what was found and what to set."""
    claims = {
        str(v.get("name")): str((v.get("persistentVolumeClaim") or {}).get("claimName"))
        for v in volumes
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    }
    found_mounts = [
        AdapterMount(claims[m["name"]], str(m.get("mountPath")), str(m.get("subPath") or ""))
        for m in mounts
        if m.get("name") in claims and m.get("mountPath")
    ]
    found = ", ".join(f"{m.claim} at {m.mount_path}" for m in found_mounts) or "none"
    if claim is not None:
        named = [m for m in found_mounts if m.claim == claim]
        if not named:
            raise VolumeNotMounted(
                f"InferenceService {isvc} does not mount PersistentVolumeClaim {claim} "
                f"(claims it mounts: {found})"
            )
        return named[0]
    if len(found_mounts) != 1:
        raise VolumeNotMounted(
            f"InferenceService {isvc} mounts {len(found_mounts)} PersistentVolumeClaims "
            f"({found}): staging needs exactly one, or volume_claim naming it"
        )
    return found_mounts[0]


def server_flags(extra_args: Sequence[str]) -> list[str]:
    """Pure: the stager's ``--max-lora-rank`` and ``--lora-target-modules`` from the SGLang
    flags of the InferenceService (``extraArgs``), so a staged adapter the server would refuse
    fails at staging, naming the rank or module."""
    flags: list[str] = []
    args = list(extra_args)
    for index, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name == "--max-lora-rank":
            rank = value if eq else (args[index + 1] if index + 1 < len(args) else "")
            if rank.isdigit():
                flags += ["--max-lora-rank", rank]
        elif name == "--lora-target-modules":
            modules = [value] if eq else []
            for follower in args[index + 1 :] if not eq else []:
                if follower.startswith("--"):
                    break
                modules.append(follower)
            if modules:
                flags += ["--lora-target-modules", " ".join(modules)]
    return flags


class FetchSettings(TypedDict):
    """Where and with what the stager's Job runs (``server_job``'s keywords)."""

    namespace: str
    mount: AdapterMount
    image: str
    secret_name: str | None
    service_account: str | None
    hf_endpoint: str | None
    server_flags: Sequence[str]
    deadline_seconds: int


def server_job(
    name: str,
    token_sha256: str,
    *,
    namespace: str,
    mount: AdapterMount,
    image: str,
    secret_name: str | None = None,
    service_account: str | None = None,
    hf_endpoint: str | None = None,
    server_flags: Sequence[str] = (),
    deadline_seconds: int = 3600,
) -> dict[str, Any]:
    """Pure: the Job that runs ``pulumi-lora stage-serve`` on the claim for one provider
    process (``_serve``): every staging of one credential set, and the claim's verifications
    and removals, without a pod start each.

    Least privilege (docs/staging.md, threat model): non-root, read-only root file system with
    an ``emptyDir`` for temporary files, no privilege escalation or capability, no ServiceAccount
    token (unless ``service_account`` is given: workload identity signs S3 requests with it),
    credentials only as optional keys of ``secret_name``, bounded resources, no retry; the
    server answers only calls carrying the token whose sha256 it is given, ends once the
    provider is gone, and the Job goes as soon as it ends (``ttlSecondsAfterFinished: 0``).
    """
    args = ["stage-serve", "--root", JOB_ROOT, "--token-sha256", token_sha256]
    args += ["--deadline", str(deadline_seconds), *server_flags]
    job = _job(
        name,
        {SERVER_LABEL: name},
        args,
        _fetch_env(hf_endpoint, secret_name),
        namespace=namespace,
        mount=mount,
        image=image,
        service_account=service_account,
        active_seconds=deadline_seconds + 300,
        ttl_seconds=0,
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
    return job


def _fetch_env(hf_endpoint: str | None, secret_name: str | None) -> list[dict[str, Any]]:
    """Pure: a fetching container's environment: its home on the ``emptyDir``, the Hub
    endpoint, and the optional credential keys of ``secret_name``."""
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},  # noqa: S108 - the emptyDir the Job mounts
    ]
    if hf_endpoint:
        env.append({"name": "HF_ENDPOINT", "value": hf_endpoint})
    if secret_name:
        env += [
            {
                "name": name,
                "valueFrom": {"secretKeyRef": {"name": secret_name, "key": name, "optional": True}},
            }
            for name in SECRET_KEYS
        ]
    return env


def _job(
    name: str,
    marks: Mapping[str, str],
    args: list[str],
    env: list[dict[str, Any]],
    *,
    namespace: str,
    mount: AdapterMount,
    image: str,
    service_account: str | None,
    active_seconds: int,
    ttl_seconds: int,
) -> dict[str, Any]:
    """Pure: a Job of the project's image on the claim, least privilege (see server_job),
    labelled with ``marks``."""
    labels = {
        "app.kubernetes.io/name": "pulumi-lora",
        "app.kubernetes.io/managed-by": "pulumi-lora",
        COMPONENT_LABEL: "staging",
        **marks,
    }
    mount_spec: dict[str, Any] = {"name": "adapters", "mountPath": JOB_ROOT}
    if mount.sub_path:
        mount_spec["subPath"] = mount.sub_path
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": service_account is not None,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": args[0],
                "image": image,
                "args": args,
                "env": env,
                "terminationMessagePolicy": "File",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
                "volumeMounts": [mount_spec, {"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108
            }
        ],
        "volumes": [
            {"name": "adapters", "persistentVolumeClaim": {"claimName": mount.claim}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    }
    if service_account is not None:
        pod_spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_seconds,
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


@dataclass(frozen=True)
class StageResult:
    """What a staging reported on success (the stager's result document)."""

    key: str
    path: str
    fetched: bool
    bytes: int
    seconds: float


def job_document(message: str | None, exit_code: int | None) -> dict[str, Any]:
    """Pure: what the stager's container reported in its termination message (when it ended
    before serving: an image without the command, bad arguments), as :func:`checked_document`.

    A message that is missing or not the command's JSON (a container killed before it wrote
    one) is a :class:`StagingError` saying so, with the exit code.
    """
    try:
        document = json.loads(message or "")
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise StagingError(
            f"the staging container ended (exit code {exit_code}) without the stager's result "
            "in its termination message: is pulumi-lora:image an image of this project with "
            "the staging extra?"
        )
    return checked_document(document)


def checked_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: a result of the stager (a staging's, a verification's, a removal's), or the
    :class:`StagingError` it reported: the same class the stager raised, with its message."""
    if "error" in document:
        file = document.get("file")
        raise reported(str(document.get("reason")), str(document["error"]), file and str(file))
    return dict(document)


def stage_result(document: Mapping[str, Any]) -> StageResult:
    """Pure: the stager's result line as a :class:`StageResult`."""
    return StageResult(
        key=str(document.get("key", "")),
        path=str(document.get("path", "")),
        fetched=bool(document.get("fetched")),
        bytes=int(document.get("bytes") or 0),
        seconds=float(document.get("seconds") or 0.0),
    )
