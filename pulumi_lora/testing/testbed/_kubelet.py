"""The testbed's kubelet: runs the containers of every Pod bound to the testbed node.

For each Pod object the ReplicaSet controller (or anyone) binds to :data:`NODE_NAME` it decides
what can run here (``_container_spec``): the SGLang container becomes one emulator process
(``python -m pulumi_lora.testing.emulator``, on loopback or in a network namespace of its own),
a ``pulumi-lora resync`` container becomes a local re-sync loop in the in-cluster sandbox
(``_incluster.py``), anything else stays Pending with a container status saying why. It probes
readiness (and liveness) as the container declares, ten times faster than the spec says so tests
wait less, and patches ``pods/NAME/status``. A Pod marked for deletion is stopped, then removed.

Lock order: runtime → nothing else (the status patch is sent while holding it, as before).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import httpx2

from pulumi_lora.testing.sglang import RealSGLang, RealSGLangMissingError
from pulumi_lora.testing.testbed._container_spec import (
    ContainerRefusedError,
    container_kind,
    emulator_args,
)
from pulumi_lora.testing.testbed._netns import PodNetwork, allocate_pod_network
from pulumi_lora.testing.testbed._podnet import LoopbackRoutes
from pulumi_lora.testing.testbed._probes import PROBE_TIME_SCALE, Probe, Prober
from pulumi_lora.testing.testbed._process import ManagedProcess, free_loopback_address
from pulumi_lora.testing.testbed._readiness import gates_of, needs_reconcile, pod_ready
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest
from pulumi_lora.testing.testbed._workloads import (
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_NETWORK,
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_SERVER,
    ANNOTATION_STARTUP_DELAY,
    CONTAINER_NAME,
)

__all__ = ["EMULATOR_MODULE", "Network", "PodRuntime", "Server"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

Network = Literal["loopback", "netns"]
"""How a pod is reached: ``loopback`` (its own 127.x.y.z) or ``netns`` (its own 198.18.x.y)."""

Server = Literal["emulator", "sglang"]
"""What an SGLang pod runs: the emulator, or the real SGLang server on the CPU."""

EMULATOR_MODULE = "pulumi_lora.testing.emulator"
"""The module every SGLang pod runs (``python -m``)."""

_STOP_TIMEOUT = 10.0
_API_ERRORS = (httpx2.HTTPError, ApiRequestError)
ADAPTERS_MOUNT = Path("/adapters")
"""Where a real SGLang pod sees the adapter root's ``adapters/`` (its own mount namespace)."""
_order = itertools.count()


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_id() -> str:
    return "containerd://" + secrets.token_hex(32)


@dataclass
class KubeletContext:
    """What every pod runtime shares: the API, file locations and the hooks of the testbed."""

    rest: KubeRest
    log_dir: Path
    adapter_root: Path
    testbed_id: str
    default_network: Network
    next_index: Callable[[], int]
    note_pod: Callable[[dict[str, Any]], None]
    start_resync: Callable[[PodRuntime], ManagedProcess]
    routes: LoopbackRoutes = field(default_factory=LoopbackRoutes)
    claim_mounts: Callable[[dict[str, Any], dict[str, Any]], list[tuple[Path, str]]] = (
        lambda _pod, _container: []
    )
    termination_message: Callable[[PodRuntime], str | None] = lambda _runtime: None


