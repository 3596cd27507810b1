"""What the testbed's kubelet makes of a container's spec: what runs it, and what it refuses.

The process kubelet's choices (kind, env, arguments) and the container runtime's (security
context, the ``podman run`` command line); all pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pulumi_lora.testing.testbed._incluster import SERVICE_ACCOUNT_DIR, pod_hostname
from pulumi_lora.testing.testbed._workloads import CONTAINER_NAME, NODE_NAME

__all__ = [
    "PODMAN",
    "ContainerKind",
    "ContainerRefusedError",
    "Mounts",
    "container_kind",
    "non_root_refusal",
    "pod_label",
    "resolve_env",
    "run_argv",
]


class ContainerRefusedError(RuntimeError):
    """The kubelet will not create this container; ``reason`` is the waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# --- the kubelet's choices -----------------------------------------------------------------------

ContainerKind = Literal["emulator", "resync", "stage", "unsupported"]
"""What the testbed's kubelet does with a container."""

RESYNC_COMMAND = ["pulumi-lora", "resync"]
"""The command of the re-sync loop's container, as ``pulumi_lora.deploy`` renders it."""
JOB_COMMANDS = ("stage", "stage-serve", "unstage", "verify-staged")
"""The first argument of the container of a stager's Job, or of a staging Job run by hand (the
image's entrypoint is ``pulumi-lora``)."""

_DROPPED_ARGS = ("--host", "--port", "--model-path", "--model")


def container_kind(container: dict[str, Any]) -> ContainerKind:
    """What this kubelet can run: the SGLang emulator, the re-sync loop, a staging Job's
    ``pulumi-lora stage``, or nothing (pure)."""
    if container.get("command") == RESYNC_COMMAND:
        return "resync"
    if not container.get("command") and (container.get("args") or [None])[0] in JOB_COMMANDS:
        return "stage"
    image = str(container.get("image", ""))
    if container.get("name") == CONTAINER_NAME or image.startswith("lmsysorg/sglang"):
        return "emulator"
    return "unsupported"


def resolve_env(
    container: dict[str, Any],
    pod: dict[str, Any],
    pod_ip: str,
    secret: Callable[[str, str], str | None] = lambda _name, _key: None,
) -> dict[str, str]:
    """The container's ``env`` with ``value``, ``fieldRef`` (name, namespace, podIP) and
    ``secretKeyRef`` (``secret(name, key)``: the value, ``None`` when the Secret or the key is
    missing, which only an ``optional`` reference allows)."""
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "status.podIP": pod_ip,
        "spec.nodeName": NODE_NAME,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
    }
    env: dict[str, str] = {}
    for item in container.get("env", []) or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif ref := item.get("valueFrom", {}).get("secretKeyRef"):
            value = secret(str(ref.get("name")), str(ref.get("key")))
            if value is None and not ref.get("optional"):
                raise ContainerRefusedError(
                    "CreateContainerConfigError",
                    f'secret "{ref.get("name")}" or its key "{ref.get("key")}" not found',
                )
            if value is not None:
                env[item["name"]] = value
        else:
            path = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
            if path in fields:
                env[item["name"]] = fields[path]
    return env


def emulator_args(args: list[str]) -> list[str]:
    """The container's SGLang arguments minus those the kubelet sets itself (pure)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _DROPPED_ARGS:
            skip = True
            continue
        if arg.split("=", 1)[0] in _DROPPED_ARGS:
            continue
        kept.append(arg)
    return kept


# --- the container runtime's ---------------------------------------------------------------------

PODMAN = ("podman", "--runtime", "runc")
"""The runtime's command: crun refuses hybrid cgroups (cgroup v1 + v2) on these VMs."""

TERMINATION_LOG = "/dev/termination-log"
"""A container's default ``terminationMessagePath``."""


def image_uid(user: str) -> tuple[int | None, str]:
    """The image's uid, or else its user name, as the CRI reports them (pure).

    ``"65532:65532"`` is uid 65532; ``"app"`` a name the kubelet cannot verify; ``""`` is root.
    """
    name = user.split(":", 1)[0]
    if not name:
        return 0, ""
    if name.isdigit():
        return int(name), ""
    return None, name


def pod_label(pod: Mapping[str, Any]) -> str:
    """How the kubelet names a pod in messages: ``name_namespace(uid)``."""
    meta = pod["metadata"]
    return f"{meta['name']}_{meta['namespace']}({meta.get('uid', '')})"


