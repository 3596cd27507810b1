"""A pod's probes as the testbed's kubelet runs them: httpGet checks on a thread of their own.

:class:`Prober` is a base class of ``_kubelet.PodRuntime``: it probes readiness and liveness,
publishes what changed, and restarts a container as the probes and its restart policy say.
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from pulumi_lora.testing.testbed._container_spec import ContainerKind
from pulumi_lora.testing.testbed._process import ManagedProcess

__all__ = ["PROBE_INTERVAL", "PROBE_TIME_SCALE", "Prober"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

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

_PROBE_TIMEOUT = 1.0
"""A kubelet's default ``timeoutSeconds`` (and its least: the field counts whole seconds)."""


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
        (``periodSeconds``, ``initialDelaySeconds``) multiplied by ``scale``.

        Its ``timeoutSeconds`` is never scaled: it is how long the server may take to answer,
        which a test does not make any shorter. A kubelet waits that long, and so does this
        prober: SGLang's ``/health_generate`` answers only after its one-token generation, in
        one-second steps (LLMKube declares 5 s for it). Scaled down to the floor of a second,
        its answer (a second and a few milliseconds) raced the timeout, and with
        ``failureThreshold: 1`` each lost race took the pod out of Ready.
        """
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
            timeout=max(_PROBE_TIMEOUT, float((spec or {}).get("timeoutSeconds") or 1)),
        )


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


class Prober:
    """The prober of :class:`~pulumi_lora.testing.testbed._kubelet.PodRuntime` (a base class
    of it, which sets these attributes and holds the pod's status)."""

    name: str
    kind: ContainerKind
    ip: str
    lock: threading.RLock
    ready: bool
    epoch: int
    running: bool
    dirty: bool
    gone: bool
    state: dict[str, Any]
    process: ManagedProcess | None
    readiness: Probe | None
    liveness: Probe | None
    _exited: float | None
    _stop: threading.Event
    _prober: threading.Thread | None
    _liveness_due: float

    def publish(self) -> None:
        raise NotImplementedError

    def set_ready(self, ready: bool) -> bool:
        raise NotImplementedError

    def restart(self) -> None:
        raise NotImplementedError

    def _terminated(self, code: int | None) -> None:
        raise NotImplementedError

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
