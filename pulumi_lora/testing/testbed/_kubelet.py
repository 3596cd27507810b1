"""The testbed's kubelet: runs the containers of every Pod bound to the testbed node.

For each Pod object the ReplicaSet controller (or anyone) binds to :data:`NODE_NAME` it decides
what can run here (:func:`container_kind`): the SGLang container becomes one emulator process
(``python -m pulumi_lora.testing.emulator``, on loopback or in a network namespace of its own),
a ``pulumi-lora resync`` container becomes a local re-sync loop in the in-cluster sandbox
(``_incluster.py``), anything else stays Pending with a container status saying why. It probes
readiness (and liveness) as the container declares, ten times faster than the spec says so tests
wait less, and patches ``pods/NAME/status``. A Pod marked for deletion is stopped, then removed.

Lock order: runtime → nothing else (the status patch is sent while holding it, as before).
"""

from __future__ import annotations

import contextlib
import http.client
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
from pulumi_lora.testing.testbed._containers import ContainerRefusedError
from pulumi_lora.testing.testbed._netns import PodNetwork, allocate_pod_network
from pulumi_lora.testing.testbed._podnet import LoopbackRoutes
from pulumi_lora.testing.testbed._process import ManagedProcess, free_loopback_address
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest
from pulumi_lora.testing.testbed._workloads import (
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_NETWORK,
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_SERVER,
    ANNOTATION_STARTUP_DELAY,
    CONTAINER_NAME,
    NODE_NAME,
)

