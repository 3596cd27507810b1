"""etcd and kube-apiserver, launched the way controller-runtime's envtest launches them.

The apiserver serves CRDs, validation, status subresources, server-side apply, watches and the
pod proxy; the real kube-controller-manager runs beside it (``_controller_manager.py``), and the
testbed plays the scheduler's bind, a kubelet and LLMKube's operator (``_pods.py``).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx2

from pulumi_lora.testing.testbed._certs import KeyMaterial
from pulumi_lora.testing.testbed._process import ManagedProcess, free_port

__all__ = ["ApiServer", "Etcd"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

_POLL = 0.1

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
# Metadata for every request: who did what to which object, never bodies or tokens.
rules:
- level: Metadata
"""


class Etcd:
    """One single-member etcd on free loopback ports, data in a temporary directory."""

    def __init__(self, binary: Path, directory: Path) -> None:
        self.directory = directory
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.process = ManagedProcess(
            "etcd",
            [
                str(binary),
                "--name=testbed",
                f"--data-dir={directory / 'etcd-data'}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=testbed={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            directory / "etcd.log",
        )

    def start(self, timeout: float) -> None:
        """Start etcd and wait until ``/health`` says healthy."""
        self.process.start()
        deadline = time.monotonic() + timeout
        with httpx2.Client(trust_env=False, timeout=2.0) as http:
            while True:
                if not self.process.alive():
                    raise self.process.failure(f"exited with status {self.process.returncode()}")
                try:
                    if http.get(f"{self.url}/health").json().get("health") == "true":
                        _log.info("etcd ready at %s", self.url)
                        return
                except (httpx2.HTTPError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    self.process.stop()
                    raise self.process.failure(f"/health not healthy within {timeout:.0f}s")
                time.sleep(_POLL)

    def stop(self) -> None:
        """Stop etcd (its data directory stays until the testbed directory is removed)."""
        self.process.stop()


@dataclass(frozen=True)
class ApiServerFiles:
    """Files the apiserver reads, all inside the testbed directory."""

    keys: KeyMaterial
    token_file: Path
    audit_policy: Path | None
    audit_log: Path | None


class ApiServer:
    """kube-apiserver on a fixed free loopback port, restartable on the same port and etcd."""

    def __init__(
        self,
        binary: Path,
        directory: Path,
        *,
        etcd_url: str,
        files: ApiServerFiles,
        admin_token: str,
        secrets: list[str],
        extra_args: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._admin_token = admin_token
        self._ca = str(files.keys.ca_cert)
        argv = [
            str(binary),
            f"--etcd-servers={etcd_url}",
            f"--cert-dir={files.keys.cert_dir}",
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={files.keys.sa_pub}",
            f"--service-account-signing-key-file={files.keys.sa_key}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={files.token_file}",
        ]
        if files.audit_policy is not None and files.audit_log is not None:
            argv += [
                f"--audit-policy-file={files.audit_policy}",
                f"--audit-log-path={files.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
            ]
        argv += extra_args
        self.process = ManagedProcess(
            "kube-apiserver", argv, directory / "kube-apiserver.log", secrets=secrets
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context trusting only the testbed's CA (verification on)."""
        return ssl.create_default_context(cafile=self._ca)

    def start(self, timeout: float) -> None:
        """Start the apiserver and wait until ``/readyz`` answers 200 over verified TLS."""
        self.process.start()
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {self._admin_token}"}
        last = "no answer yet"
        with httpx2.Client(verify=self.ssl_context(), trust_env=False, timeout=5.0) as http:
            while True:
                if not self.process.alive():
                    raise self.process.failure(f"exited with status {self.process.returncode()}")
                try:
                    answer = http.get(f"{self.url}/readyz", headers=headers)
                    if answer.status_code == 200:
                        _log.info("kube-apiserver ready at %s", self.url)
                        return
                    last = f"/readyz {answer.status_code}: {answer.text[-300:]}"
                except httpx2.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if time.monotonic() > deadline:
                    self.process.stop()
                    raise self.process.failure(f"not ready within {timeout:.0f}s ({last})")
                time.sleep(_POLL)

    def stop(self) -> None:
        """Stop the apiserver (etcd keeps the data): SIGTERM, as a rolling restart does.

        Its graceful termination waits on open watches (``http.Server.Shutdown``), so with
        clients still watching it takes the whole 15 s before the SIGKILL: the outage tests
        rely on that realistic gap.
        """
        self.process.stop(timeout=15.0)

    def kill(self) -> None:
        """SIGKILL the apiserver: for a final teardown, where no client is left to drain and the
        graceful path would only wait out the 15 s (it keeps no state; etcd has the data)."""
        self.process.kill()
