"""The chaos run's I/O: a testbed, the re-sync loop, a Pulumi stack, faults, and the checks.

``run_chaos`` starts its own testbed (real etcd, kube-apiserver and kubectl; emulated SGLang pods
on loopback), runs the re-sync loop as a process under a least-privilege ServiceAccount, declares
``adapters`` LoRAAdapters with the real Pulumi engine, and then follows a seeded schedule of
faults (see ``_schedule``) with ``pulumi up`` / ``refresh`` in between. A monitor thread samples
the system every 0.2 s to time each recovery. After the last fault it disarms every emulator
fault, gives the loop ``bound`` seconds to heal the service, runs a final ``up``, ``refresh`` and
``preview --expect-no-changes``, checks that cluster, pods and state agree with the program, and
destroys the stack, checking that nothing is left behind. Everything stays on loopback and in
the run's own directory; the testbed is stopped on the way out, whatever happened.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
from pulumi import automation as auto

from pulumi_lora._errors import ClusterError
from pulumi_lora._kube._objects import apiserver_errors, list_adapters
from pulumi_lora._pulumi._outputs import pod_path
from pulumi_lora._pulumi._resource import DYNAMIC_TYPE, RESOURCE_TYPE
from pulumi_lora.testing.chaos._invariants import (
    CRView,
    PodView,
    Snapshot,
    StateEntry,
    empty_violations,
    final_violations,
    healed_pods,
    is_whole,
    loop_violations,
)
from pulumi_lora.testing.chaos._report import (
    ChaosReport,
    FaultRecord,
    Sample,
    Span,
    recovery_times,
)
from pulumi_lora.testing.chaos._schedule import EMULATOR_FAULTS, Action, Step, build_schedule
from pulumi_lora.testing.chaos._setup import SERVICE, ChaosOptions, RunSetUp
from pulumi_lora.testing.loop import LoopProcess
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

__all__ = ["run_chaos"]

_SAMPLE_EVERY = 0.2
#: One client for every probe of a pod; no keep-alive, so restarted pods never see stale sockets.
_HTTP = httpx2.Client(
    trust_env=False, timeout=2.0, limits=httpx2.Limits(max_keepalive_connections=0)
)


def run_chaos(options: ChaosOptions, say: Callable[[str], None] = print) -> ChaosReport:
    """Run one chaos scenario end to end and return its report (``report.ok``: all held)."""
    with contextlib.ExitStack() as stack:
        if options.workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lora-chaos-")))
        else:
            workdir = options.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        testbed = stack.enter_context(Testbed(directory=workdir / "testbed", audit=False))
        run = _Run(options, testbed, workdir, say)
        run.report.phases["testbed"] = time.monotonic() - began
        try:
            run.execute()
        finally:
            run.close()
        return run.report


class _Run(RunSetUp):
    """One run's state; ``execute`` is the scenario from set-up to destroy."""

    def __init__(
        self, options: ChaosOptions, testbed: Testbed, workdir: Path, say: Callable[[str], None]
    ) -> None:
        self.options = options
        self.tb = testbed
        self.workdir = workdir
        self.say = say
        self.report = ChaosReport(
            seed=options.seed,
            duration=options.duration,
            adapters=options.adapters,
            replicas=options.replicas,
            bound=options.bound,
        )
        self.replicas = options.replicas
        self.client = testbed.client()
        self.namespace = ""
        self.handle: InferenceServiceHandle | None = None
        self.paths: dict[str, tuple[str, str]] = {}  # resource name → (path, other path)
        self.declared: dict[str, dict[str, Any]] = {}
        self.removed: dict[str, dict[str, Any]] = {}
        self.loop: LoopProcess | None = None
        self.loop_kubeconfig = workdir / "resync.kubeconfig"
        self.loop_namespace = "default"
        self.stack: auto.Stack | None = None
        self.samples: list[Sample] = []
        self.spans: list[Span] = []  # each step's (started, done, pod that must heal)
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None

    # --- the scenario ---------------------------------------------------------------------------

    def execute(self) -> None:
        """Set up, inject faults, check recovery, converge with Pulumi, destroy, check again."""
        with self._phase("set-up"):
            self._set_up()
        with self._phase("faults"):
            self._inject(
                build_schedule(
                    self.options.seed,
                    self.options.duration,
                    gap=self.options.gap,
                    apiserver_restart=self.options.apiserver_restart,
                )
            )
        with self._phase("loop-heal"):
            self._loop_heals()
        with self._phase("final-pulumi"):
            self._final_pulumi()
        with self._phase("destroy"):
            self._destroy()

    def close(self) -> None:
        """Stop the monitor and the loop (the testbed is stopped by the caller)."""
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(5)
        if self.loop is not None:
            code = self.loop.stop()
            if code != 0:
                self.report.violations.append(f"the re-sync loop exited {code} on SIGTERM")

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        self.say(f"[chaos] {name} ...")
        try:
            yield
        finally:
            self.report.phases[name] = round(time.monotonic() - began, 2)
            self.say(f"[chaos] {name} done in {self.report.phases[name]:.1f} s")

    # --- observing --------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Pods (from the testbed's kubelet and each pod's own /v1/models) and CRs."""
        assert self.handle is not None
        pods = tuple(
            PodView(p.name, p.ready, _served(p.url) if p.ready else None)
            for p in self.handle.pods()
        )
        try:
            with apiserver_errors():
                listed = list_adapters(self.client, self.namespace)
            crs: tuple[CRView, ...] | None = tuple(_cr_view(obj) for obj in listed)
        except ClusterError:  # the apiserver is away: this sample says "unknown"
            crs = None
        return Snapshot(time.monotonic() - self.t0, self.replicas, pods, crs)

    def _sample_forever(self) -> None:
        while not self._stop.wait(_SAMPLE_EVERY):
            snap = self.snapshot()
            self.samples.append((snap.at, is_whole(snap), healed_pods(snap)))
            self._supervise_loop()

    def _supervise_loop(self) -> None:
        """Play the Deployment: a loop process that exited is recorded and started again."""
        loop = self.loop
        if loop is not None and loop.proc.poll() is not None:
            self.report.loop_exits.append(loop.proc.returncode)
            self.say(f"[chaos] the re-sync loop exited {loop.proc.returncode}; restarting it")
            self._start_loop()

    def _wait_whole(self, timeout: float, what: str) -> float:
        """Seconds until a snapshot is whole; raises after ``timeout``."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if is_whole(self.snapshot()):
                return time.monotonic() - began
            time.sleep(_SAMPLE_EVERY)
        raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")

    # --- faults -----------------------------------------------------------------------------------

    def _inject(self, schedule: list[Step]) -> None:
        self.say(f"[chaos] {len(schedule)} steps over {self.options.duration:g} s")
        phase_start = time.monotonic() - self.t0
        shift = 0.0  # how far the schedule was pushed back by steps that overran
        for step in schedule:
            delay = phase_start + shift + step.at - (time.monotonic() - self.t0)
            if delay > 0:
                time.sleep(delay)
            else:  # the last step overran (an apiserver restart takes ~15 s): no burst after it
                shift -= delay
            started = time.monotonic() - self.t0
            target, outcome, heals = self._act(step)
            done = time.monotonic() - self.t0
            self.report.faults.append(
                FaultRecord(
                    step.action.value,
                    target,
                    round(started - phase_start, 3),
                    round(done - phase_start, 3),
                    outcome,
                )
            )
            self.spans.append((started, done, heals))
            self.say(
                f"[chaos] {started - phase_start:6.1f} s {step.action.value:<20} "
                f"{target} {'' if outcome == 'ok' else outcome}"
            )

    def _act(self, step: Step) -> tuple[str, str, str | None]:
        """Do one step; returns (target, outcome, the pod that must heal or None: all)."""
        assert self.handle is not None
        action = step.action
        ready = sorted(self.handle.ready_pods(), key=lambda p: p.name)
        if action is Action.APISERVER_RESTART:
            self.tb.restart_apiserver()
            return "kube-apiserver", "ok", None
        if action is Action.SCALE_UP:
            self.replicas += 1
            self.tb.scale(self.namespace, SERVICE, self.replicas)
            return f"{self.replicas} replicas", "ok", None
        if action is Action.SCALE_DOWN:
            self.replicas = self.options.replicas
            self.tb.scale(self.namespace, SERVICE, self.replicas)
            return f"{self.replicas} replicas", "ok", None
        if action is Action.PULUMI_UP:
            return (*self._pulumi_up(step), None)
        if action is Action.PULUMI_REFRESH:
            return "stack", self._outcome(lambda: self._stack().refresh(on_output=_quiet)), None
        if not ready:
            return "no Ready pod", "skipped", None
        pod = ready[step.pod % len(ready)]
        if action is Action.RESTART_POD:
            self.tb.restart_pod(self.namespace, pod.name)
        elif action is Action.REPLACE_POD:
            new = self.tb.replace_pod(self.namespace, pod.name)
            return f"{pod.name} -> {new}", "ok", new
        elif action is Action.CRASH_POD:
            self.tb.kill_pod_process(self.namespace, pod.name)
            time.sleep(1.0)  # the kubelet's restart back-off
            self.tb.restart_pod(self.namespace, pod.name)
        elif action is Action.SLOW_LOADS:
            _admin(pod.url, {"latency": {"/load_lora_adapter": 0.3}})
            self._unload(pod.url, step)
        elif action in EMULATOR_FAULTS:
            spec = EMULATOR_FAULTS[action].format(stall=self.options.load_timeout + 2)
            _admin(pod.url, {"faults": [spec]})
            self._unload(pod.url, step)
        elif action is Action.UNLOAD_OUT_OF_BAND:
            self._unload(pod.url, step)
        elif action is Action.WRONG_PATH:
            name = self._pick(step)[0]
            args = self.declared[name]
            first, second = self.paths[name]
            other = second if args["path"] == first else first
            _post(pod.url, "/unload_lora_adapter", {"lora_name": args["adapter_name"]})
            _post(
                pod.url,
                "/load_lora_adapter",
                {"lora_name": args["adapter_name"], "lora_path": other},
            )
        return pod.name, "ok", pod.name

    def _pick(self, step: Step) -> list[str]:
        names = sorted(self.declared)
        return sorted({names[i % len(names)] for i in step.adapters})

    def _unload(self, url: str, step: Step) -> None:
        """Unload the step's adapters behind everybody's back, so the loop must load again."""
        for name in self._pick(step):
            _post(url, "/unload_lora_adapter", {"lora_name": self.declared[name]["adapter_name"]})

    def _pulumi_up(self, step: Step) -> tuple[str, str]:
        names = self._pick(step)
        name = names[0]
        change = step.change
        if change == "remove" and len(self.declared) > self.options.adapters // 2:
            self.removed[name] = self.declared.pop(name)
            target = f"remove {name}"
        elif change == "add" and self.removed:
            back = sorted(self.removed)[0]
            self.declared[back] = self.removed.pop(back)
            target = f"add {back}"
        else:
            first, second = self.paths[name]
            args = self.declared[name]
            args["path"] = second if args["path"] == first else first
            target = f"swap {name}"
        return target, self._outcome(lambda: self._stack().up(on_output=_quiet))

    def _outcome(self, operation: Callable[[], object]) -> str:
        """Run a Pulumi operation: "ok", or its error's telling line (the whole text is kept in
        ``pulumi-errors.log`` in the run's directory)."""
        try:
            operation()
        except auto.errors.CommandError as exc:
            self._keep_error(str(exc))
            return f"failed: {_last_line(str(exc))}"
        return "ok"

    def _keep_error(self, text: str) -> None:
        with (self.workdir / "pulumi-errors.log").open("a", encoding="utf-8") as log:
            log.write(f"--- {time.monotonic() - self.t0:.1f} s\n{text}\n")

    def _stack(self) -> auto.Stack:
        assert self.stack is not None
        return self.stack

    # --- after the faults -------------------------------------------------------------------------

    def _loop_heals(self) -> None:
        """Disarm, restore the replica count, and give the loop ``bound`` seconds to heal."""
        assert self.handle is not None
        if self.replicas != self.options.replicas:
            self.replicas = self.options.replicas
            self.tb.scale(self.namespace, SERVICE, self.replicas)
        for pod in self.handle.pods():
            with contextlib.suppress(httpx2.HTTPError):
                _HTTP.delete(f"{pod.url}/_emulator/faults")
        last = time.monotonic()
        deadline = last + self.options.bound
        snap = self.snapshot()
        while time.monotonic() < deadline:
            snap = self.snapshot()
            if not loop_violations(snap):
                self.report.healed_after_last = round(time.monotonic() - last, 3)
                self.samples.append((snap.at, True, healed_pods(snap)))
                break
            time.sleep(_SAMPLE_EVERY)
        else:
            self.report.violations += [
                f"not healed {self.options.bound:g} s after the last fault: {v}"
                for v in loop_violations(snap)
            ]
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(5)
        samples = list(self.samples)
        times = recovery_times(self.spans, samples)
        for record, recovered in zip(self.report.faults, times, strict=True):
            record.recovered = recovered

    def _final_pulumi(self) -> None:
        stack = self._stack()
        try:
            stack.up(on_output=_quiet)
            stack.refresh(on_output=_quiet)
            stack.preview(expect_no_changes=True, on_output=_quiet)
        except auto.errors.CommandError as exc:
            self._keep_error(str(exc))
            self.report.final_up = f"failed: {_last_line(str(exc))}"
            self.report.violations.append(f"final pulumi run failed: {_last_line(str(exc))}")
            return
        self.report.final_up = "ok (up, refresh, no changes)"
        declared = {args["adapter_name"]: args["path"] for args in self.declared.values()}
        state = _state_entries(stack.export_stack().deployment or {})
        self.report.violations += final_violations(self.snapshot(), declared, state)

    def _destroy(self) -> None:
        try:
            self._stack().destroy(on_output=_quiet)
        except auto.errors.CommandError as exc:
            self._keep_error(str(exc))
            self.report.violations.append(f"pulumi destroy failed: {_last_line(str(exc))}")
            return
        self.report.violations += empty_violations(self.snapshot())