__all__ = [
    "EMULATOR_MODULE",
    "PROBE_INTERVAL",
    "PROBE_TIME_SCALE",
    "ContainerKind",
    "Network",
    "PodRuntime",
    "Server",
    "container_kind",
    "resolve_env",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

Network = Literal["loopback", "netns"]
"""How a pod is reached: ``loopback`` (its own 127.x.y.z) or ``netns`` (its own 198.18.x.y)."""

Server = Literal["emulator", "sglang"]
"""What an SGLang pod runs: the emulator, or the real SGLang server on the CPU."""

ContainerKind = Literal["emulator", "resync", "stage", "unsupported"]
"""What the testbed's kubelet does with a container."""

EMULATOR_MODULE = "pulumi_lora.testing.emulator"
"""The module every SGLang pod runs (``python -m``)."""

PROBE_TIME_SCALE = 0.1
"""Readiness probe periods run this much faster than ``periodSeconds`` says (tests wait less),
unless the pod's ``testbed.pulumi-lora.dev/probe-time-scale`` annotation says otherwise."""

PROBE_INTERVAL = 0.1
"""Seconds between two probes of a container whose probe says ``periodSeconds: 1``."""

SETTLED_PROBE_INTERVAL = 0.5
"""Seconds between two readiness probes of a Ready pod, at least: the fast pace is for a pod
becoming Ready (tests wait on it); once Ready, ten probes a second of every pod of a session
were a sixth of the full tier's CPU (the emulators answering, the kubelet asking)."""

CRASH_BACKOFF = 1.0
"""Seconds before an exited re-sync container restarts (the kubelet's first 10 s, scaled)."""

RESYNC_COMMAND = ["pulumi-lora", "resync"]
"""The command of the re-sync loop's container, as ``pulumi_lora.deploy`` renders it."""
JOB_COMMANDS = ("stage", "stage-serve", "unstage", "verify-staged")
"""The first argument of the container of a stager's Job, or of a staging Job run by hand (the
image's entrypoint is ``pulumi-lora``)."""

_STOP_TIMEOUT = 10.0
_PROBE_TIMEOUT = 1.0
_API_ERRORS = (httpx2.HTTPError, ApiRequestError)
_DROPPED_ARGS = ("--host", "--port", "--model-path", "--model")
ADAPTERS_MOUNT = Path("/adapters")
"""Where a real SGLang pod sees the adapter root's ``adapters/`` (its own mount namespace)."""
_order = itertools.count()


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_id() -> str:
    return "containerd://" + secrets.token_hex(32)


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


@dataclass(frozen=True)
class Probe:
    """An httpGet probe with the period the testbed runs it at."""

    port: int
    path: str
    period: float
    failure_threshold: int
    initial_delay: float
    timeout: float = 1.0

    @staticmethod
    def of(spec: dict[str, Any] | None, ports: dict[str, int], scale: float) -> Probe | None:
        """The probe a container declares (``None`` without an httpGet probe), its periods
        multiplied by ``scale``."""
        get = (spec or {}).get("httpGet")
        if not get:
            return None
        raw = get.get("port")
        port = ports.get(raw, 0) if isinstance(raw, str) and not raw.isdigit() else int(raw)
        return Probe(
            port=port,
            path=str(get.get("path", "/")),
            period=max(0.05, float((spec or {}).get("periodSeconds", 10)) * scale),
            failure_threshold=int((spec or {}).get("failureThreshold", 3)),
            initial_delay=float((spec or {}).get("initialDelaySeconds", 0)) * scale,
            # Scaled as the periods, never below a second: an emulator answers at once, and a
            # starved machine must not fail its probes faster than a kubelet would.
            timeout=max(_PROBE_TIMEOUT, float((spec or {}).get("timeoutSeconds", 1)) * scale),
        )


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


class PodRuntime:
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

    def status_body(self) -> dict[str, Any]:
        """The kubelet's view of this pod as a ``pods/status`` merge patch (caller holds lock).

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
                {"type": "Ready", "status": ready, "lastTransitionTime": since},
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
                written = self.ctx.rest.merge_patch(f"{self.path}/status", self.status_body())
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

    # --- the prober ----------------------------------------------------------------------------

    def start_prober(self) -> None:
        """Start the probe thread."""
        thread = threading.Thread(target=self._probe_loop, name=f"prober-{self.name}", daemon=True)
        self._prober = thread
        thread.start()

    def stop_prober(self) -> None:
        """Stop the probe thread (and wait for it unless called from it)."""
        self._stop.set()
        thread = self._prober
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def _probe_loop(self) -> None:
        period = self.readiness.period if self.readiness else PROBE_INTERVAL
        settled = max(period, SETTLED_PROBE_INTERVAL)
        failures = {"readiness": 0, "liveness": 0}
        while not self._stop.wait(settled if self.ready else period):
            try:
                self._probe_once(failures)
            except Exception:  # a prober must survive anything; it is a test fixture
                _log.exception("prober of pod %s failed", self.name)

    def _crash_loop_due(self) -> bool:
        """Whether an exited re-sync container is due for its restart (CrashLoopBackOff).

        Only the re-sync loop's containers come back by themselves, after
        :data:`CRASH_BACKOFF`; an exited emulator stays terminated until a test restarts it
        (``kill_pod_process`` is how tests make a pod stay down).
        """
        if self.kind != "resync" or self.gone or "terminated" not in self.state:
            self._exited = None
            return False
        now = time.monotonic()
        if self._exited is None:
            self._exited = now
        if now - self._exited < CRASH_BACKOFF:
            return False
        self._exited = None
        return True

    def _check(self, probe: Probe | None) -> bool:
        return probe is None or http_probe(self.ip, probe.port, probe.path, probe.timeout)

    def _probe_once(self, failures: dict[str, int]) -> None:
        with self.lock:
            epoch, running = self.epoch, self.running
            if self.dirty:
                self.publish()
        process = self.process
        if not running and process is not None and self._crash_loop_due():
            _log.info("container of pod %s exited: restarting it (restartPolicy Always)", self.name)
            self.restart()
            return
        if not running or process is None:
            return
        alive = process.alive()
        healthy = alive and self._check(self.readiness)
        failures["readiness"] = 0 if healthy else failures["readiness"] + 1
        if self.liveness is not None and time.monotonic() >= self._liveness_due:
            self._liveness_due = time.monotonic() + self.liveness.period
            live = not alive or self._check(self.liveness)
            failures["liveness"] = 0 if live else failures["liveness"] + 1
        with self.lock:
            if epoch != self.epoch or self.gone:
                return  # restarted, killed or deleted while we probed: the result is stale
            changed = False
            if not alive and self.running:
                self.running = False
                self._terminated(process.returncode())
                changed = True
                _log.info("container of pod %s exited (%s)", self.name, process.returncode())
            threshold = self.readiness.failure_threshold if self.readiness else 1
            if healthy:
                changed = self.set_ready(True) or changed
            elif failures["readiness"] >= threshold or not alive:
                changed = self.set_ready(False) or changed
            if changed:
                self.publish()
            if self.liveness and failures["liveness"] >= self.liveness.failure_threshold:
                failures["liveness"] = 0
                _log.info("liveness probe of pod %s failed: restarting", self.name)
                self.restart()


def http_probe(host: str, port: int, path: str, timeout: float = _PROBE_TIMEOUT) -> bool:
    """A kubelet's ``httpGet`` probe: one GET on a fresh connection, closed after the answer;
    a status from 200 to 399 passes.

    A fresh connection each time, as a kubelet does: a kept-alive one would be closed by the
    server when the container stops, leaving its port in TIME_WAIT, so the restarted server
    could not bind it. The standard library's client, not httpx2: pods are probed several times a
    second for a whole test session, and it costs a quarter of the CPU per probe.
    """
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "kube-probe", "Connection": "close"})
        status = conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
    return 200 <= status < 400


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
