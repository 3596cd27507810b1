"""``Testbed``: a real etcd, kube-apiserver and kube-controller-manager with LLMKube's CRDs, and
emulated SGLang pods.

::

    with Testbed() as tb:
        ns = tb.create_namespace("demo")
        isvc = tb.deploy_inference_service(ns, "llama", replicas=2)
        pods = isvc.wait_ready(timeout=30)
        tb.kubectl("get", "pods", "-n", ns)

Everything a testbed starts (etcd, the apiserver, the controller-manager, one emulator per pod,
network namespaces and veths, its temporary directory) is removed again by
:meth:`Testbed.stop`, which also runs on ``with`` exit, at interpreter exit and on SIGTERM.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

from pulumi_lora.testing.testbed._access import ADMIN_USER, TestbedAccess
from pulumi_lora.testing.testbed._apiserver import AUDIT_POLICY, ApiServer, ApiServerFiles, Etcd
from pulumi_lora.testing.testbed._binaries import BINARIES, Binary, find_binary
from pulumi_lora.testing.testbed._certs import (
    StaticToken,
    generate_key_material,
    new_token,
    write_token_file,
)
from pulumi_lora.testing.testbed._containers import (
    ContainerRuntime,
    container_runtime_unavailable_reason,
)
from pulumi_lora.testing.testbed._controller_manager import KCM_USER, ControllerManager
from pulumi_lora.testing.testbed._crds import FIELD_MANAGER, install_crds
from pulumi_lora.testing.testbed._identities import (
    CONTROLLER_USER,
    KUBELET_USER,
    OPERATOR_USER,
    PLAYER_USERS,
    SCHEDULER_USER,
    grant_players,
    player_tokens,
)
from pulumi_lora.testing.testbed._kubeproxy import ServiceProxy
from pulumi_lora.testing.testbed._llmkube import LLMKubeLoRAController
from pulumi_lora.testing.testbed._llmkube import (
    grant_identity as grant_llmkube_identity,
)
from pulumi_lora.testing.testbed._netns import (
    NetworkClaim,
    netns_unavailable_reason,
    sweep_stale_networks,
)
from pulumi_lora.testing.testbed._pods import NODE_NAME, Network, PodPlayer
from pulumi_lora.testing.testbed._rest import KubeRest
from pulumi_lora.testing.testbed._sandbox import Sandbox
from pulumi_lora.testing.testbed._teardown import register, unregister
from pulumi_lora.testing.testbed._testbed_pods import PodHelpers, TestbedError

__all__ = [
    "CONTROLLER_USER",
    "KUBELET_USER",
    "OPERATOR_USER",
    "SCHEDULER_USER",
    "Testbed",
    "TestbedError",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

_DIR_PREFIX = "pulumi-lora-testbed-"


class Testbed(TestbedAccess, PodHelpers):
    """A local Kubernetes control plane for tests: real etcd + kube-apiserver, TLS verified.

    Use it as a context manager or call :meth:`start` / :meth:`stop`. Safe to use from several
    threads once started; the pod player runs its own threads.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        extra_tokens: Iterable[StaticToken] = (),
        directory: Path | None = None,
        audit: bool = True,
        install_crds: bool = True,
        start_timeout: float = 90.0,
        keep_directory: bool = False,
        apiserver_args: Sequence[str] = (),
        default_network: Network = "loopback",
        llmkube_lora_controller: bool = True,
        llmkube_time_scale: float = 1.0,
        container_runtime: ContainerRuntime = "auto",
    ) -> None:
        """Prepare a testbed (nothing starts before :meth:`start`).

        ``extra_tokens`` are added to the apiserver's static token file (e.g. a least-privilege
        user for RBAC tests). ``directory`` holds certificates, logs, etcd data and the kubeconfig;
        by default a fresh temporary directory that :meth:`stop` removes (``keep_directory`` keeps
        it for post-mortems). ``audit`` enables a Metadata-level audit log of every request.
        ``apiserver_args`` are appended to the apiserver's flags (feature gates, ...).
        ``default_network`` is how pods of InferenceServices that carry no
        ``testbed.pulumi-lora.dev/network`` annotation are reached (created by kubectl, ...).
        ``llmkube_lora_controller`` runs LLMKube's own LoRA controller, played from its source
        (``_core/_llmkube.py``), as every LLMKube install runs it; ``False`` leaves it out.
        ``llmkube_time_scale`` shrinks its clocks (30 s requeues, 2 minute skip window).
        ``container_runtime`` is how the kubelet runs the re-sync loop's pods: ``podman`` runs
        their image as real containers (``_containers.py``), ``process`` runs the container's
        command as a local process in the same sandbox; ``auto`` (the default) takes podman when
        it works here, and under ``CI=true`` always (the pods then say what is missing).
        """
        self.id = secrets.token_hex(3)
        self._given_dir = directory
        self._extra_tokens = list(extra_tokens)
        self._audit = audit
        self._install_crds = install_crds
        self._start_timeout = start_timeout
        self._keep = keep_directory
        self._apiserver_args = tuple(apiserver_args)
        self._lock = threading.RLock()
        self._dir: Path | None = None
        self._etcd: Etcd | None = None
        self._apiserver: ApiServer | None = None
        self._rest: KubeRest | None = None
        self._player: PodPlayer | None = None
        self._controller_manager: ControllerManager | None = None
        self._network_claim: NetworkClaim | None = None
        self._binaries: dict[str, Binary] = {}
        self._admin_token = new_token()
        self._tokens = {user: new_token() for user in PLAYER_USERS}
        self._default_network: Network = default_network
        self._llmkube_wanted = llmkube_lora_controller
        self._llmkube_time_scale = llmkube_time_scale
        if container_runtime not in ("auto", "podman", "process"):
            raise ValueError(
                f"container_runtime must be auto, podman or process, not {container_runtime!r}"
            )
        self._container_runtime: ContainerRuntime = container_runtime
        self._llmkube: LLMKubeLoRAController | None = None
        self._llmkube_rest: KubeRest | None = None
        self._kubelet_rest: KubeRest | None = None
        self._played_rests: list[KubeRest] = []
        self._kubeconfig: Path | None = None
        self._audit_log: Path | None = None
        self._started = False
        self._namespaces: list[str] = []

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Testbed:
        """Start etcd, the apiserver and the controller-manager, install the CRDs, write the
        kubeconfig; return self.

        Raises :class:`~pulumi_lora.testing.testbed.BinaryNotFoundError` when a program is
        missing and :class:`~pulumi_lora.testing.testbed.ProcessStartError` (with the command
        line and the log's tail) when one does not come up. Nothing is left behind on failure.
        """
        with self._lock:
            if self._started:
                return self
            self._binaries = {name: find_binary(name) for name in BINARIES}
            register(self)
            try:
                self._start()
            except BaseException:
                self.stop()
                raise
            self._started = True
            return self

    def _start(self) -> None:
        if self._given_dir is not None:
            self._given_dir.mkdir(parents=True, exist_ok=True)
            self._dir = self._given_dir
        else:
            self._dir = Path(tempfile.mkdtemp(prefix=_DIR_PREFIX))
        directory = self._dir
        _log.info("testbed %s starting in %s", self.id, directory)
        if netns_unavailable_reason() is None:
            self._network_claim = NetworkClaim(self.id)
            sweep_stale_networks()  # what testbeds killed with SIGKILL left running
        keys = generate_key_material(directory)
        token_file = directory / "tokens.csv"
        admin = StaticToken(self._admin_token, ADMIN_USER, groups=("system:masters",))
        players = player_tokens(self._tokens)
        write_token_file(token_file, [admin, *players, *self._extra_tokens])
        audit_policy = None
        if self._audit:
            audit_policy = directory / "audit-policy.yaml"
            audit_policy.write_text(AUDIT_POLICY, encoding="utf-8")
            self._audit_log = directory / "audit.log"
        self._etcd = Etcd(self._binaries["etcd"].path, directory)
        self._etcd.start(self._start_timeout)
        files = ApiServerFiles(keys, token_file, audit_policy, self._audit_log)
        secrets_ = [
            self._admin_token,
            *self._tokens.values(),
            *(t.token for t in self._extra_tokens),
        ]
        self._apiserver = ApiServer(
            self._binaries["kube-apiserver"].path,
            directory,
            etcd_url=self._etcd.url,
            files=files,
            admin_token=self._admin_token,
            secrets=secrets_,
            extra_args=self._apiserver_args,
        )
        self._apiserver.start(self._start_timeout)
        self._rest = KubeRest(self._apiserver.url, self._admin_token, self._apiserver.ssl_context())
        self._kubeconfig = self.write_kubeconfig(directory / "kubeconfig")
        # The controller-manager starts its controllers while the rest is set up.
        self._controller_manager = ControllerManager(
            self._binaries["kube-controller-manager"].path,
            directory,
            kubeconfig=self.write_kubeconfig(
                directory / "kube-controller-manager.kubeconfig", self._tokens[KCM_USER], KCM_USER
            ),
            sa_key=keys.sa_key,
            ca_cert=keys.ca_cert,
        )
        self._controller_manager.launch()
        if self._install_crds:
            install_crds(self._rest)
        self._create_node()
        adapter_root = directory / "fsroot"
        (adapter_root / "adapters").mkdir(parents=True, exist_ok=True)
        self._grant_players()
        self._kubelet_rest = self._client_as(KUBELET_USER)
        sandbox = Sandbox(
            self._apiserver.port,
            self.ca_path.read_text(encoding="utf-8"),
            containers=self.runs_containers,
            state_dir=directory / "kubelet",
        )
        self._player = PodPlayer(
            self._kubelet_rest,
            self.id,
            directory / "pods",
            adapter_root,
            default_network=self._default_network,
            sandbox=sandbox,
            user_rest=self._rest,
            operator_rest=self._client_as(OPERATOR_USER),
            scheduler_rest=self._client_as(SCHEDULER_USER),
        )
        self._player.start()
        if self._llmkube_wanted:
            self._start_llmkube()
        self._controller_manager.wait_ready(self._rest, self._start_timeout)
        _log.info("testbed %s ready at %s", self.id, self._apiserver.url)

    def _client_as(self, user: str) -> KubeRest:
        """A REST client with the static token of one of the played components."""
        apiserver = self._require_apiserver()
        rest = KubeRest(apiserver.url, self._tokens[user], apiserver.ssl_context())
        self._played_rests.append(rest)
        return rest

    @property
    def runs_containers(self) -> bool:
        """Whether the re-sync loop's pods run as podman containers (see ``container_runtime``)."""
        if self._container_runtime != "auto":
            return self._container_runtime == "podman"
        reason = container_runtime_unavailable_reason()
        if reason is None or os.environ.get("CI") == "true":
            return True
        _log.warning("testbed: %s; the loop's pods run as local processes instead", reason)
        return False

    def _start_llmkube(self) -> None:
        """LLMKube's LoRA controller under its own ServiceAccount; kube-proxy as the controllers."""
        token = grant_llmkube_identity(self._require_rest())
        context = self._require_apiserver().ssl_context()
        self._llmkube_rest = KubeRest(self._require_apiserver().url, token, context)
        proxy = ServiceProxy(self._require_kubelet_rest())  # kube-proxy runs on the node
        self._llmkube = LLMKubeLoRAController(
            self._llmkube_rest, proxy, time_scale=self._llmkube_time_scale
        )
        self._llmkube.start()

    @property
    def llmkube(self) -> LLMKubeLoRAController | None:
        """LLMKube's played LoRA controller (None when left out or stopped)."""
        return self._llmkube

    def _require_kubelet_rest(self) -> KubeRest:
        if self._kubelet_rest is None:
            raise TestbedError("the testbed is not started")
        return self._kubelet_rest

    def _grant_players(self) -> None:
        """RBAC for what the testbed plays (``_identities.grant_players``)."""
        grant_players(self._require_rest(), FIELD_MANAGER)

    def _create_node(self) -> None:
        rest = self._require_rest()
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
        }
        rest.request("POST", "/api/v1/nodes", body=node, allow=(409,))
        status = {
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            }
        }
        rest.merge_patch(f"/api/v1/nodes/{NODE_NAME}/status", status)

    def stop(self) -> None:
        """Stop everything this testbed started and remove its directory. Idempotent."""
        with self._lock:
            llmkube, self._llmkube = self._llmkube, None
            if llmkube is not None:
                llmkube.stop()
            player, self._player = self._player, None
            if player is not None:
                player.close()
            manager, self._controller_manager = self._controller_manager, None
            if manager is not None:
                manager.stop()
            for rest in (self._rest, self._llmkube_rest, *self._played_rests):
                if rest is not None:
                    rest.close()
            self._rest = self._kubelet_rest = self._llmkube_rest = None
            self._played_rests = []
            apiserver, self._apiserver = self._apiserver, None
            if apiserver is not None:
                apiserver.kill()  # nothing to drain at the end: see ApiServer.kill
            etcd, self._etcd = self._etcd, None
            if etcd is not None:
                etcd.stop()
            directory, self._dir = self._dir, None
            if directory is not None and not self._keep and self._given_dir is None:
                shutil.rmtree(directory, ignore_errors=True)
            claim, self._network_claim = self._network_claim, None
            if claim is not None:
                claim.release()
            if self._started:
                _log.info("testbed %s stopped", self.id)
            self._started = False
            unregister(self)

    # --- apiserver chaos ---------------------------------------------------------------------

    def stop_apiserver(self, *, graceful: bool = True) -> None:
        """Stop the apiserver only (etcd and the pods keep running).

        ``graceful`` SIGTERMs it as a rolling restart does (with watches open that takes its
        whole 15 s drain); ``graceful=False`` SIGKILLs it, as a crashed or evicted apiserver
        goes, for tests that need it down, not the drain.
        """
        apiserver = self._require_apiserver()
        if graceful:
            apiserver.stop()
        else:
            apiserver.kill()

    def start_apiserver(self) -> None:
        """Start the apiserver again on the same port, against the same etcd; wait for readyz."""
        self._require_apiserver().start(self._start_timeout)

    def restart_apiserver(self, *, graceful: bool = True) -> None:
        """Stop (``stop_apiserver``) and start the apiserver (same port, certificates, tokens
        and data)."""
        self.stop_apiserver(graceful=graceful)
        self.start_apiserver()