# --- small I/O helpers ----------------------------------------------------------------------------


def _served(url: str) -> dict[str, str] | None:
    """A pod's adapters (name → path) from its own /v1/models; None when it does not answer."""
    try:
        response = _HTTP.get(f"{url}/v1/models")
        response.raise_for_status()
        return {m["id"]: m["root"] for m in response.json()["data"] if m.get("parent")}
    except (httpx2.HTTPError, ValueError, KeyError, TypeError):
        return None


def _post(url: str, route: str, body: Mapping[str, Any]) -> None:
    """An out-of-band call to a pod (its outcome does not matter: it is the fault)."""
    with contextlib.suppress(httpx2.HTTPError):
        _HTTP.post(f"{url}{route}", json=dict(body), timeout=10)


def _admin(url: str, body: Mapping[str, Any]) -> None:
    response = _HTTP.post(f"{url}/_emulator/faults", json=dict(body))
    if response.status_code >= 300:
        raise RuntimeError(f"arming {body} on {url}: {response.text}")


def _cr_view(obj: Mapping[str, Any]) -> CRView:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    loaded = next((c for c in conditions if c.get("type") == "Loaded"), {})
    return CRView(
        name=obj["metadata"]["name"],
        adapter=spec.get("name", ""),
        path=spec.get("path", ""),
        generation=int(obj["metadata"].get("generation", 0)),
        loaded=loaded.get("status") == "True",
        observed_generation=loaded.get("observedGeneration"),
        loaded_path=status.get("loadedPath"),
    )


def _state_entries(deployment: Mapping[str, Any]) -> dict[str, StateEntry]:
    """Adapter name → its dynamic resource's outputs in an exported Pulumi deployment."""
    entries = {}
    for resource in deployment.get("resources") or ():
        if resource.get("type") not in (RESOURCE_TYPE, DYNAMIC_TYPE):
            continue
        outs = resource.get("outputs") or {}
        pods = {p["pod"]: pod_path(p, outs) for p in outs.get("pods") or ()}
        entries[outs.get("adapter_name", "")] = StateEntry(
            path=outs.get("path", ""), loaded=bool(outs.get("loaded")), pods=pods
        )
    return entries


def _last_line(text: str) -> str:
    """The most telling line of a CLI error (its last non-empty line), shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    meaningful = [line for line in lines if "error:" in line] or lines or [""]
    return meaningful[-1][:300]


def _quiet(_line: str) -> None:
    """Swallow the engine's progress lines (the report says what matters)."""
