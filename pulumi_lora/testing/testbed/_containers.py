"""Real containers for the testbed's kubelet: podman (with runc) runs a pod's container from an
image in local storage, as a kubelet's container runtime would.

What the kubelet gives the container, and how it is played here:

- **the image**: only what is in podman's local storage (no registry is reachable); a missing
  one leaves the pod waiting with ``ErrImagePull`` and a message naming how to build it;
- **the pod's network namespace** (``--network ns:/run/netns/...``), made by ``_netns.py``; the
  apiserver at ``127.0.0.1:<port>`` inside it through ``_incluster``'s relay;
- **command and args** as Kubernetes maps them: ``command`` replaces the image's ENTRYPOINT,
  ``args`` its CMD; the container's ``env`` (downward API resolved) over the ``kubernetes``
  Service variables; the hostname is the pod's name;
- **the ServiceAccount token, CA and namespace** at the standard
  ``/var/run/secrets/kubernetes.io/serviceaccount``, read-only (a token bound to the Pod, from
  a TokenRequest); ``emptyDir`` volumes;
- **the security context**, pod level under container level, enforced: ``runAsNonRoot`` is
  verified against the image's user with the kubelet's own messages
  (``_container_spec.non_root_refusal``), ``runAsUser``/``runAsGroup``,
  ``readOnlyRootFilesystem`` (no tmpfs anywhere the spec does not declare one), ``capabilities``,
  ``allowPrivilegeEscalation: false`` (no_new_privs) and ``seccompProfile`` (``RuntimeDefault``
  is podman's default profile; unset is ``Unconfined``, as in Kubernetes);
  ``resources.limits.memory`` as the cgroup's limit.

Two traps of these machines are handled here: ``crun`` refuses their hybrid cgroup layout, so
runc is named; root lacks ``CAP_SYS_RESOURCE`` in the VM, so the rlimits podman would set by
default fail and explicit ones within the current hard limits are passed.

Stopping is the runtime's: ``podman stop --time <grace>`` (SIGTERM, then SIGKILL), since a
SIGKILL to the attached ``podman run`` would leave the container running under conmon.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pulumi_lora._version import __version__
from pulumi_lora.testing.testbed._container_spec import (
    PODMAN,
    ContainerRefusedError,
    Mounts,
    non_root_refusal,
    run_argv,
)
from pulumi_lora.testing.testbed._incluster import (
    InClusterProcess,
    PodRoutes,
    pod_environment,
    pod_hostname,
)
from pulumi_lora.testing.testbed._netns import PodNetwork

__all__ = [
    "ContainerProcess",
    "ContainerRuntime",
    "ImageInfo",
    "container_runtime_unavailable_reason",
    "image_present",
    "inspect_image",
    "loop_image",
    "start_container",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

ContainerRuntime = Literal["auto", "podman", "process"]
"""How a testbed runs the loop's pods: see ``Testbed(container_runtime=...)``."""

NPROC_LIMIT = 4096
"""``RLIMIT_NPROC`` inside containers: runc cannot raise it to the host's hard limit here."""


def loop_image() -> str:
    """The loop's image as ``python3 tools/image.py`` tags it: ``localhost/pulumi-lora:VERSION``."""
    return f"localhost/pulumi-lora:{__version__}"


def image_present(image: str) -> bool:
    """Whether ``image`` is in podman's local storage (``False`` without podman)."""
    return shutil.which("podman") is not None and inspect_image(image) is not None


_PROBE_TIMEOUT = 60.0
_STOP_SLACK = 15.0  # beyond the grace period, for podman itself
_RUNTIME_ENV_DROPPED = ("PATH", "HOME", "HOSTNAME")  # the image's (or the runtime's) values win

_lock = threading.Lock()
_probed: dict[str, str | None] = {}


# --- what works here -----------------------------------------------------------------------------


def container_runtime_unavailable_reason() -> str | None:
    """Why podman cannot run containers here, or ``None`` if it can (probed once per process)."""
    with _lock:
        if "reason" not in _probed:
            _probed["reason"] = _probe()
        return _probed["reason"]


