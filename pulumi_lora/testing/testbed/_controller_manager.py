"""The real kube-controller-manager of a testbed: Kubernetes' own controllers, each as itself.

Started after the apiserver, against it, with what a single-node cluster needs
(:data:`CONTROLLERS`: Deployments, ReplicaSets, the garbage collector, namespace deletion,
ServiceAccounts and their tokens, Endpoints and EndpointSlices, the root CA ConfigMap, Jobs and
their TTL, PersistentVolume binding), leader
election off and no serving port. ``--use-service-account-credentials`` makes every controller
act under its own ServiceAccount in ``kube-system`` (the ReplicaSet controller creates pods as
:data:`REPLICASET_CONTROLLER_USER`), authorized by the apiserver's bootstrap RBAC alone; the
process itself signs in as :data:`KCM_USER` (a static token) only to mint those accounts' tokens.

Ready once the ServiceAccount controller has made ``default/default`` and every controller its
own account. A controller-manager that exits is reported (an error log with the tail of its log,
:meth:`ControllerManager.exit_status`), never restarted behind the tests' back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx2

from pulumi_lora.testing.testbed._process import ManagedProcess, tail
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest

__all__ = [
    "CONTROLLERS",
    "CONTROLLER_ACCOUNTS",
    "KCM_USER",
    "REPLICASET_CONTROLLER_USER",
    "ControllerManager",
    "controller_manager_argv",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

KCM_USER = "system:kube-controller-manager"
"""The user kube-controller-manager signs in as (bootstrap RBAC binds it its ClusterRole)."""

REPLICASET_CONTROLLER_USER = "system:serviceaccount:kube-system:replicaset-controller"
"""Who creates every Deployment's pods: the ReplicaSet controller's own ServiceAccount."""

CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "root-ca-certificate-publisher-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "persistentvolume-binder-controller",
)
"""The controllers a single-node cluster of InferenceServices needs (``--controllers``)."""

CONTROLLER_ACCOUNTS = (
    "deployment-controller",
    "replicaset-controller",
    "generic-garbage-collector",
    "namespace-controller",
    "service-account-controller",
    "endpoint-controller",
    "endpointslice-controller",
    "root-ca-cert-publisher",
    "job-controller",
    "ttl-after-finished-controller",
    "persistent-volume-binder",
)
"""The ``kube-system`` ServiceAccounts those controllers act as (the token controller signs
with the controller-manager's own key and needs none)."""

_POLL = 0.1
_WATCHDOG_PERIOD = 0.5


def controller_manager_argv(
    binary: Path, kubeconfig: Path, sa_key: Path, ca_cert: Path, extra: Sequence[str] = ()
) -> list[str]:
    """The command line of the testbed's kube-controller-manager (pure).

    ``--secure-port=0`` serves nothing (no port to pick, nothing to collide with);
    ``sa_key`` signs the legacy token Secrets the token controller fills, and ``ca_cert`` is
    the root CA it puts in them and the ``kube-root-ca.crt`` ConfigMap of every namespace.
    """
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
        "--use-service-account-credentials",
        f"--service-account-private-key-file={sa_key}",
        f"--root-ca-file={ca_cert}",
        f"--controllers={','.join(CONTROLLERS)}",
        "--concurrent-gc-syncs=5",
        *extra,
    ]


class ControllerManager:
    """kube-controller-manager as one child process, with a watchdog that reports its exit."""

    def __init__(
        self,
        binary: Path,
        directory: Path,
        *,
        kubeconfig: Path,
        sa_key: Path,
        ca_cert: Path,
        extra_args: Sequence[str] = (),
    ) -> None:
        argv = controller_manager_argv(binary, kubeconfig, sa_key, ca_cert, extra_args)
        self.process = ManagedProcess(
            "kube-controller-manager", argv, directory / "kube-controller-manager.log"
        )
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._exit: int | None = None

    def start(self, admin: KubeRest, timeout: float) -> None:
        """:meth:`launch`, then :meth:`wait_ready`."""
        self.launch()
        self.wait_ready(admin, timeout)

    def launch(self) -> None:
        """Start the process without waiting (the testbed sets up the rest meanwhile)."""
        self.process.start()

    def wait_ready(self, admin: KubeRest, timeout: float) -> None:
        """Wait until every controller has its ServiceAccount (see the module's doc).

        :class:`~pulumi_lora.testing.testbed.ProcessStartError` with its log's tail when it
        exits or is not ready within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        missing: list[str] = ["kube-system accounts"]
        while True:
            if not self.process.alive():
                raise self.process.failure(f"exited with status {self.process.returncode()}")
            try:
                missing = _missing_accounts(admin)
            except (httpx2.HTTPError, ApiRequestError) as exc:
                missing = [f"({type(exc).__name__}: {exc})"]
            if not missing:
                break
            if time.monotonic() > deadline:
                self.process.stop()
                raise self.process.failure(
                    f"not ready within {timeout:.0f}s (no ServiceAccount {', '.join(missing)})"
                )
            time.sleep(_POLL)
        _log.info("kube-controller-manager ready (pid %s)", self.process.pid)
        self._watchdog = threading.Thread(
            target=self._watch, name="kube-controller-manager-watchdog", daemon=True
        )
        self._watchdog.start()

    def _watch(self) -> None:
        """Report an exit once, with the log's tail; never restart it."""
        while not self._stopping.wait(_WATCHDOG_PERIOD):
            code = self.process.returncode()
            if code is not None:
                self._exit = code
                _log.error(
                    "kube-controller-manager exited with status %s and is not restarted: "
                    "Deployments, ReplicaSets, garbage collection and namespace deletion stop. "
                    "Last lines of %s:\n%s",
                    code,
                    self.process.log_path,
                    tail(self.process.log_path, 15),
                )
                return

    def exit_status(self) -> int | None:
        """The status it exited with while the testbed ran, or ``None`` while it runs."""
        if self._stopping.is_set():
            return self._exit
        return self.process.returncode()

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL) and its watchdog."""
        self._stopping.set()
        self.process.stop(timeout=5.0)
        watchdog = self._watchdog
        if watchdog is not None:
            watchdog.join(timeout=2.0)


def _missing_accounts(admin: KubeRest) -> list[str]:
    """ServiceAccounts the controllers have not made yet (``kube-system/...``, ``default``)."""
    listed = admin.get("/api/v1/namespaces/kube-system/serviceaccounts")
    have = {item["metadata"]["name"] for item in listed.get("items", [])}
    missing = [f"kube-system/{name}" for name in CONTROLLER_ACCOUNTS if name not in have]
    default = admin.get("/api/v1/namespaces/default/serviceaccounts/default", allow=(404,))
    if default is None:
        missing.append("default/default")
    return missing