class PodRuntime(Prober):
    """Kubelet state of one pod: its process, its network and the status last published."""

    def __init__(self, ctx: KubeletContext, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.ctx = ctx
        self.pod = pod
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.order = next(_order)
        self.annotations: dict[str, str] = meta.get("annotations", {}) or {}
        network = self.annotations.get(ANNOTATION_NETWORK, ctx.default_network)
        self.container: dict[str, Any] = pod["spec"]["containers"][0]
        self.kind = container_kind(self.container)
        #: What an SGLang container runs: the emulator, or the real server (``sglang``).
        self.server = self.annotations.get(ANNOTATION_SERVER, "emulator")
        if self.kind in ("resync", "stage"):
            network = "netns"  # the sandbox gives the container a network namespace of its own
        self.network: Network = "netns" if network == "netns" else "loopback"
        self.ports = {
            str(p.get("name")): int(p["containerPort"])
            for p in self.container.get("ports", []) or []
            if p.get("name")
        }
        self.port = self.ports.get("http", next(iter(self.ports.values()), 0))
        self.net: PodNetwork | None = None
        self.ip = "127.0.0.1"
        self.lock = threading.RLock()
        self.ready = False
        self.restart_count = 0
        self.epoch = 0
        self.running = False
        self.created = _now()
        self.start_time = self.created
        self.started_at = self.created
        self.container_id = _container_id()
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.ready_since = self.created
        #: The readiness gates (``spec.readinessGates``, fixed at creation), their conditions as
        #: other writers last set them, and the pod's Ready computed from both
        #: (``_readiness.pod_ready``), with when it last changed.
        self.gates = gates_of(pod)
        self.gate_conditions: tuple[dict[str, Any], ...] = ()
        self.pod_ready_state = ("False", "", "")
        self.pod_ready_since = self.created
        self.phase = "Pending"
        self.dirty = False
        self.gone = False
        self.launched = threading.Event()  # set once the container started or was refused
        self._exited: float | None = None  # when a re-sync container was first seen exited
        self._stop = threading.Event()
        self._prober: threading.Thread | None = None
        self.process: ManagedProcess | None = None
        # Readiness runs ten times faster than declared (tests wait less) unless the pod asks
        # for real time (benchmarks: 200 probes a second of 20 pods cost as much CPU as what
        # they measure); liveness in real time, since a process starts no faster here and a
        # fast liveness would kill it first.
        scale = float(self.annotations.get(ANNOTATION_PROBE_TIME_SCALE) or PROBE_TIME_SCALE)
        self.readiness = Probe.of(self.container.get("readinessProbe"), self.ports, scale)
        self.liveness = Probe.of(self.container.get("livenessProbe"), self.ports, 1.0)
        self._liveness_due = 0.0

    @property
    def url(self) -> str:
        """Base URL of the container's ``http`` port."""
        return f"http://{self.ip}:{self.port}"

    @property
    def path(self) -> str:
        """REST path of the Pod."""
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    @property
    def labels(self) -> dict[str, str]:
        """The Pod's labels."""
        labels: dict[str, str] = self.pod["metadata"].get("labels", {}) or {}
        return labels

    def pid(self) -> int | None:
        """The process id while the container runs."""
        process = self.process
        return process.pid if process is not None and process.alive() else None

    # --- start ---------------------------------------------------------------------------------

    def launch(self) -> None:
        """Set up the network and start the container (or record why it cannot run)."""
        try:
            self._launch()
        finally:
            self.launched.set()

    def _launch(self) -> None:
        if self.kind == "unsupported":
            image = self.container.get("image", "?")
            self._waiting("CreateContainerError", f"testbed cannot run image {image}")
            return
        try:
            if self.network == "netns":
                self.net = allocate_pod_network(self.ctx.testbed_id, self.ctx.next_index())
                self.ip = self.net.pod_ip
            else:  # its own loopback address, at the port its spec declares
                self.ip = free_loopback_address(self.port)
            self.process = self._make_process()
        except (
            ContainerRefusedError
        ) as exc:  # the image or its security context: the kubelet's words
            _log.warning("pod %s/%s not started: %s", self.namespace, self.name, exc.message)
            self._waiting(exc.reason, exc.message)
            return
        except Exception as exc:  # the sandbox may be missing or refuse: say so on the pod
            _log.warning("pod %s/%s cannot start: %s", self.namespace, self.name, exc)
            self._waiting("CreateContainerError", str(exc))
            return
        self.phase = "Running"
        self.start_container()
        if self.kind == "emulator" and self.network == "loopback":
            self.ctx.routes.add_port(self.port, self.ip)  # netns pods (the loop's) reach it too
        self.publish()
        self.start_prober()

    def _waiting(self, reason: str, message: str) -> None:
        with self.lock:
            self.state = {"waiting": {"reason": reason, "message": message}}
            self.phase = "Pending"
        self.publish()

    def _make_process(self) -> ManagedProcess:
        if self.kind in ("resync", "stage"):
            return self.ctx.start_resync(self)
        if self.server == "sglang":
            return self._real_sglang()
        argv = [] if self.net is None else self.net.exec_prefix()
        argv += [sys.executable, "-m", EMULATOR_MODULE, "--host", self.ip, "--port", str(self.port)]
        argv += ["--emulator-fs-root", str(self.ctx.adapter_root), "--emulator-admin"]
        for host, mount_path in self.ctx.claim_mounts(self.pod, self.container):
            argv += ["--emulator-mount", f"{host}:{mount_path}"]
        argv += emulator_args([str(a) for a in self.container.get("args", []) or []])
        extra = self.annotations.get(ANNOTATION_EMULATOR_ARGS)
        if extra:
            argv += [str(a) for a in json.loads(extra)]
        delay = float(self.annotations.get(ANNOTATION_STARTUP_DELAY, "0") or 0)
        if delay > 0:
            argv += ["--emulator-startup-delay", str(delay)]
        log = self.ctx.log_dir / f"{self.namespace}_{self.name}.log"
        return ManagedProcess(f"emulator {self.namespace}/{self.name}", argv, log)

    def _real_sglang(self) -> ManagedProcess:
        """The real SGLang server on the CPU with the container's arguments (its LoRA flags).

        It runs in a mount namespace of its own where the adapter root's ``adapters/`` (or the
        claim the pod mounts at ``/adapters``) is ``/adapters``: the paths a LoRAAdapter's
        ``spec.path`` holds (``Testbed.make_adapter``, or a staged directory) are the paths it
        opens, as in a pod with the adapters' volume mounted there.
        """
        try:
            real = RealSGLang.find()
        except RealSGLangMissingError as exc:
            raise ContainerRefusedError("ErrImageNeverPull", str(exc)) from exc
        claimed = dict(
            (path, host) for host, path in self.ctx.claim_mounts(self.pod, self.container)
        )
        adapters = claimed.get(str(ADAPTERS_MOUNT), self.ctx.adapter_root / "adapters")
        adapters.mkdir(parents=True, exist_ok=True)
        try:
            ADAPTERS_MOUNT.mkdir(exist_ok=True)
        except OSError as exc:
            raise ContainerRefusedError(
                "CreateContainerError", f"real SGLang pods need {ADAPTERS_MOUNT} (root): {exc}"
            ) from exc
        args = emulator_args([str(a) for a in self.container.get("args", []) or []])
        server, env = real.command(self.ip, self.port, args)
        mount = 'mount --bind "$0" /adapters && exec "$@"'
        argv = [] if self.net is None else self.net.exec_prefix()
        argv += ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount]
        argv += [str(adapters), *server]
        log = self.ctx.log_dir / f"{self.namespace}_{self.name}.log"
        return ManagedProcess(f"sglang {self.namespace}/{self.name}", argv, log, env=env)

    # --- status ---------------------------------------------------------------------------------

    @property
    def pod_ready(self) -> bool:
        """The pod's Ready: its containers ready and every readiness gate's condition True."""
        return self.pod_ready_state[0] == "True"

    def observe(self, pod: dict[str, Any]) -> bool:
        """Take the gates' conditions from the pod as the apiserver has it now (another writer
        may have changed one); returns whether its Ready must be written again."""
        with self.lock:
            conditions = (pod.get("status") or {}).get("conditions") or ()
            self.gate_conditions = tuple(c for c in conditions if c.get("type") in self.gates)
            return needs_reconcile(pod, self.ready, self.container_name)

    @property
    def container_name(self) -> str:
        """The (one) container's name."""
        return str(self.container.get("name", CONTAINER_NAME))

    def _ready_condition(self) -> dict[str, Any]:
        """Ready, as the kubelet computes it (``_readiness.pod_ready``), since when it last
        changed (caller holds lock)."""
        state = pod_ready(self.ready, self.container_name, self.gates, self.gate_conditions)
        if state[0] != self.pod_ready_state[0]:
            self.pod_ready_since = _now()
        self.pod_ready_state = state
        status, reason, message = state
        condition = {
            "type": "Ready",
            "status": status,
            "lastTransitionTime": _rfc3339(self.pod_ready_since),
            "reason": reason or None,  # null: a strategic merge patch removes the old one
            "message": message or None,
        }
        return condition

    def status_body(self) -> dict[str, Any]:
        """The kubelet's view of this pod as a ``pods/status`` strategic merge patch (caller
        holds lock): its own conditions merged by type, so the conditions of other writers (a
        readiness gate's) stay, as the kubelet keeps them; ``containerStatuses`` (an atomic list)
        replaced whole.

        No ``qosClass``: the apiserver sets it from the resources and refuses any change.
        """
        ready = "True" if self.ready else "False"
        since = _rfc3339(self.ready_since)
        created = _rfc3339(self.created)
        image = str(self.container.get("image", ""))
        status: dict[str, Any] = {
            "phase": self.phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": _rfc3339(self.start_time),
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": created},
                {"type": "Initialized", "status": "True", "lastTransitionTime": created},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": since},
                self._ready_condition(),
            ],
            "containerStatuses": [
                {
                    "name": self.container.get("name", CONTAINER_NAME),
                    "image": image,
                    "imageID": f"{image}@sha256:{'0' * 64}" if self.process else "",
                    "containerID": self.container_id,
                    "ready": self.ready,
                    "started": "running" in self.state,
                    "restartCount": self.restart_count,
                    "state": self.state,
                    "lastState": self.last_state,
                }
            ],
        }
        if self.process is not None:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        else:
            del status["containerStatuses"][0]["containerID"]
        return {"status": status}

    def publish(self) -> None:
        """Patch the pod's status now; on failure leave it dirty for the prober to retry."""
        with self.lock:
            if self.gone:
                return
            self.dirty = True
            try:
                written = self.ctx.rest.strategic_merge_patch(
                    f"{self.path}/status", self.status_body()
                )
            except _API_ERRORS as exc:
                _log.debug("status of pod %s not published yet: %s", self.name, exc)
                return
            self.dirty = False
        self.ctx.note_pod(written)

    def set_ready(self, ready: bool) -> bool:
        """Record a readiness result; returns whether it changed (caller holds lock)."""
        if ready == self.ready:
            return False
        self.ready = ready
        self.ready_since = _now()
        return True

    # --- the container -------------------------------------------------------------------------

    def start_container(self) -> None:
        """Start the process: state running, not ready until probed."""
        with self.lock:
            process = self.process
            if process is None:
                return
            started = _now()
            # Kubernetes times have one-second resolution: keep startedAt moving on a restart.
            if started <= self.started_at and self.restart_count > 0:
                started = self.started_at + timedelta(seconds=1)
            self.started_at = started
            self.container_id = _container_id()
            if not process.alive():
                process.start()
            self.running = True
            self.state = {"running": {"startedAt": _rfc3339(started)}}
            if self.liveness is not None:  # first liveness probe one period after the delay
                delay = self.liveness.initial_delay + self.liveness.period
                self._liveness_due = time.monotonic() + delay
            self.set_ready(self.readiness is None)
            self.epoch += 1

    def stop_container(self, *, crash: bool = False) -> None:
        """Stop the process (SIGTERM, or SIGKILL for a crash) and record it as terminated."""
        with self.lock:
            self.epoch += 1
            was_running = self.running
            self.running = False
            process = self.process
            if process is None:
                return
            code = process.kill() if crash else process.stop(_STOP_TIMEOUT)
            if was_running:
                self._terminated(code)
            self.set_ready(False)

    def _terminated(self, code: int | None) -> None:
        exit_code = 137 if code is None or code < 0 else code
        started = self.state.get("running", {}).get("startedAt", _rfc3339(self.started_at))
        terminated: dict[str, Any] = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": _rfc3339(_now()),
            "containerID": self.container_id,
        }
        message = self.ctx.termination_message(self)
        if message:
            terminated["message"] = message
        self.state = {"terminated": terminated}
        if self.pod["spec"].get("restartPolicy") == "Never":  # a Job's pod: it is over
            self.phase = "Succeeded" if exit_code == 0 else "Failed"

    def restart(self) -> None:
        """Restart in place like a kubelet: state lost, restartCount+1, same IP and port."""
        with self.lock:
            self.stop_container()
            self.publish()
            self.last_state = self.state
            self.restart_count += 1
            self.start_container()
            self.publish()

    def shutdown(self) -> None:
        """Stop prober and process, remove the network: what deleting the pod does here."""
        self.stop_prober()
        with self.lock:
            self.gone = True
            self.running = False
        process = self.process
        if process is not None:
            process.stop(_STOP_TIMEOUT)
            if self.kind == "emulator" and self.network == "loopback":
                self.ctx.routes.remove_port(self.port, self.ip)
        if self.net is not None:
            self.net.teardown()


def delete_now(rest: KubeRest, pod: dict[str, Any]) -> None:
    """Remove the Pod object at once (what the kubelet does once its containers stopped)."""
    meta = pod["metadata"]
    with contextlib.suppress(*_API_ERRORS):
        rest.request(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            allow=(404, 409),
        )