def effective_security(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's securityContext fields a container inherits, under the container's own (pure)."""
    inherited = ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile")
    pod_level = pod.get("spec", {}).get("securityContext") or {}
    merged = {key: pod_level[key] for key in inherited if key in pod_level}
    merged.update(container.get("securityContext") or {})
    return merged


def non_root_refusal(
    pod: Mapping[str, Any], container: Mapping[str, Any], image_user: str
) -> str | None:
    """The kubelet's ``verifyRunAsNonRoot``: its error message, or ``None`` if it may run (pure)."""
    security = effective_security(pod, container)
    if not security.get("runAsNonRoot"):
        return None
    where = f'(pod: "{pod_label(pod)}", container: {container.get("name", "")})'
    run_as = security.get("runAsUser")
    if run_as is not None:
        return f"container's runAsUser breaks non-root policy {where}" if run_as == 0 else None
    uid, name = image_uid(image_user)
    if uid == 0:
        return f"container has runAsNonRoot and image will run as root {where}"
    if uid is None:
        return (
            f"container has runAsNonRoot and image has non-numeric user ({name}), "
            f"cannot verify user is non-root {where}"
        )
    return None


def _memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity in bytes (``256Mi``, ``1G``, ``1048576``) (pure)."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6}
    units |= {"G": 10**9, "T": 10**12}
    for suffix in sorted(units, key=len, reverse=True):
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * units[suffix])
    return int(float(quantity))


@dataclass(frozen=True)
class Mounts:
    """Host paths the container gets: the ServiceAccount files, its volumes (``emptyDir``
    directories, claims' PersistentVolume directories) and its termination-message file."""

    service_account: Path | None
    volumes: Mapping[str, Path]
    termination_log: Path | None = None


def run_argv(
    *,
    name: str,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    env: Mapping[str, str],
    network: str,
    mounts: Mounts,
    ulimits: Mapping[str, tuple[int, int]],
) -> list[str]:
    """The ``podman run`` command line for one container of ``pod`` (pure).

    ``env`` is everything the kubelet sets (service variables, then the container's env).
    Raises :class:`ContainerRefusedError` for volumes the testbed's kubelet cannot provide.
    """
    security = effective_security(pod, container)
    argv = [*PODMAN, "run", "--rm", "--replace", "--name", name, "--pull", "never"]
    argv += ["--network", f"ns:{network}", "--hostname", pod_hostname(pod["metadata"]["name"])]
    argv += ["--unsetenv", "TERM", "--unsetenv", "container"]  # podman's, not a kubelet's
    for kind, (soft, hard) in sorted(ulimits.items()):
        argv += ["--ulimit", f"{kind}={soft}:{hard}"]
    if "runAsUser" in security:
        user = str(security["runAsUser"])
        if "runAsGroup" in security:
            user += f":{security['runAsGroup']}"
        argv += ["--user", user]
    if security.get("readOnlyRootFilesystem"):
        argv += ["--read-only", "--read-only-tmpfs=false"]
    caps = security.get("capabilities") or {}
    for cap in caps.get("drop", []) or []:
        argv += ["--cap-drop", str(cap).lower()]
    for cap in caps.get("add", []) or []:
        argv += ["--cap-add", str(cap).lower()]
    if security.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    if (security.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        argv += ["--security-opt", "seccomp=unconfined"]
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if limit:
        argv += ["--memory", str(_memory_bytes(str(limit)))]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    if mounts.service_account is not None:
        argv += ["--volume", f"{mounts.service_account}:{SERVICE_ACCOUNT_DIR}:ro"]
    if mounts.termination_log is not None:
        path = str(container.get("terminationMessagePath") or TERMINATION_LOG)
        argv += ["--volume", f"{mounts.termination_log}:{path}"]
    for mount in container.get("volumeMounts", []) or []:
        if mount["name"] not in mounts.volumes:
            raise ContainerRefusedError(
                "CreateContainerConfigError",
                "the testbed's kubelet provides emptyDir and PersistentVolumeClaim volumes only "
                f"(volume {mount['name']!r})",
            )
        host = mounts.volumes[mount["name"]] / str(mount.get("subPath") or "")
        flag = f"{str(host).rstrip('/')}:{mount['mountPath']}"
        argv += ["--volume", flag + (":ro" if mount.get("readOnly") else "")]
    command = [str(a) for a in container.get("command", []) or []]
    if command:
        argv += ["--entrypoint", json.dumps(command)]
    argv.append(str(container["image"]))
    argv += [str(a) for a in container.get("args", []) or []]
    return argv
