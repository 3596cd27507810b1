"""How the testbed's kubelet starts in-cluster pods: their sandbox, Secrets, claims, exit message.

:class:`KubeletHooks` is a base class of ``_pods.PodPlayer``: the hooks its kubelet calls for a
re-sync loop's (or a staging Job's) container, and for the claims any pod mounts.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi_lora.testing.testbed import _incluster
from pulumi_lora.testing.testbed._container_spec import ContainerRefusedError, resolve_env
from pulumi_lora.testing.testbed._containers import start_container
from pulumi_lora.testing.testbed._kubelet import PodRuntime
from pulumi_lora.testing.testbed._podnet import LoopbackRoutes
from pulumi_lora.testing.testbed._process import ManagedProcess
from pulumi_lora.testing.testbed._rest import KubeRest

__all__ = ["KubeletHooks", "Sandbox", "SandboxUnavailableError"]


class SandboxUnavailableError(RuntimeError):
    """The in-cluster sandbox a re-sync loop pod needs is not available (the pod stays Pending)."""


@dataclass(frozen=True)
class Sandbox:
    """Where an in-cluster pod finds the apiserver (what ``_incluster`` needs)."""

    apiserver_port: int
    ca_pem: str
    containers: bool = False
    """Run the loop's pods as podman containers from their image (else as local processes)."""
    state_dir: Path | None = None
    """Where the kubelet keeps each pod's mounted files (ServiceAccount, emptyDir)."""


class KubeletHooks:
    """The kubelet's hooks of :class:`~pulumi_lora.testing.testbed._pods.PodPlayer` (a base class
    of it, which sets these attributes)."""

    rest: KubeRest
    log_dir: Path
    sandbox: Sandbox | None
    routes: LoopbackRoutes

    # --- the re-sync loop's pods ---------------------------------------------------------------

    def start_resync(self, runtime: PodRuntime) -> ManagedProcess:
        """The kubelet's hook for a ``pulumi-lora resync`` container: a real container from the
        pod's image (``_containers.py``) when the testbed runs containers, else the container's
        command as a local process in the same sandbox (``_incluster.py``). Both get a token
        bound to the pod, the ServiceAccount files and the apiserver at
        ``KUBERNETES_SERVICE_HOST`` inside the pod's network namespace.
        """
        if self.sandbox is None or runtime.net is None:
            raise SandboxUnavailableError("a re-sync pod needs a network namespace (root)")
        pod = runtime.pod
        account = pod["spec"].get("serviceAccountName") or "default"

        def token() -> str:  # bound to the pod, as the kubelet's projected volume is
            return _incluster.request_token(
                self.rest, runtime.namespace, account, runtime.name, runtime.uid
            )

        env = resolve_env(runtime.container, pod, runtime.ip, self._secret(runtime.namespace))
        log_path = self.log_dir / f"{runtime.namespace}_{runtime.name}.log"
        if runtime.kind == "stage" and not self.sandbox.containers:
            raise ContainerRefusedError(
                "CreateContainerError", "a staging Job's pod needs the container runtime (podman)"
            )
        if self.sandbox.containers:
            termination_log = self._termination_log(runtime)
            termination_log.parent.mkdir(parents=True, exist_ok=True)
            termination_log.write_bytes(b"")
            termination_log.chmod(0o666)
            return start_container(
                pod=pod,
                container=runtime.container,
                env=env,
                token=token()
                if pod["spec"].get("automountServiceAccountToken") is not False
                else None,
                ca_pem=self.sandbox.ca_pem,
                network=runtime.net,
                apiserver_port=self.sandbox.apiserver_port,
                state_dir=termination_log.parent,
                log_path=log_path,
                routes=self.routes,
                claims=self.claim_dirs(pod),
                termination_log=termination_log,
            )
        command = [str(a) for a in runtime.container.get("command", [])]
        argv = [*command, *[str(a) for a in runtime.container.get("args", []) or []]]
        process: ManagedProcess = _incluster.run_in_cluster_pod(
            name=runtime.name,
            argv=argv,
            env=env,
            namespace=runtime.namespace,
            service_account_token=token(),
            ca_pem=self.sandbox.ca_pem.encode("ascii"),
            apiserver_port=self.sandbox.apiserver_port,
            network=runtime.net,
            log_path=log_path,
            routes=self.routes,
        )
        return process

    def _termination_log(self, runtime: PodRuntime) -> Path:
        """The host file a container's ``terminationMessagePath`` is (in its state directory)."""
        state = (self.sandbox.state_dir if self.sandbox else None) or self.log_dir
        return state / runtime.uid / "termination-log"

    def termination_message(self, runtime: PodRuntime) -> str | None:
        """What the container left at its ``terminationMessagePath``: the last 4096 bytes, as a
        kubelet keeps them (``None`` when it left nothing)."""
        try:
            data = self._termination_log(runtime).read_bytes()
        except OSError:
            return None
        return data[-4096:].decode("utf-8", "replace") or None

    def _secret(self, namespace: str) -> Callable[[str, str], str | None]:
        """A reader of the Secrets of ``namespace`` (``secretKeyRef``), as a kubelet reads them."""

        def read(name: str, key: str) -> str | None:
            found = self.rest.get(f"/api/v1/namespaces/{namespace}/secrets/{name}", allow=(404,))
            encoded = ((found or {}).get("data") or {}).get(key)
            return None if encoded is None else base64.b64decode(encoded).decode()

        return read

    def claim_dirs(self, pod: dict[str, Any]) -> dict[str, Path]:
        """The host directory of each PersistentVolumeClaim volume of ``pod``, by volume name:
        its bound PersistentVolume's ``hostPath``. Raises :class:`ContainerRefusedError` for a
        claim that is missing or not bound (the pod waits, as a kubelet's would)."""
        namespace = pod["metadata"]["namespace"]
        found: dict[str, Path] = {}
        for volume in pod["spec"].get("volumes") or ():
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.rest.get(
                f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}", allow=(404,)
            )
            bound = (pvc or {}).get("spec", {}).get("volumeName")
            pv = (
                self.rest.get(f"/api/v1/persistentvolumes/{bound}", allow=(404,)) if bound else None
            )
            host = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
            if not host:
                raise ContainerRefusedError(
                    "ContainerCreating",
                    f'persistentvolumeclaim "{claim}" is not bound to a hostPath volume',
                )
            found[str(volume["name"])] = Path(host)
        return found

    def claim_mounts(
        self, pod: dict[str, Any], container: dict[str, Any]
    ) -> list[tuple[Path, str]]:
        """(host directory, mount path) of each claim ``container`` mounts."""
        claims = self.claim_dirs(pod)
        return [
            (claims[m["name"]] / str(m.get("subPath") or ""), str(m["mountPath"]))
            for m in container.get("volumeMounts") or ()
            if m.get("name") in claims
        ]
