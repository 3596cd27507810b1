"""Benchmark: requests for declared adapters through restarts, scale-ups, rollouts, revision swaps
and bad revisions, with the readiness gate and without it, side by side in one run (issue 54).

On a fresh testbed (real etcd, kube-apiserver and kube-controller-manager: the real Deployment,
ReplicaSet and EndpointSlice controllers), two namespaces, each with an InferenceService of 3
SGLang emulators in network namespaces of their own (``netns``), six adapters declared through
the provider (``direct``), loads of 0.4 s (``--emulator-latency /load_lora_adapter=0.4``), a 1 s
start, readiness probed at a real kubelet's pace, and a re-sync loop run as the identity
``resync_manifests(watch_namespace=NS)`` renders: **with the gate** (``readiness_gate=True``, its
``MutatingAdmissionPolicy`` bound to NS) or **without**.

``pulumi_lora.testing.traffic.Traffic`` sends 40 requests a second to each namespace, for random
declared adapters, to the ready endpoints of its Service's EndpointSlices (as kube-proxy sends
them), and counts every answer by kind. The events, each on both sides in turn: a pod's restart,
a scale-up, a rolling restart by a flag change on the InferenceService (``kubectl patch``: the
operator writes a new pod template, the real deployment controller rolls it), a revision swap
of one adapter (provider ``update``) and a bad revision (rank 512 above ``--max-lora-rank 64``:
``SwapRolledBack``). A window runs from the event until every pod is Ready, serves every
declared adapter at its path and is in the Service's slices, plus 1 s. Failures on a pod whose
container stopped (the restarted one, the old pods of a rollout) are counted apart.

Then the rolling swap on the gated side, per pod: its gate's False → True (sampled every 50 ms)
next to its parts: its endpoint leaving the EndpointSlices (sampled), the drain
(``drain_seconds``), a direct unload + load and a one-token smoke ``/generate`` on one pod.

Targets: 0 failed requests with the gate; per pod, a swap takes at most drain + load + smoke +
1 s. Run: ``.venv/bin/python benchmarks/served_benchmark.py [--quick]`` (root, for netns pods;
the provisioned tools: ``python3 tools/provision.py``); about 2 minutes on two cores.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from pulumi_lora._core._gate import GATE_CONDITION
from pulumi_lora._errors import SwapRolledBack
from pulumi_lora._kube._objects import as_dict, get_adapter
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.deploy import coexistence_policy, resync_manifests
from pulumi_lora.testing.loop import LoopProcess, wait_until
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from pulumi_lora.testing.traffic import (
    SERVICE_NAME_LABEL,
    EndpointSlice,
    Traffic,
    ready_endpoints,
    sampled,
)

PORT = 30000  # the Service's port and the container's
LOAD_LATENCY = 0.4
RATE = 40.0
DRAIN_SECONDS = 2.0  # the provider's default drain_seconds
STARTUP_DELAY = 1.0
SLACK = 1.0  # the target's "+ 1 s"
SETTLE = 1.0  # a window goes on this long after the event is over
FLAG = ("--max-loras-per-batch", "8")  # SGLang's default value: a harmless flag change
PROBE = httpx2.Client(
    trust_env=False, timeout=10, limits=httpx2.Limits(max_keepalive_connections=0)
)


def log(message: str) -> None:
    """Progress on stderr (the figures go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Window:
    """One event on one side: its requests by kind, its length, and how many requests a pod
    whose container stopped left unanswered (refused, timed out)."""

    counts: Counter[str]
    seconds: float
    on_stopping: int


@dataclass
class Side:
    """One namespace: its InferenceService, loop, traffic, and the provider's adapters."""

    label: str
    gated: bool
    tb: Testbed
    namespace: str
    loop: LoopProcess
    handle: InferenceServiceHandle
    provider: LoRAAdapterProvider
    want: dict[str, str] = field(default_factory=dict)  # adapter → declared path
    states: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # id, outs
    traffic: Traffic | None = None
    windows: dict[str, Window] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def props(self, name: str, path: str) -> dict[str, Any]:
        """The resource's inputs: adapter ``name`` at ``path`` on InferenceService ``llama``."""
        return dict(
            adapter_name=name, path=path, inference_service="llama", namespace=self.namespace
        )

    @property
    def sender(self) -> Traffic:
        assert self.traffic is not None
        return self.traffic


def gates_new_pods(tb: Testbed, namespace: str) -> bool:
    """Whether a new SGLang pod in ``namespace`` gets the gate (a server-side dry run)."""
    labels = {"inference.llmkube.dev/service": "probe", "inference.llmkube.dev/runtime": "sglang"}
    meta = {"name": "probe", "namespace": namespace, "labels": labels}
    spec = {"containers": [{"name": "sglang", "image": "none"}], "nodeName": "x"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    done = tb.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    return done.returncode == 0 and bool(json.loads(done.stdout)["spec"].get("readinessGates"))


def make_side(tb: Testbed, gated: bool, replicas: int) -> Side:
    """A namespace with its loop (as the rendered identity) and its InferenceService."""
    kind = "gated" if gated else "plain"
    namespace, system = tb.create_namespace(f"served-{kind}"), tb.create_namespace("served-loop")
    name = f"bench-{kind}"
    manifests = resync_manifests(
        system, "pulumi-lora:bench", name=name, watch_namespace=namespace, lease_name=name,
        replicas=0, readiness_gate=gated,
    )  # fmt: skip
    # LLMKube's LoRA controller is held off every CR by the testbed-wide policy (see `run`).
    tb.apply_manifests([m for m in manifests if not m["kind"].startswith("ValidatingAdmission")])
    token = tb.kubectl("create", "token", name, "-n", system, "--duration", "2h", check=True)
    user = f"system:serviceaccount:{system}:{name}"
    kubeconfig = tb.write_kubeconfig(
        tb.directory / f"{name}.kubeconfig", token.stdout.strip(), user
    )
    if gated:
        wait_until(lambda: gates_new_pods(tb, namespace), 30, what="the gate's policy in force")
    args = f"--kubeconfig {kubeconfig} --namespace {namespace} --lease-namespace {system} "
    args += f"--lease-name {name} --metrics-host 127.0.0.1 --metrics-port 0"
    loop = LoopProcess(args.split(), tb.directory / f"{name}.log")
    loop.wait_event("caches_synced", 60)
    handle = tb.deploy_inference_service(
        namespace, "llama", replicas=replicas, network="netns", endpoint_port=PORT,
        startup_delay=STARTUP_DELAY, probe_time_scale=1.0,  # one probe a second, as a kubelet
        emulator_args=("--emulator-latency", f"/load_lora_adapter={LOAD_LATENCY}"),
    )  # fmt: skip
    handle.wait_ready(90)
    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kube=KubeSource(str(tb.kubeconfig_path)))
    label = "with the gate" if gated else "without"
    return Side(label, gated, tb, namespace, loop, handle, provider)


def declare(side: Side, paths: dict[str, str]) -> None:
    """Create every adapter through the provider (``direct``): its CR, loaded on every pod."""
    for name, path in paths.items():
        created = side.provider.create(side.props(name, path))
        side.states[name] = (created.id, created.outs or {})
        side.want[name] = path


def settled(side: Side, replicas: int, gone: frozenset[str] = frozenset()) -> bool:
    """Every pod (none of ``gone``) Ready, serving exactly what is declared, and in the slices."""
    pods = side.handle.pods()
    if len(pods) != replicas or not all(p.ready for p in pods) or gone & {p.name for p in pods}:
        return False
    try:
        served = side.handle.served(patience=2.0)
    except AssertionError:  # a pod on its way out
        return False
    if len(served) != replicas or any(found != side.want for found in served.values()):
        return False
    return sorted(side.sender.endpoints) == sorted(f"{p.ip}:{PORT}" for p in pods)


def window(
    side: Side,
    event: str,
    act: Callable[[], object],
    until: Callable[[], bool],
    stopping: frozenset[str] = frozenset(),
) -> None:
    """Mark ``event``, act, wait until ``until()``, SETTLE more; count the window's requests
    (apart: the unanswered ones on ``stopping``, the endpoints of pods whose container stops)."""
    start = side.sender.mark(event)
    act()
    try:
        wait_until(until, 180, interval=0.1, what=f"{side.label}: {event} over")
    except AssertionError as exc:  # counted all the same, and said
        side.notes.append(f"{event}: {exc}")
    time.sleep(SETTLE)
    end = side.sender.mark(f"{event}: over")
    report = side.sender.report()
    failures = report.failed(start, end)
    on_stopping = sum(1 for o in failures if o.endpoint in stopping and o.kind != "not_loaded")
    side.windows[event] = Window(report.counts(start, end), end - start, on_stopping)


# --- the events -----------------------------------------------------------------------------------


def steady(side: Side, _replicas: int) -> None:
    window(side, "steady state (5 s)", lambda: time.sleep(5), lambda: True)


#: The crash restart's event: a container that stops unannounced refuses what is sent to it until
#: the EndpointSlice controller sees it stop (the only failures no gate can prevent).
CRASH = "a pod restarts (1 s start)"


def restart(side: Side, replicas: int) -> None:
    victim = side.handle.pods()[0]

    def back() -> bool:
        pod = side.handle.pod(victim.name)
        return pod.restart_count > victim.restart_count and settled(side, replicas)

    act = functools.partial(side.tb.restart_pod, side.namespace, victim.name)
    window(side, CRASH, act, back, frozenset({f"{victim.ip}:{PORT}"}))


def scale_up(side: Side, replicas: int) -> None:
    act = functools.partial(side.tb.scale, side.namespace, "llama", replicas + 1)
    window(side, f"scale {replicas} → {replicas + 1}", act, lambda: settled(side, replicas + 1))
    side.sender.mark("scale down (not counted)")
    side.tb.scale(side.namespace, "llama", replicas)
    wait_until(lambda: settled(side, replicas), 90, what="back to the replicas")


def rolling_restart(side: Side, replicas: int) -> None:
    old = frozenset(p.name for p in side.handle.pods())
    stopping = frozenset(f"{p.ip}:{PORT}" for p in side.handle.pods())
    patch = json.dumps([{"op": "add", "path": "/spec/extraArgs/-", "value": v} for v in FLAG])
    command = ["patch", "inferenceservice", "llama", "-n", side.namespace, "--type=json"]
    act = functools.partial(side.tb.kubectl, *command, "-p", patch, check=True)
    event = "rolling restart (a flag change)"
    window(side, event, act, lambda: settled(side, replicas, old), stopping)


def swap(side: Side, replicas: int, name: str, path: str, sampler: Sampler | None) -> float:
    """A revision swap of ``name`` to ``path`` (provider ``update``); its wall time."""
    ident, outs = side.states[name]
    took = 0.0

    def update() -> None:
        nonlocal took
        started = time.monotonic()
        with sampler.running() if sampler else contextlib.nullcontext():
            done = side.provider.update(ident, outs, side.props(name, path))
        took = time.monotonic() - started
        side.states[name], side.want[name] = (ident, done.outs or {}), path

    window(side, "swap of one adapter's revision", update, lambda: settled(side, replicas))
    return took


def bad_revision(side: Side, replicas: int, name: str, bad: str) -> str:
    """A swap of ``name`` to a revision SGLang refuses; what it left (the error, the CR's path)."""
    ident, outs = side.states[name]
    said = "no error"

    def update() -> None:
        nonlocal said
        try:
            side.provider.update(ident, outs, side.props(name, bad))
        except SwapRolledBack:
            said = "SwapRolledBack"
        except Exception as exc:  # reported, not raised: the table still prints
            said = f"{type(exc).__name__}: {exc}"

    window(side, "bad revision (rank 512 > 64)", update, lambda: settled(side, replicas))
    stored = get_adapter(side.tb.client(), side.namespace, name) or {}
    kept = (stored.get("spec") or {}).get("path")
    return f"{said}; the CR names {kept}; every pod serves {side.want[name]}"


# --- the swap's timeline --------------------------------------------------------------------------


@dataclass
class Sampler:
    """Pods' gate conditions and the Service's ready endpoints, every 50 ms on a thread."""

    side: Side
    samples: list[tuple[float, dict[str, str], dict[str, str], set[str]]] = field(
        default_factory=list
    )

    def sample(self, client: Client) -> None:
        """One look: each pod's gate status and address, and the slices' ready endpoints."""
        namespace, gates, addresses = self.side.namespace, {}, {}
        for obj in client.list(Pod, namespace=namespace):
            pod = as_dict(obj)
            name = pod["metadata"]["name"]
            found = [c for c in pod["status"].get("conditions", []) if c["type"] == GATE_CONDITION]
            gates[name] = found[0]["status"] if found else "-"
            addresses[name] = f"{pod['status'].get('podIP')}:{PORT}"
        labels: dict[str, Any] = {SERVICE_NAME_LABEL: "llama"}
        slices = [dict(s) for s in client.list(EndpointSlice, namespace=namespace, labels=labels)]
        self.samples.append((time.monotonic(), gates, addresses, set(ready_endpoints(slices))))

    @contextlib.contextmanager
    def running(self, every: float = 0.05) -> Iterator[None]:
        client = self.side.tb.client()
        with sampled(lambda: self.sample(client), every):
            yield

    def per_pod(self) -> dict[str, tuple[float, float, float]]:
        """Pod → (gate False → endpoint out of the slices, gate False → True, True → back in)."""
        found: dict[str, tuple[float, float, float]] = {}
        for pod in sorted({p for _, gates, _, _ in self.samples for p in gates}):
            off = next((s for s in self.samples if s[1].get(pod) == "False"), None)
            later = [s for s in self.samples if off is not None and s[0] >= off[0]]
            on = next((s for s in later if s[1].get(pod) == "True"), None)
            if off is None or on is None:
                continue
            left = next((s[0] for s in later if s[2].get(pod) not in s[3]), math.nan)
            back = next((s[0] for s in later if s[0] >= on[0] and s[2].get(pod) in s[3]), math.nan)
            found[pod] = (left - off[0], on[0] - off[0], back - on[0])
        return found


def direct_parts(url: str, path: str, rounds: int = 3) -> tuple[float, float]:
    """Medians of a direct unload + load and of a one-token smoke ``/generate`` on one pod."""
    loads, smokes = [], []
    body = {"text": "Hello", "lora_path": "probe", "return_logprob": True,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0}}  # fmt: skip
    for _ in range(rounds):
        started = time.monotonic()
        load = {"lora_name": "probe", "lora_path": path}
        PROBE.post(f"{url}/load_lora_adapter", json=load).raise_for_status()
        loaded = time.monotonic()
        PROBE.post(f"{url}/generate", json=body).raise_for_status()
        smoked = time.monotonic()
        PROBE.post(f"{url}/unload_lora_adapter", json={"lora_name": "probe"}).raise_for_status()
        loads.append(loaded - started + time.monotonic() - smoked)
        smokes.append(smoked - loaded)
    return statistics.median(loads), statistics.median(smokes)