def _probe() -> str | None:
    if os.geteuid() != 0:
        return "running pods as containers needs root (rootful podman, network namespaces)"
    for tool, package in (("podman", "podman"), ("runc", "runc")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install {package}; tools/provision.py does)"
    done = subprocess.run(
        [*PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
        capture_output=True,
        text=True,
        timeout=_PROBE_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        return f"`podman --runtime runc info` failed: {done.stderr.strip()[-300:]}"
    return None


# --- the image -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageInfo:
    """What the kubelet reads of an image: its id and its configured user."""

    id: str
    user: str


def inspect_image(image: str) -> ImageInfo | None:
    """The image in podman's local storage (``None`` when it is not there)."""
    done = subprocess.run(
        ["podman", "image", "inspect", image, "--format", "{{json .}}"],
        capture_output=True,
        text=True,
        timeout=_PROBE_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        return None
    info = json.loads(done.stdout)
    if isinstance(info, list):
        info = info[0]
    return ImageInfo(id=str(info.get("Id", "")), user=str(info.get("Config", {}).get("User", "")))


# --- the host's limits ---------------------------------------------------------------------------


def host_ulimits() -> dict[str, tuple[int, int]]:
    """rlimits podman may set here: open files at the hard limit, processes at a safe number."""
    _, files = resource.getrlimit(resource.RLIMIT_NOFILE)
    _, procs = resource.getrlimit(resource.RLIMIT_NPROC)
    files = files if files != resource.RLIM_INFINITY else 1 << 20
    procs = min(NPROC_LIMIT, procs) if procs != resource.RLIM_INFINITY else NPROC_LIMIT
    return {"nofile": (files, files), "nproc": (procs, procs)}


# --- the process ---------------------------------------------------------------------------------


class ContainerProcess(InClusterProcess):
    """``podman run`` attached (its output in the pod's log), with the apiserver relay of
    :class:`~pulumi_lora.testing.testbed._incluster.InClusterProcess`; stopped by the runtime."""

    def __init__(
        self,
        what: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        container_name: str,
        grace: float,
        secrets: Sequence[str],
        network: PodNetwork,
        apiserver_port: int,
        routes: PodRoutes | None = None,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        super().__init__(
            what,
            argv,
            log_path,
            env=env,
            secrets=secrets,
            network=network,
            apiserver_port=apiserver_port,
            routes=routes,
        )
        self.container_name = container_name
        self.grace = grace

    def host_pid(self) -> int | None:
        """The container's first process as the host sees it (``None`` unless running)."""
        done = subprocess.run(
            ["podman", "inspect", "--format", "{{.State.Pid}}", self.container_name],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
        pid = done.stdout.strip()
        return int(pid) if done.returncode == 0 and pid.isdigit() and int(pid) > 0 else None

    def _started(self) -> bool:
        """Wait until the container's process runs, as the kubelet's pod worker finishes a
        container's start before it stops it; whether it runs.

        A signal sent while the runtime is still creating the container reaches ``runc init``
        and is lost at the ``exec``: the container would then run out its whole grace period.
        """
        deadline = time.monotonic() + _STOP_SLACK
        while self.alive() and time.monotonic() < deadline:
            if self.host_pid() is not None:
                return True
            time.sleep(0.05)
        return self.alive()

    def _runtime(self, *args: str, timeout: float) -> None:
        done = subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0 and "no such container" not in done.stderr.lower():
            _log.warning("podman %s: %s", " ".join(args), done.stderr.strip()[-300:])

    def terminate(self) -> None:
        """SIGTERM the container without waiting (once it has started)."""
        if self._started():
            self._runtime("kill", "--signal", "TERM", self.container_name, timeout=_STOP_SLACK)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after the pod's ``terminationGracePeriodSeconds``, by the
        runtime (``timeout`` is the caller's wait for a process; a container gets its grace)."""
        with self._lock:
            if self._started():
                grace = max(0, round(self.grace))
                self._runtime(
                    "stop", "--time", str(grace), self.container_name, timeout=grace + _STOP_SLACK
                )
            code = super().stop(max(timeout, _STOP_SLACK))
            self._remove()
            return code

    def kill(self) -> int | None:
        """SIGKILL the container at once (a crash), and reap ``podman run``."""
        with self._lock:
            if self.alive():
                self._runtime("kill", "--signal", "KILL", self.container_name, timeout=_STOP_SLACK)
            code = super().stop(_STOP_SLACK)
            self._remove()
            return code

    def _remove(self) -> None:
        """Remove the container even if it never started (``--rm`` acts only on an exit): a
        ``podman run`` stopped while it was still creating leaves one in ``Created``."""
        self._runtime("rm", "--force", "--ignore", self.container_name, timeout=_STOP_SLACK)


def _write_service_account(directory: Path, token: str, ca_pem: str, namespace: str) -> None:
    """The projected volume's files: world-readable, in a directory only the mount exposes."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("token", token), ("ca.crt", ca_pem), ("namespace", namespace)):
        path = directory / name
        path.write_text(text, encoding="ascii")
        path.chmod(0o644)
    directory.chmod(0o755)


def _empty_dirs(pod: Mapping[str, Any], state_dir: Path) -> dict[str, Path]:
    """One host directory per ``emptyDir`` volume, world-writable as the kubelet makes them."""
    made: dict[str, Path] = {}
    for volume in pod.get("spec", {}).get("volumes", []) or []:
        if "emptyDir" in volume:
            path = state_dir / "volumes" / str(volume["name"])
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            made[str(volume["name"])] = path
    return made


def start_container(
    *,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    env: Mapping[str, str],
    token: str | None,
    ca_pem: str,
    network: PodNetwork,
    apiserver_port: int,
    state_dir: Path,
    log_path: Path,
    routes: PodRoutes | None = None,
    claims: Mapping[str, Path] | None = None,
    termination_log: Path | None = None,
) -> ContainerProcess:
    """Check the image and the security context as the kubelet does, then start the container.

    ``env`` is the container's resolved env; ``token`` the ServiceAccount token to mount
    (``None``: ``automountServiceAccountToken: false``); ``claims`` the directories of its
    PersistentVolumeClaim volumes, by volume name; ``termination_log`` the host file mounted at
    its ``terminationMessagePath``. Raises :class:`ContainerRefusedError` with
    the kubelet's waiting reason when it will not run.
    """
    missing = container_runtime_unavailable_reason()
    if missing is not None:
        raise ContainerRefusedError("CreateContainerError", f"no container runtime: {missing}")
    image = str(container.get("image", ""))
    info = inspect_image(image)
    if info is None:
        raise ContainerRefusedError(
            "ErrImagePull",
            f'the testbed pulls no images: "{image}" is not in the node\'s local storage '
            "(podman); build the loop's image with `python3 tools/image.py` "
            "(localhost/pulumi-lora:VERSION) or load yours with `podman load`",
        )
    refusal = non_root_refusal(pod, container, info.user)
    if refusal is not None:
        raise ContainerRefusedError("CreateContainerConfigError", refusal)
    meta = pod["metadata"]
    account: Path | None = None
    if token is not None:
        account = state_dir / "serviceaccount"
        _write_service_account(account, token, ca_pem, str(meta["namespace"]))
    hostname = pod_hostname(str(meta["name"]))
    pod_env = pod_environment(env, apiserver_port=apiserver_port, hostname=hostname)
    for key in _RUNTIME_ENV_DROPPED:
        if key not in env:
            pod_env.pop(key, None)
    uid = str(meta.get("uid", ""))[:8]
    name = f"k8s_{container.get('name', 'main')}_{meta['name']}_{meta['namespace']}_{uid}"
    argv = run_argv(
        name=name,
        pod=pod,
        container=container,
        env=pod_env,
        network=f"/run/netns/{network.namespace}",
        mounts=Mounts(account, {**_empty_dirs(pod, state_dir), **(claims or {})}, termination_log),
        ulimits=host_ulimits(),
    )
    grace = float(pod.get("spec", {}).get("terminationGracePeriodSeconds", 30))
    process = ContainerProcess(
        f"pod {meta['name']}",
        argv,
        log_path,
        container_name=name,
        grace=grace,
        secrets=[token] if token else [],
        network=network,
        apiserver_port=apiserver_port,
        routes=routes,
    )
    process.start()
    return process
