"""What a started testbed offers tests: its files, tokens, clients, kubectl and namespaces.

:class:`TestbedAccess` is a base class of ``_testbed.Testbed``, which starts and stops what it
reads.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client, KubeConfig

from pulumi_lora.testing.testbed._apiserver import ApiServer, Etcd
from pulumi_lora.testing.testbed._binaries import Binary
from pulumi_lora.testing.testbed._controller_manager import ControllerManager
from pulumi_lora.testing.testbed._crds import FIELD_MANAGER
from pulumi_lora.testing.testbed._llmkube import held_off
from pulumi_lora.testing.testbed._pods import PodPlayer
from pulumi_lora.testing.testbed._rest import KubeRest
from pulumi_lora.testing.testbed._testbed_pods import TestbedError

__all__ = ["ADMIN_USER", "TestbedAccess"]

ADMIN_USER = "testbed-admin"
"""User name of the testbed's ``system:masters`` token."""

_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


class TestbedAccess:
    """Access to a started :class:`~pulumi_lora.testing.testbed.Testbed` (a base class of it,
    which sets these attributes)."""

    __test__ = False  # not a pytest test class

    _dir: Path | None
    _admin_token: str
    _kubeconfig: Path | None
    _audit_log: Path | None
    _binaries: dict[str, Binary]
    _etcd: Etcd | None
    _apiserver: ApiServer | None
    _controller_manager: ControllerManager | None
    _rest: KubeRest | None
    _llmkube_rest: KubeRest | None
    _player: PodPlayer | None
    _lock: threading.RLock
    _namespaces: list[str]

    # --- access ------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The testbed's working directory (certificates, logs, kubeconfig, adapter root)."""
        if self._dir is None:
            raise TestbedError("the testbed is not started")
        return self._dir

    @property
    def server(self) -> str:
        """The apiserver URL, ``https://127.0.0.1:PORT``."""
        return self._require_apiserver().url

    @property
    def admin_token(self) -> str:
        """The ``system:masters`` bearer token (random per launch; never log it)."""
        return self._admin_token

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig (CA embedded, TLS verified, token user)."""
        if self._kubeconfig is None:
            raise TestbedError("the testbed is not started")
        return self._kubeconfig

    @property
    def ca_path(self) -> Path:
        """PEM file of the CA that signed the apiserver's serving certificate."""
        return self.directory / "certs" / "ca.crt"

    @property
    def audit_log_path(self) -> Path | None:
        """The apiserver's JSON audit log (Metadata level), or ``None`` when audit is off."""
        return self._audit_log

    @property
    def adapter_root(self) -> Path:
        """The emulators' ``--emulator-fs-root``: ``/adapters/x`` is ``adapter_root/adapters/x``."""
        return self.directory / "fsroot"

    @property
    def versions(self) -> dict[str, str]:
        """Component → version reported by the binary itself."""
        return {name: binary.version for name, binary in self._binaries.items()}

    @property
    def binaries(self) -> dict[str, Path]:
        """Component → path of the executable used."""
        return {name: binary.path for name, binary in self._binaries.items()}

    @property
    def pids(self) -> dict[str, int | None]:
        """Process ids of etcd, the apiserver and the controller-manager (``None`` when stopped
        or exited)."""
        etcd, apiserver, manager = self._etcd, self._apiserver, self._controller_manager
        return {
            "etcd": etcd.process.pid if etcd and etcd.process.alive() else None,
            "kube-apiserver": (
                apiserver.process.pid if apiserver and apiserver.process.alive() else None
            ),
            "kube-controller-manager": (
                manager.process.pid if manager and manager.process.alive() else None
            ),
        }

    @property
    def controller_manager_exit(self) -> int | None:
        """The status kube-controller-manager exited with, or ``None`` while it runs.

        A crashed controller-manager is reported here, in :attr:`pids` and in an error log
        with its log's tail; it is not restarted (nothing would roll out or be collected)."""
        manager = self._controller_manager
        return None if manager is None else manager.exit_status()

    @property
    def controller_manager_log_path(self) -> Path:
        """kube-controller-manager's own log (klog lines)."""
        return self.directory / "kube-controller-manager.log"

    @property
    def rest(self) -> KubeRest:
        """The testbed's own JSON REST client (admin)."""
        return self._require_rest()

    def kubeconfig_dict(self, token: str | None = None, user: str = ADMIN_USER) -> dict[str, Any]:
        """A kubeconfig for ``token`` (default: the admin token) as a dict."""
        ca = base64.b64encode(self.ca_path.read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testbed",
                    "cluster": {"server": self.server, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": user, "user": {"token": token or self._admin_token}}],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
            "current-context": "testbed",
        }

    def write_kubeconfig(
        self, path: Path, token: str | None = None, user: str = ADMIN_USER
    ) -> Path:
        """Write a kubeconfig for ``token`` (default: admin) at ``path`` (mode 0600)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(self.kubeconfig_dict(token, user)), encoding="utf-8")
        return path

    def client(self, token: str | None = None, *, namespace: str | None = None) -> Client:
        """A lightkube ``Client`` for this testbed (admin unless ``token`` is given)."""
        config = KubeConfig.from_dict(self.kubeconfig_dict(token, "user" if token else ADMIN_USER))
        return Client(config, namespace=namespace, field_manager=FIELD_MANAGER, trust_env=False)

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 60.0, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run the located kubectl against this testbed (``--kubeconfig`` set), capturing text."""
        argv = [str(self._binaries["kubectl"].path), f"--kubeconfig={self.kubeconfig_path}", *args]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        return subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=check, env=env
        )

    def apply_manifests(self, manifests: Sequence[dict[str, Any]]) -> None:
        """``kubectl apply`` plain manifests (e.g. ``pulumi_lora.deploy.coexistence_policy()``) as
        the admin; raises :class:`TestbedError` with kubectl's message when it refuses."""
        text = "\n---\n".join(json.dumps(m) for m in manifests)
        done = self.kubectl("apply", "--server-side", "-f", "-", input=text)
        if done.returncode != 0:
            raise TestbedError(f"kubectl apply failed: {done.stderr.strip()}")

    def wait_llmkube_held_off(self, timeout: float = 15.0) -> float:
        """Wait until an admission policy refuses LLMKube's LoRA controller a status write on a
        CR pulumi-lora manages; return the seconds it took.

        The apiserver loads a policy moments after it is applied, not at once. The probe is a
        server-side dry run, as LLMKube's own identity, on a scratch CR in ``llmkube-system``
        (removed afterwards). :class:`TimeoutError` when nothing refuses it in ``timeout``.
        """
        if self._llmkube_rest is None:
            raise TestbedError("LLMKube's LoRA controller does not run in this testbed")
        return held_off(self._require_rest(), self._llmkube_rest, timeout)

    def create_namespace(self, prefix: str = "test") -> str:
        """Create a namespace with a unique name starting with ``prefix``; return its name.

        Tests use a fresh one each; :meth:`release_namespace` frees what runs in it, and
        ``kubectl delete namespace`` deletes it with all it holds (the real namespace
        controller and garbage collector).
        """
        base = _DNS_LABEL.sub("-", prefix.lower()).strip("-")[:50] or "test"
        name = f"{base}-{secrets.token_hex(3)}"
        self._require_rest().create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        with self._lock:
            self._namespaces.append(name)
        return name

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The namespaces :meth:`create_namespace` made, oldest first."""
        with self._lock:
            return tuple(self._namespaces)

    def release_namespace(self, namespace: str) -> None:
        """Delete every InferenceService and Deployment in ``namespace``: pods, processes, CRs.

        What a test calls at its end, so its emulators (each probed ten times a second) do not
        keep running for the rest of a session. The namespace itself stays (see
        :meth:`create_namespace`). Does nothing once the testbed is stopped.
        """
        player = self._player
        if player is not None:
            player.release_namespace(namespace)

    def emulator_pids(self) -> list[int]:
        """Process ids of the emulators running now (one per pod whose container runs)."""
        player = self._player
        return [] if player is None else player.emulator_pids()

    # --- internals ---------------------------------------------------------------------------

    def _require_apiserver(self) -> ApiServer:
        if self._apiserver is None:
            raise TestbedError("the testbed is not started")
        return self._apiserver

    def _require_rest(self) -> KubeRest:
        if self._rest is None:
            raise TestbedError("the testbed is not started")
        return self._rest

    def _require_player(self) -> PodPlayer:
        if self._player is None:
            raise TestbedError("the testbed is not started")
        return self._player