# --- report ---------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """The swap's figures: per pod (leave, False → True, back), the walls, the direct parts."""

    pods: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    wall: float = 0.0
    plain: float = 0.0
    load: float = 0.0
    smoke: float = 0.0
    outcomes: dict[str, str] = field(default_factory=dict)


def failed(counts: Counter[str]) -> int:
    return sum(n for kind, n in counts.items() if kind != "ok")


def cell(found: Window | None) -> str:
    """One side's figures for one event (see COLUMNS)."""
    if found is None:
        return " ".join(f"{'-':>{len(c)}}" for c in COLUMNS.split())
    sent, lost, not_loaded = found.counts.total(), failed(found.counts), found.counts["not_loaded"]
    other, stopping = lost - not_loaded - found.on_stopping, found.on_stopping
    return f"{sent:>4} {lost:>6} {not_loaded:>10} {stopping:>8} {other:>5} {found.seconds:>5.1f}s"


COLUMNS = "sent failed not_loaded stopping other window"


def report(sides: list[Side], timeline: Timeline, replicas: int, quick: bool) -> bool:
    gated, plain = sides
    print(f"\n== requests per event: {RATE:.0f}/s to each side, {replicas} pods, {len(gated.want)} "
          f"adapters, {LOAD_LATENCY} s loads, {STARTUP_DELAY:.0f} s starts ==")  # fmt: skip
    print(f"{'':<33} | {'with the gate':<{len(COLUMNS)}} | without")
    print(f"{'event':<33} | {COLUMNS} | {COLUMNS}")
    for event in gated.windows:
        print(f"{event:<33} | {cell(gated.windows[event])} | {cell(plain.windows.get(event))}")
    print("failed: not_loaded (SGLang's 400 \"never been loaded\"); stopping: unanswered (refused,"
          " timed out) by a pod whose container stopped (the restarted one, the old ones of the"
          " rollout); other: any other answer but 200; window: the event until every pod serves"
          f" everything and is in the slices, + {SETTLE:.0f} s")  # fmt: skip
    for side in sides:
        for event, found in side.windows.items():
            if failed(found.counts):
                print(f"{side.label}, {event}: {dict(sorted(found.counts.items()))}")
        print(f"bad revision, {side.label}: {timeline.outcomes.get(side.label, '?')}")
        for note in side.notes:
            print(f"NOTE {side.label}: {note}")
    print(f"\n== the rolling swap, with the gate: {len(timeline.pods)} pods one at a time in "
          f"{timeline.wall:.2f} s (without: all at once, {timeline.plain:.2f} s) ==")  # fmt: skip
    print(f"parts: drain = the endpoint leaving the slices (per pod, sampled every 50 ms) + "
          f"drain_seconds {DRAIN_SECONDS:.1f} s; unload + load {timeline.load:.3f} s and smoke "
          f"{timeline.smoke:.3f} s (direct, one pod, median of 3)")  # fmt: skip
    print(f"{'pod':<26} {'leave':>6} {'drain':>6} {'load':>6} {'smoke':>6} {'budget':>7} "
          f"{'False→True':>10} {'ratio':>6}  verdict  back in the slices")  # fmt: skip
    per_pod_ok = bool(timeline.pods)
    for pod, (leave, took, back) in sorted(timeline.pods.items()):
        budget = leave + DRAIN_SECONDS + timeline.load + timeline.smoke + SLACK
        per_pod_ok &= took <= budget
        print(f"{pod:<26} {leave:>6.2f} {DRAIN_SECONDS:>6.2f} {timeline.load:>6.3f} "
              f"{timeline.smoke:>6.3f} {budget:>7.2f} {took:>10.2f} {took / budget:>6.2f}  "
              f"{'PASS' if took <= budget else 'FAIL':<7}  +{back:.2f} s")  # fmt: skip
    windows = gated.windows.values()
    sent, lost = sum(w.counts.total() for w in windows), sum(failed(w.counts) for w in windows)
    not_loaded = sum(w.counts["not_loaded"] for w in windows)
    stopping = sum(w.on_stopping for w in windows)
    verdict = {True: "PASS", False: "FAIL"}
    crashed = gated.windows[CRASH].on_stopping if CRASH in gated.windows else 0
    print("\n== targets ==")
    print(f"0 requests met a pod without its adapters, with the gate: {not_loaded} of {sent}   "
          f"{verdict[not_loaded == 0]}")  # fmt: skip
    print(f"0 failed requests with the gate, but a crashed container's refusals: "
          f"{lost - crashed} of {sent}   {verdict[lost - crashed == 0]}")  # fmt: skip
    print(f"  refused by the crashed container before the EndpointSlice controller saw it stop "
          f"(no gate prevents these; a deleted pod drains on stop instead): {crashed}")  # fmt: skip
    print(f"  unanswered by other stopping pods (a rollout's old ones): {stopping - crashed}")
    print(f"per pod, a swap takes at most drain + load + smoke + 1 s: {verdict[per_pod_ok]}")
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"\nload average {load}; commit {git_describe()}; {time.strftime('%Y-%m-%d %H:%M')}")
    print("reproduce: .venv/bin/python benchmarks/served_benchmark.py" + " --quick" * quick)
    return lost - crashed == 0 and per_pod_ok


