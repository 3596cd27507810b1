"""Benchmark of the re-sync loop against a polling baseline, on the local testbed.

Two scenarios, one run (``python benchmarks/resync_benchmark.py``, under 5 minutes):

1. **Recovery after a restart.** 50 adapters on an InferenceService of 4 pods whose SGLang
   takes 100 ms per load (``--emulator-latency /load_lora_adapter=0.1``). Every round restarts
   the 4 pods; per pod it measures the time from the pod turning Ready (as a watch of this
   script sees it) to the first load request sent to it, and to all 50 adapters served (read
   from the pod's own ``/v1/models``). The event-driven loop (``pulumi-lora resync``) is run
   first, then a polling reconciler with 5 s and 10 s periods (what the in-cluster peers do),
   on the same pods; the benchmark's own SGLang client doing the same 50 loads is the floor.
   Targets: first request p99 ≤ 250 ms; all 50 ≤ 50 x 100 ms + 0.5 s; ÷ the bare client ≤ 1.02
   at p99.
2. **Scale.** 1,000 CRs over 20 pods (4 InferenceServices x 5 pods x 250 adapters, no
   latency, readiness probed at a real kubelet's pace): the initial sync's wall (target ≤ 15 s,
   beside the apiserver's write floor), its pod runs' timeline and the machine's busy and stolen
   CPU meanwhile, then the loop's CPU over an idle window (target ≤ 1 % of a core), its RSS
   (target ≤ 100 MB), and the duration of its verification sweeps.

Ratios to the targets are printed (≤ 1.0 meets the target). The loop runs as a real process
with the testbed's admin kubeconfig; pods are the testbed's emulators on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
from lightkube import KubeConfig
from lightkube.resources.core_v1 import Pod

from pulumi_lora._core._llmkube import adapter_manifest, pod_from_object
from pulumi_lora._core._reconcile import Desired, PodView, plan, pod_program
from pulumi_lora._kube._objects import (
    LoRAAdapterResource,
    apply_adapter,
    apply_adapter_status,
    as_dict,
    emit_event,
)
from pulumi_lora._resync._events import EVENT_SENDERS
from pulumi_lora._sglang import AsyncSGLangClient
from pulumi_lora._sglang._executor import run_async
from pulumi_lora.testing.loop import LoopProcess
from pulumi_lora.testing.testbed import DEFAULT_EXTRA_ARGS, InferenceServiceHandle, Testbed

#: The actor every "all loaded" figure is divided by.
BARE = "bare client"
ADAPTERS = 50
PODS = 4
LATENCY = 0.1
FIRST_LOAD_TARGET = 0.25
ALL_LOADED_TARGET = ADAPTERS * LATENCY + 0.5
BARE_RATIO_TARGET = 1.02
CPU_TARGET = 0.01
RSS_TARGET_MB = 100.0
SYNC_TARGET = 15.0


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (2 cores here: 2.0 is a busy machine)."""
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def cpu_ticks() -> tuple[int, int, int]:
    """The machine's CPU ticks so far (``/proc/stat``): busy, stolen by the hypervisor, all."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    idle, steal = fields[3] + fields[4], fields[7]
    return sum(fields) - idle - steal, steal, sum(fields)


def log(message: str) -> None:
    """Progress on stderr (the figures go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the loop as a process ----------------------------------------------------------------------


def start_loop(tb: Testbed, namespace: str | None, *extra: str) -> LoopProcess:
    """``pulumi-lora resync`` against the testbed, once its caches are synced."""
    args = ["--kubeconfig", str(tb.kubeconfig_path), "--metrics-host", "127.0.0.1"]
    args += ["--metrics-port", "0", "--lease-namespace", "default"]
    args += ["--namespace", namespace] if namespace else []
    loop = LoopProcess([*args, *extra], tb.directory / f"resync-{time.monotonic_ns()}.log")
    loop.wait_event("caches_synced", 60)
    return loop


# --- the polling baseline -----------------------------------------------------------------------


@dataclass
class Poller:
    """A reconciler that polls every ``period`` seconds, as the in-cluster peers do.

    Each tick lists the pods, reads every Ready pod's ``/v1/models`` and loads what is missing
    (serially per pod, pods in parallel), through the same core and client as the loop. It
    records, per pod, the wall time of the first load request of each tick that loaded.
    """

    tb: Testbed
    namespace: str
    service: str
    desired: Sequence[Desired]
    period: float
    first_loads: dict[str, list[float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    async def _run(self) -> None:
        client = self.tb.client()
        while not self._stop.is_set():
            started = time.monotonic()
            pods = [
                pod_from_object(as_dict(p))
                for p in client.list(
                    Pod,
                    namespace=self.namespace,
                    labels={"inference.llmkube.dev/service": self.service},
                )
            ]
            await asyncio.gather(
                *(self._pod(p.name, p.ip, p.port) for p in pods if p.ready and p.ip)
            )
            await asyncio.sleep(max(0.0, self.period - (time.monotonic() - started)))

    async def _pod(self, name: str, ip: str, port: int) -> None:
        async with AsyncSGLangClient(f"http://{ip}:{port}") as sglang:  # one tick, as the loop
            try:
                served = dict((await sglang.list_models()).adapters)
            except Exception:  # a pod on its way down: next tick
                return
            first = True
            for want in self.desired:
                action = plan(want, [PodView(name, True, adapters=served)], want.name)[0]
                if action.kind.value == "keep":
                    continue
                if first:
                    self.first_loads.setdefault(name, []).append(time.time())
                    first = False
                await run_async(pod_program(action, want, want.name), sglang)


@dataclass
class BareClient:
    """The floor of recovery: this script's own client loads the 50 adapters, one at a time over
    one connection, as soon as it sees a restarted pod serve (no cluster, no decisions).

    It reacts to the same watch the samples are measured from, and is measured the same way
    as the actors (Ready as that watch saw it → all 50 served, read by the same probe).
    """

    handle: InferenceServiceHandle
    watch: ReadyWatch
    desired: Sequence[Desired]
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        seen = set(self.watch.ready_at)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run(seen)), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    async def _run(self, seen: set[tuple[str, int]]) -> None:
        while not self._stop.is_set():
            fresh = [k for k in list(self.watch.ready_at) if k not in seen]
            for key in fresh:
                seen.add(key)
                await self._load_all(self.handle.pod(key[0]).url)
            await asyncio.sleep(0.002)

    async def _load_all(self, url: str) -> None:
        async with AsyncSGLangClient(url) as sglang:
            for want in self.desired:
                await sglang.load_adapter(want.name, want.path)


# --- scenario 1: recovery after restarts --------------------------------------------------------


class ReadyWatch:
    """This script's own watch of the pods: when each pod was (last) seen turning Ready."""

    def __init__(self, tb: Testbed, namespace: str) -> None:
        self.ready_at: dict[tuple[str, int], float] = {}  # (pod, restartCount) → wall time
        self._client = tb.client()
        self._namespace = namespace
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # ends with the testbed
            for _, obj in self._client.watch(Pod, namespace=self._namespace):
                pod = pod_from_object(as_dict(obj))
                if pod.ready:
                    self.ready_at.setdefault((pod.name, pod.restart_count), time.time())


#: One client for every probe this script makes. ``httpx2.get`` would build a client (and a TLS
#: context) per call: at 40 probes a second that is a core's worth of CPU taken from the pods
#: being measured. No keep-alive, so no connection is held open across a pod's restart.
PROBE = httpx2.Client(trust_env=False, timeout=2, limits=httpx2.Limits(max_keepalive_connections=0))


def served_count(url: str) -> int:
    """How many adapters a pod's ``/v1/models`` lists (-1 when it does not answer)."""
    try:
        body = PROBE.get(f"{url}/v1/models").json()
    except (httpx2.HTTPError, ValueError):
        return -1
    return sum(1 for m in body.get("data", ()) if m.get("parent"))


def restart_one(
    tb: Testbed, handle: InferenceServiceHandle, name: str, timeout: float = 60
) -> tuple[int, float]:
    """Restart one pod; return its restartCount and the wall time all adapters were served."""
    tb.restart_pod(handle.namespace, name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = handle.pod(name)
        if pod.ready and served_count(pod.url) == ADAPTERS:
            return pod.restart_count, time.time()
        time.sleep(0.025)
    raise RuntimeError(f"pod {name} did not get its {ADAPTERS} adapters back within {timeout}s")


@dataclass
class Recovery:
    """Per-pod samples of one mode, and the load average when its rounds ended."""

    first: list[float] = field(default_factory=list)
    all_loaded: list[float] = field(default_factory=list)
    load_average: str = ""


def recovery_rounds(
    tb: Testbed,
    handle: InferenceServiceHandle,
    watch: ReadyWatch,
    rounds: int,
    first_load_of: Callable[[str, float], float | None],
) -> Recovery:
    result = Recovery()
    for number in range(rounds):
        for pod in [p.name for p in handle.pods()]:  # one at a time, as crashes come
            restarts, finished = restart_one(tb, handle, pod)
            time.sleep(0.2)  # let the actor's log lines arrive
            ready = watch.ready_at[(pod, restarts)]
            first = first_load_of(pod, ready)
            if first is not None:
                result.first.append(first - ready)
            result.all_loaded.append(finished - ready)
        log(f"  round {number + 1}/{rounds}: {PODS} pods restarted and recovered")
    result.load_average = load_average()
    return result


def scenario_recovery(tb: Testbed, rounds: int, poll_rounds: int) -> dict[str, Recovery]:
    namespace = tb.create_namespace("bench-recovery")
    handle = tb.deploy_inference_service(
        namespace,
        "llama",
        replicas=PODS,
        emulator_args=("--emulator-latency", f"/load_lora_adapter={LATENCY}"),
    )
    handle.wait_ready(60)
    client = tb.client()
    desired = []
    for index in range(ADAPTERS):
        name = f"bench-{index:02d}"
        path = tb.make_adapter(name)
        spec = {"name": name, "path": path, "inferenceServiceRef": {"name": "llama"}}
        apply_adapter(client, adapter_manifest(namespace, name, spec, {}))
        desired.append(Desired(name, path))
    watch = ReadyWatch(tb, namespace)
    results: dict[str, Recovery] = {}

    log("recovery: event-driven loop")
    loop = start_loop(tb, namespace)
    try:
        wait_all_loaded(handle)

        def loop_first(pod: str, ready: float) -> float | None:
            runs = [
                e["first_load_at"]
                for e in loop.events("pod_synced")
                if e["pod"] == f"{namespace}/{pod}"
                and e.get("first_load_at")
                and e["first_load_at"] >= ready - 1
            ]
            return min(runs) if runs else None

        results["event-driven loop"] = recovery_rounds(tb, handle, watch, rounds, loop_first)
    finally:
        loop.stop()
    log("recovery: a bare client (the floor)")
    bare = BareClient(handle, watch, desired)
    bare.start()
    try:
        results[BARE] = recovery_rounds(tb, handle, watch, rounds, lambda _pod, _ready: None)
    finally:
        bare.stop()
    for period in (5.0, 10.0) if poll_rounds else ():  # --poll-rounds 0: the loop only
        log(f"recovery: polling every {period:g} s")
        poller = Poller(tb, namespace, "llama", desired, period)
        poller.start()
        try:
            wait_all_loaded(handle)

            def poll_first(pod: str, ready: float, poller: Poller = poller) -> float | None:
                later = [t for t in poller.first_loads.get(pod, ()) if t >= ready]
                return min(later) if later else None

            results[f"polling every {period:g} s"] = recovery_rounds(
                tb, handle, watch, poll_rounds, poll_first
            )
        finally:
            poller.stop()
    tb.scale(namespace, "llama", 0)
    return results


def wait_all_loaded(handle: InferenceServiceHandle, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not all(served_count(p.url) == ADAPTERS for p in handle.pods()):
        if time.monotonic() > deadline:
            raise RuntimeError("the adapters were not loaded everywhere in time")
        time.sleep(0.1)


# --- scenario 2: scale --------------------------------------------------------------------------


@dataclass
class Sync:
    """Where the initial sync's time went: when each kind of work last moved (seconds from the
    loop's start), how many of each, their summed request times, and the loop's own CPU."""

    wall: float
    loads_done: float
    statuses_done: float
    events_done: float
    loads: float
    statuses: float
    events: float
    status_seconds: float
    event_seconds: float
    watch_seconds: dict[str, float]
    loop_cpu: float
    load_average: str
    busy: float  # share of the machine's CPU time busy during the sync
    steal: float  # share stolen by the hypervisor (a figure of this machine, not of the loop)
    runs: Runs | None = None


@dataclass
class Runs:
    """The pod runs of the initial sync (seconds from the loop's start): how many, when their
    first loads were sent and when they ended. Runs in waves mean ``--concurrency`` held pods
    back; ends spread wide mean some pods were served slower than others."""

    count: int
    first_loads: tuple[float, float]
    ends: tuple[float, float]


def pod_runs(loop: LoopProcess, started_wall: float) -> Runs | None:
    """The `Runs` read from the loop's ``pod_synced`` events that loaded something."""
    runs = [e for e in loop.events("pod_synced") if e.get("loads")]
    if not runs:
        return None
    firsts = [e["first_load_at"] - started_wall for e in runs if e.get("first_load_at")]
    ends = [e["finished_at"] - started_wall for e in runs]
    return Runs(len(runs), (min(firsts), max(firsts)), (min(ends), max(ends)))


@dataclass
class Floor:
    """The apiserver's write rate from one client at the loop's concurrency (8 status writes,
    `EVENT_SENDERS` Event senders), writing what the initial sync writes: status, Events, then
    both at once."""

    status_per_second: float
    events_per_second: float
    both_seconds: float
    load_average: str


@dataclass
class Scale:
    sync: Sync
    floor: Floor | None
    idle_seconds: float
    cpu_fraction: float
    rss_mb: float
    peak_rss_mb: float
    sweeps: list[float]
    load_average: str


COUNTERS = {
    "loads": "pulumi_lora_resync_loads_total",
    "statuses": "pulumi_lora_resync_status_writes_total",
    "events": "pulumi_lora_resync_events_total",
}


def scenario_scale(
    tb: Testbed, services: int, idle: float, floor: bool, loop_args: Sequence[str] = ()
) -> Scale:
    namespace = tb.create_namespace("bench-scale")
    pods_each, crs = 20 // services, 1000 // services
    handles = [
        tb.deploy_inference_service(
            namespace,
            f"svc-{i}",
            replicas=pods_each,
            extra_args=DEFAULT_EXTRA_ARGS,
            probe_time_scale=1.0,  # a kubelet's real period: 20 probes/s, not 200
        )
        for i in range(services)
    ]
    for handle in handles:
        handle.wait_ready(120)
    path = tb.make_adapter("bench-shared")  # one directory serves every adapter name
    log(f"scale: creating 1000 CRs ({services} services x {pods_each} pods x {crs} adapters)")

    client = tb.client()

    def create(index: int) -> None:
        service = f"svc-{index % services}"
        name = f"a-{index:04d}"
        spec = {"name": name, "path": path, "inferenceServiceRef": {"name": service}}
        apply_adapter(client, adapter_manifest(namespace, name, spec, {}))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(1000)))
    log("scale: starting the loop (default 30 s verification)")
    started, started_wall = time.monotonic(), time.time()
    loop = start_loop(tb, namespace, "--log-level", "debug", *loop_args)
    try:
        loop.wait_event("verify_sweep", 300)
        sync = wait_quiet(loop, started)
        sync.runs = pod_runs(loop, started_wall)
        log(f"scale: initial sync done in {sync.wall:.1f} s; measuring {idle:.0f} s idle")
        sweeps_before = len(loop.events("verify_sweep"))
        cpu0, t0 = loop.cpu_seconds(), time.monotonic()
        peak_rss = 0.0
        while time.monotonic() - t0 < idle:
            time.sleep(1)
            peak_rss = max(peak_rss, loop.rss_mb()[0])
        cpu = (loop.cpu_seconds() - cpu0) / (time.monotonic() - t0)
        idle_load = load_average()
        rss, hwm = loop.rss_mb()
        sweeps = [e["seconds"] for e in loop.events("verify_sweep")[sweeps_before:]]
    finally:
        loop.stop()
    measured = write_floor(tb, namespace, int(sync.statuses), int(sync.events)) if floor else None
    for handle in handles:
        tb.scale(namespace, handle.name, 0)
    return Scale(sync, measured, idle, cpu, max(rss, peak_rss), hwm, sweeps, idle_load)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def total(metrics: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(
        value
        for (sample, sample_labels), value in metrics.items()
        if sample == name and all((k, v) in sample_labels for k, v in labels.items())
    )


def wait_quiet(loop: LoopProcess, started: float, quiet: float = 5.0, timeout: float = 300) -> Sync:
    """Until loads, status writes and Events have all stood still for ``quiet`` seconds; when
    each last moved is read from the loop's metrics, sampled every 0.2 s."""
    deadline = time.monotonic() + timeout
    moved = dict.fromkeys(COUNTERS, time.monotonic())
    counts: dict[str, float] = {}
    ticks = last_move_ticks = cpu_ticks()
    while time.monotonic() < deadline:
        metrics = loop.metrics()
        now = time.monotonic()
        for kind, name in COUNTERS.items():
            value = total(metrics, name)
            if counts.get(kind) != value:
                counts[kind], moved[kind], last_move_ticks = value, now, cpu_ticks()
        if now - max(moved.values()) >= quiet:
            (busy0, steal0, all0), (busy1, steal1, all1) = ticks, last_move_ticks
            share = max(1, all1 - all0)
            machine = ((busy1 - busy0) / share, (steal1 - steal0) / share)
            return sync_figures(loop, started, moved, counts, metrics, machine=machine)
        time.sleep(0.2)
    raise RuntimeError("the loop never went quiet")


def sync_figures(
    loop: LoopProcess,
    started: float,
    moved: dict[str, float],
    counts: dict[str, float],
    metrics: Samples,
    *,
    machine: tuple[float, float],
) -> Sync:
    watch = {
        dict(labels)["resource"]: value
        for (name, labels), value in metrics.items()
        if name == "pulumi_lora_resync_watch_handling_seconds_total"
    }
    return Sync(
        wall=max(moved.values()) - started,
        loads_done=moved["loads"] - started,
        statuses_done=moved["statuses"] - started,
        events_done=moved["events"] - started,
        loads=counts["loads"],
        statuses=counts["statuses"],
        events=counts["events"],
        status_seconds=total(metrics, "pulumi_lora_resync_write_seconds_sum", kind="status"),
        event_seconds=total(metrics, "pulumi_lora_resync_write_seconds_sum", kind="event"),
        watch_seconds=watch,
        loop_cpu=loop.cpu_seconds(),
        load_average=load_average(),
        busy=machine[0],
        steal=machine[1],
    )


def lane(write: Callable[[int], None], indexes: range) -> None:
    """One writer of the floor measurement: its share of the writes, one after another."""
    for index in indexes:
        write(index)


def write_floor(tb: Testbed, namespace: str, statuses: int, events: int) -> Floor:
    """What the apiserver takes from one client writing like the loop (the loop is stopped):
    ``statuses`` status applies with 8 in flight, ``events`` Events with `EVENT_SENDERS`, each
    alone and then both at once. Each status moves ``lastLoadedAt``, so every apply is a real
    write."""
    client = tb.client()
    crs = [as_dict(c) for c in client.list(LoRAAdapterResource, namespace=namespace)]
    crs = (crs * (1 + statuses // max(1, len(crs))))[:statuses]

    def write_status(index: int) -> None:
        cr = crs[index]
        status = dict(cr.get("status") or {})
        stamp = datetime.now(UTC) + timedelta(seconds=index + 1)
        status["lastLoadedAt"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = cr["metadata"]
        apply_adapter_status(client, meta["namespace"], meta["name"], status, "bench-floor")

    def write_event(index: int) -> None:
        cr = crs[index % len(crs)]
        emit_event(client, cr, reason="BenchFloor", message=f"floor {index}", component="bench")

    def timed(jobs: Sequence[tuple[Callable[[int], None], int, int]]) -> float:
        """Run ``(write, count, in_flight)`` jobs at once; their wall time."""
        begun = time.monotonic()
        with ThreadPoolExecutor(sum(width for _, _, width in jobs)) as pool:
            futures = [
                pool.submit(lane, write, range(first, count, width))
                for write, count, width in jobs
                for first in range(width)
            ]
            for future in futures:
                future.result()
        return time.monotonic() - begun

    log(f"floor: {statuses} status applies (8 at once), {events} Events ({EVENT_SENDERS} at once)")
    status_s = timed([(write_status, statuses, 8)])
    event_s = timed([(write_event, events, EVENT_SENDERS)])
    both_s = timed([(write_status, statuses, 8), (write_event, events, EVENT_SENDERS)])
    return Floor(statuses / status_s, events / event_s, both_s, load_average())


# --- report -------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def recovery_line(actor: str, data: Recovery, floor: Recovery | None) -> dict[str, Any]:
    """Print one actor's recovery figures; return them as data."""
    all50, all99 = statistics.median(data.all_loaded), percentile(data.all_loaded, 0.99)
    figures: dict[str, Any] = {
        "samples": len(data.all_loaded),
        "all_loaded_p50_s": all50,
        "all_loaded_p99_s": all99,
        "load_average": data.load_average,
    }
    first = "-"
    if data.first:
        first50, first99 = statistics.median(data.first), percentile(data.first, 0.99)
        first = (
            f"{first50 * 1000:>7.0f} / {first99 * 1000:>6.0f} ms "
            f"({first99 / FIRST_LOAD_TARGET:5.2f})"
        )
        figures |= {"first_load_p50_s": first50, "first_load_p99_s": first99}
    bare = "-"
    if floor is not None and floor.all_loaded:
        ratio50 = all50 / statistics.median(floor.all_loaded)
        ratio99 = all99 / percentile(floor.all_loaded, 0.99)
        bare = f"{ratio50:.3f} / {ratio99:.3f}"
        figures |= {"bare_ratio_p50": ratio50, "bare_ratio_p99": ratio99}
    print(
        f"{actor:<20} {len(data.all_loaded):>3}  {first:>33}"
        f"   {all50:>6.2f} / {all99:>5.2f} s ({all99 / ALL_LOADED_TARGET:4.2f})"
        f"  {bare:>15}   {data.load_average}"
    )
    return figures


def scale_report(scale: Scale) -> None:
    """Print the scale figures: the initial sync and where its time went, the apiserver's write
    floor, and the idle cost."""
    sync, floor = scale.sync, scale.floor
    print("\n== scale: 1,000 CRs over 20 pods, no load latency ==")
    print(
        f"initial sync (loop start to the last load, status write and Event): {sync.wall:.1f} s "
        f"(target {SYNC_TARGET:.0f} s, ratio {sync.wall / SYNC_TARGET:.2f}); "
        f"load average {sync.load_average}; the machine's CPU {sync.busy:.0%} busy, "
        f"{sync.steal:.0%} stolen by the hypervisor"
    )
    status_mean, event_mean = (
        mean(sync.status_seconds, sync.statuses),
        mean(sync.event_seconds, sync.events),
    )
    print(f"  loads:         {sync.loads:>6.0f}, the last at {sync.loads_done:5.1f} s")
    print(
        f"  status writes: {sync.statuses:>6.0f}, the last at {sync.statuses_done:5.1f} s, "
        f"{sync.status_seconds:6.1f} s of requests (mean {status_mean})"
    )
    print(
        f"  Events:        {sync.events:>6.0f}, the last at {sync.events_done:5.1f} s, "
        f"{sync.event_seconds:6.1f} s of requests (mean {event_mean})"
    )
    if sync.runs is not None:
        (first0, first1), (end0, end1) = sync.runs.first_loads, sync.runs.ends
        print(
            f"  pod runs that loaded: {sync.runs.count}, first loads sent at {first0:.1f} to "
            f"{first1:.1f} s, ended at {end0:.1f} to {end1:.1f} s"
        )
    watch = ", ".join(f"{kind} {sec:.2f} s" for kind, sec in sorted(sync.watch_seconds.items()))
    print(f"  watch handling (event loop): {watch}; the loop's CPU in all: {sync.loop_cpu:.1f} s")
    if floor is not None:
        writes = sync.statuses / floor.status_per_second + sync.events / floor.events_per_second
        print(
            f"apiserver write floor (one client, the loop stopped): "
            f"{floor.status_per_second:.0f} status applies/s (8 in flight), "
            f"{floor.events_per_second:.0f} Events/s ({EVENT_SENDERS} in flight); this sync's "
            f"{sync.statuses:.0f} + {sync.events:.0f} writes take {writes:.1f} s one kind after "
            f"the other, {floor.both_seconds:.1f} s both at once; load average {floor.load_average}"
        )
    cpu, longest = scale.cpu_fraction, max(scale.sweeps) if scale.sweeps else float("nan")
    print(
        f"idle CPU over {scale.idle_seconds:.0f} s: {cpu * 100:.2f}% of a core "
        f"(ratio {cpu / CPU_TARGET:.2f} to {CPU_TARGET * 100:.0f}%); load average "
        f"{scale.load_average}"
    )
    print(
        f"RSS: {scale.rss_mb:.0f} MB, peak {scale.peak_rss_mb:.0f} MB "
        f"(ratio {scale.peak_rss_mb / RSS_TARGET_MB:.2f} to {RSS_TARGET_MB:.0f} MB)"
    )
    print(
        f"verification sweeps in the window: {len(scale.sweeps)}, longest {longest * 1000:.0f} ms"
    )


def mean(seconds: float, count: float) -> str:
    """A mean request time in ms, or "-" without requests."""
    return f"{seconds / count * 1000:.0f} ms" if count else "-"


def report(recovery: dict[str, Recovery] | None, scale: Scale | None) -> dict[str, Any]:
    """Print the figures and their ratios to the targets; return them as data."""
    summary: dict[str, Any] = {}
    if recovery:
        print(
            f"\n== recovery after a restart: {ADAPTERS} adapters, {PODS} pods, "
            f"{LATENCY * 1000:.0f} ms per load, pods restarted one at a time =="
        )
        print(
            f"{'actor':<20} {'n':>3}  first request p50 / p99 (ratio)"
            f"   all loaded p50 / p99 (ratio)  ÷ {BARE} p50 / p99   load average"
        )
        floor = recovery.get(BARE)
        for actor, data in recovery.items():
            summary[actor] = recovery_line(actor, data, floor)
        print(
            f"targets: first request p99 <= {FIRST_LOAD_TARGET * 1000:.0f} ms, all loaded p99 <= "
            f"{ALL_LOADED_TARGET:.1f} s (ratio <= 1), and all loaded ÷ {BARE} <= "
            f"{BARE_RATIO_TARGET:.2f} at p99 (the {BARE} loads the same {ADAPTERS} adapters on "
            "the same pods, one at a time, with nothing else deciding)"
        )
    if scale:
        scale_report(scale)
        summary["scale"] = dataclasses.asdict(scale)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=2, help="restart rounds of the loop (4 samples each)"
    )
    parser.add_argument(
        "--poll-rounds", type=int, default=1, help="restart rounds of each polling baseline"
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=40.0, help="idle window of the scale scenario"
    )
    parser.add_argument(
        "--services",
        type=int,
        default=4,
        choices=(1, 2, 4, 5, 10, 20),
        help="InferenceServices sharing the 20 pods",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the apiserver write-rate measurement"
    )
    parser.add_argument("--only", choices=("recovery", "scale"), help="run one scenario")
    parser.add_argument(
        "--loop-arg",
        action="append",
        default=[],
        help="an extra argument for the scale scenario's loop (repeat: --loop-arg=--concurrency "
        "--loop-arg=16)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with _testbed() as tb:
        recovery = (
            scenario_recovery(tb, args.rounds, args.poll_rounds) if args.only != "scale" else None
        )
        scale = (
            scenario_scale(tb, args.services, args.idle_seconds, not args.no_floor, args.loop_arg)
            if args.only != "recovery"
            else None
        )
    summary = report(recovery, scale)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0


@contextlib.contextmanager
def _testbed() -> Iterator[Testbed]:
    log("starting the testbed")
    with Testbed(audit=False) as tb:
        KubeConfig.from_file(tb.kubeconfig_path)  # fail early on a bad testbed
        yield tb


if __name__ == "__main__":
    sys.exit(main())