def git_describe() -> str:
    where = Path(__file__).parent
    command = ["git", "describe", "--always", "--dirty"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=where, check=False)
    return done.stdout.strip() or "?"


# --- the run --------------------------------------------------------------------------------------


def run(tb: Testbed, replicas: int, adapters: int) -> tuple[list[Side], Timeline]:
    tb.apply_manifests(coexistence_policy("bench", managed_only=False))
    tb.wait_llmkube_held_off()
    paths = {f"served-{i}": tb.make_adapter(f"served-{i}") for i in range(adapters)}
    v2 = tb.make_adapter("served-0-v2")
    bad = tb.make_adapter("served-0-bad", rank=512)  # above the pods' --max-lora-rank 64
    sides = []
    for gated in (True, False):
        log(f"setting up the side {'with' if gated else 'without'} the gate")
        side = make_side(tb, gated, replicas)
        declare(side, paths)
        traffic = Traffic(tb.client(), side.namespace, "llama", sorted(paths), rate=RATE, seed=54)
        side.traffic = traffic.start()
        wait_until(functools.partial(settled, side, replicas), 60, what="every pod serving")
        sides.append(side)
    timeline = Timeline()
    timeline.load, timeline.smoke = direct_parts(sides[0].handle.pods()[0].url, paths["served-0"])
    for step in (steady, restart, scale_up, rolling_restart):
        for side in sides:
            log(f"{step.__name__}: {side.label}")
            step(side, replicas)
    sampler = Sampler(sides[0])
    for side in sides:
        log(f"swap: {side.label}")
        took = swap(side, replicas, "served-0", v2, sampler if side.gated else None)
        setattr(timeline, "wall" if side.gated else "plain", took)
    timeline.pods = sampler.per_pod()
    for side in sides:
        log(f"bad revision: {side.label}")
        timeline.outcomes[side.label] = bad_revision(side, replicas, "served-0", bad)
    for side in sides:
        side.sender.stop()
        side.loop.stop()
    return sides, timeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 replicas and 3 adapters")
    args = parser.parse_args(argv)
    replicas, adapters = (2, 3) if args.quick else (3, 6)
    log("starting the testbed")
    with Testbed(audit=False) as tb:
        sides, timeline = run(tb, replicas, adapters)
    return 0 if report(sides, timeline, replicas, args.quick) else 1


if __name__ == "__main__":
    sys.exit(main())
