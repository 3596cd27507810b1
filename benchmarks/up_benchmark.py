"""Benchmark: Pulumi operations on LoRAAdapter fleets, against the path users would otherwise take.

Two fleets on the local testbed (real engine, real apiserver, the real pulumi-kubernetes plugin,
emulated SGLang pods that serialize their loads, pods in parallel):

* ``small``: 50 adapters on a 4-pod InferenceService, 100 ms per load;
* ``fleet``: 300 adapters on an 8-pod InferenceService, 100 ms per load (a fast, realistic
  figure: docs/performance.md has the physics of a load).

The floor of an ``up`` is N x load latency (every pod loads every adapter, one at a time). Two
stacks run beside the LoRAAdapters in the same run, so every figure is a ratio or a difference
measured side by side (absolute times are not stable on a shared machine):

* **the peer**: what a platform team declares without this project, one pulumi-kubernetes
  ``CustomResource`` per LLMKube LoRAAdapter CR (the same specs, in a namespace of its own),
  leaving the loading to LLMKube's controller, later and unchecked;
* **no-op** dynamic resources (``ProbeFile``): the engine's own cost for as many resources;
* for the small fleet, the same no-op **recording an adapter's outputs** (``shape="adapter"``,
  ``engine_probe.ADAPTER_OUTPUTS``): the engine's and the SDK's cost of an adapter's properties,
  so that what is left beyond it is the provider's own (its import, its look, its work), printed
  as information.

===========================================================================  ======
figure                                                                       target
===========================================================================  ======
fleet ``up``: wall / max(N x latency, the peer's ``up``)                      <= 1.15
fleet ``preview --refresh --expect-no-changes``: wall / the peer's            <= 0.90
small ``up``: (wall - no-op up) / (N x latency)                              <= 1.10
small ``refresh``: wall - no-op refresh (median of ``--repeat`` pairs)        <= 0.3 s
small ``up`` with nothing to do (diff's live look): wall - no-op up (median)  <= 0.3 s
fleet ``up`` from Pulumi YAML (``provider/``) / the Python resource's ``up``     <= 1.1
===========================================================================  ======

The fleet's no-op ratios are printed too, as information (with ``--fleet 300x8@0.02`` they are
the old stress figures). The YAML fleet is the same number of ``pulumi-lora:index:LoRAAdapter``
resources, declared in a ``Pulumi.yaml`` that names ``provider/`` and run with ``pulumi up`` in
its folder (the CLI and the YAML language host, as a user runs it), on an InferenceService of its
own of the same size.

For where the time goes, each step also prints the CPU seconds spent in that step by the engine
(the ``pulumi`` CLI and its language host), our provider process, the pulumi-kubernetes
plugin, this program, the apiserver with etcd, and the emulated pods, and how many requests the
apiserver answered about the step's namespace.

Run: ``.venv/bin/python benchmarks/up_benchmark.py [--only small|fleet]
[--small 50x4@0.1] [--repeat 7] [--fleet 300x8@0.1] [--llmkube policy|off|on]`` (needs the
provisioned tools: ``python3 tools/provision.py``). Both fleets take about 6 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as kubernetes
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._args import AdapterArgs
from pulumi_lora._models import API_VERSION, KIND
from pulumi_lora._pulumi._resource import unwrap_sorted_batch_setitems
from pulumi_lora.deploy import coexistence_policy
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.engine_probe import ProbeFile
from pulumi_lora.testing.testbed import Testbed


@dataclass(frozen=True)
class Size:
    """A fleet: ``adapters`` on one InferenceService of ``pods``, ``latency`` seconds per load."""

    adapters: int
    pods: int
    latency: float

    @classmethod
    def parse(cls, text: str) -> Size:
        """``50x4@0.1``: 50 adapters, 4 pods, 0.1 s per load."""
        match = re.fullmatch(r"(\d+)x(\d+)@([0-9.]+)", text)
        if match is None:
            raise argparse.ArgumentTypeError(f"expected ADAPTERSxPODS@SECONDS, got {text!r}")
        return cls(int(match[1]), int(match[2]), float(match[3]))

    @property
    def floor(self) -> float:
        """The ideal ``up``: every pod loads every adapter, one at a time, pods in parallel."""
        return self.adapters * self.latency

    def __str__(self) -> str:
        return f"{self.adapters} adapters x {self.pods} pods, {self.latency * 1000:.0f} ms/load"


PROVIDER = Path(__file__).resolve().parents[1] / "provider"
"""The plugin other languages use: ``pulumi-lora:index:LoRAAdapter`` as one custom resource."""
PLUGIN_ARG = str(PROVIDER).encode() + b"\0"
"""How the plugin's Python process names its folder on its command line."""


WATCHED = {
    "provider": (b"pulumi.dynamic", PLUGIN_ARG),
    "k8s plugin": (b"pulumi-resource-kubernetes",),
}
"""Processes the engine starts whose CPU is told apart: our provider (``python -m
pulumi.dynamic``, and ``provider/``'s plugin for YAML) and the pulumi-kubernetes plugin."""


class ProcessWatch:
    """CPU seconds of the engine's plugin processes (``WATCHED``), polled from ``/proc`` while
    they live (each is gone, and its CPU counted among this process's children, when its command
    ends; up to one poll interval of it is missed)."""

    def __init__(self, interval: float = 0.2) -> None:
        self._seen: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._poll, args=(interval,), daemon=True).start()

    def totals(self) -> dict[str, float]:
        """CPU seconds of every watched process seen so far, by group."""
        sums = dict.fromkeys(WATCHED, 0.0)
        with self._lock:
            for group, cpu in self._seen.values():
                sums[group] += cpu
        return sums

    def _poll(self, interval: float) -> None:
        while True:
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    command = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                group = next(
                    (g for g, marks in WATCHED.items() if any(m in command for m in marks)), None
                )
                if group is None or not _descends_from_us(int(proc.name)):
                    continue  # not a plugin, or another program's engine on the same machine
                cpu = _cpu_seconds(int(proc.name))
                with self._lock:
                    _, seen = self._seen.get(int(proc.name), (group, 0.0))
                    self._seen[int(proc.name)] = (group, max(cpu, seen))
            time.sleep(interval)


@dataclass
class Meter:
    """Where one step's time goes: CPU seconds per component, apiserver requests."""

    testbed: Testbed
    namespace: str
    pods: list[int] = field(default_factory=list)
    plugins: ProcessWatch = field(default_factory=ProcessWatch)
    _requests: int = 0
    _offset: int = 0

    def sample(self) -> dict[str, float]:
        """Cumulative CPU seconds per component and apiserver requests so far."""
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = resource.getrusage(resource.RUSAGE_SELF)
        cluster = [pid for pid in self.testbed.pids.values() if pid is not None]
        plugins = self.plugins.totals()
        return {
            "engine": children.ru_utime + children.ru_stime - sum(plugins.values()),
            **plugins,
            "program": own.ru_utime + own.ru_stime,
            "apiserver+etcd": sum(_cpu_seconds(pid) for pid in cluster),
            "pods": sum(_cpu_seconds(pid) for pid in self.pods),
            "requests": float(self._count_requests()),
        }

    def _count_requests(self) -> int:
        """Requests the apiserver answered so far about LoRAAdapters or the fleet's namespace
        (the testbed's own loop lists cluster-wide, so it is not counted)."""
        log = self.testbed.audit_log_path
        if log is None or not log.exists():
            return self._requests
        with log.open("rb") as lines:
            lines.seek(self._offset)
            for line in lines:
                if not line.endswith(b"\n"):
                    break  # being written: read it next time
                self._offset += len(line)
                event = json.loads(line)
                ref = event.get("objectRef") or {}
                if event.get("stage") == "ResponseComplete" and (
                    ref.get("resource") == "loraadapters" or ref.get("namespace") == self.namespace
                ):
                    self._requests += 1
        return self._requests


def _descends_from_us(pid: int) -> bool:
    """Whether ``pid`` is a descendant of this process (Linux ``/proc``)."""
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
        if pid == os.getpid():
            return True
    return False


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a running process (Linux ``/proc``; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def step(label: str, meter: Meter, walls: dict[str, float]) -> Iterator[None]:
    """Time a step into ``walls[label]`` and print its wall time and where it went."""
    before, start = meter.sample(), time.monotonic()
    yield
    walls[label] = elapsed = time.monotonic() - start
    after = meter.sample()
    spent = {k: after[k] - before[k] for k in after}
    cpu = "  ".join(
        f"{k} {spent[k]:4.1f}" for k in ("engine", *WATCHED, "program", "apiserver+etcd", "pods")
    )
    print(
        f"  {label:<28} {elapsed:7.2f} s   cpu s: {cpu}   apiserver requests "
        f"{spent['requests']:5.0f}",
        flush=True,
    )


class NoopComponent(pulumi.ComponentResource):
    """A no-op in the component shape: a component with one dynamic child (other languages'
    ``LoRAAdapter``, and Python's before it became one resource)."""

    def __init__(self, name: str, path: str) -> None:
        super().__init__("bench:index:NoopComponent", name, {})
        probe = ProbeFile(name, path=path, content="x", opts=pulumi.ResourceOptions(parent=self))
        unwrap_sorted_batch_setitems()
        self.register_outputs({"observed": probe.observed})


def deploy_target(tb: Testbed, prefix: str, size: Size) -> tuple[str, Meter]:
    """A namespace with InferenceService ``llama`` of ``size.pods`` pods loading in
    ``size.latency``, Ready; the namespace and a meter of its pods."""
    ns = tb.create_namespace(prefix)
    handle = tb.deploy_inference_service(
        ns,
        "llama",
        replicas=size.pods,
        emulator_args=("--emulator-latency", f"/load_lora_adapter={size.latency}"),
        probe_time_scale=1.0,  # a real kubelet's pace, not the tests' ten probes a second a pod
    )
    handle.wait_ready(timeout=120)
    return ns, Meter(tb, ns, tb.emulator_pids())


def run_fleet(
    tb: Testbed,
    engine: LocalEngine,
    tmp: Path,
    *,
    name: str,
    size: Size,
    steps: tuple[str, ...],
    shaped: bool = False,
    peer: bool = False,
    like: bool = False,
    repeat: int = 1,
) -> dict[str, float]:
    """Deploy one fleet's InferenceService, run ``steps`` on the no-op and the LoRAAdapter
    stacks (each step on each, side by side; ``peer`` adds the pulumi-kubernetes stack of the
    same CRs, ``shaped`` no-op components and ``like`` no-ops recording an adapter's outputs,
    for where the engine's time goes); return wall times
    by step. Nothing is destroyed: the testbed and the engine's home are thrown away whole."""
    ns, meter = deploy_target(tb, f"bench-{name}", size)
    paths = [tb.make_adapter(f"{name}-{i}") for i in range(size.adapters)]

    def noop_program() -> None:
        for i in range(size.adapters):
            ProbeFile(f"noop-{i}", path=str(tmp / f"{name}-noop-{i}"), content="x")
            unwrap_sorted_batch_setitems()  # as LoRAAdapter does: no pile of pickler wrappers

    def like_program() -> None:
        for i in range(size.adapters):
            ProbeFile(f"like-{i}", path=str(tmp / f"{name}-like-{i}"), content="x", shape="adapter")
            unwrap_sorted_batch_setitems()

    def shaped_program() -> None:
        for i in range(size.adapters):
            NoopComponent(f"noop-{i}", path=str(tmp / f"{name}-shaped-{i}"))

    def lora_program() -> None:
        for i, path in enumerate(paths):
            LoRAAdapter(
                f"a{i}",
                LoRAAdapterArgs(
                    adapter_name=f"{name}-{i}", path=path, inference_service="llama", namespace=ns
                ),
            )
        pulumi.export("n", size.adapters)

    peer_ns = tb.create_namespace(f"bench-{name}-peer") if peer else ""
    kubeconfig = tb.kubeconfig_path.read_text()

    def peer_program() -> None:
        cluster = kubernetes.Provider("testbed", kubeconfig=kubeconfig)
        for i, path in enumerate(paths):
            args = AdapterArgs(
                adapter_name=f"{name}-{i}",
                path=path,
                inference_service="llama",
                namespace=peer_ns,
            )
            kubernetes.apiextensions.CustomResource(
                f"a{i}",
                api_version=API_VERSION,
                kind=KIND,
                metadata={"name": args.cr_name, "namespace": peer_ns},
                spec=args.spec().wire(),
                opts=pulumi.ResourceOptions(provider=cluster),
            )

    print(f"{name}: {size}")
    stacks = {"no-op": engine.inline_stack(f"{name}-noop", "noop", noop_program)}
    if like:
        stacks["like"] = engine.inline_stack(f"{name}-like", "like", like_program)
    if peer:
        stacks["peer"] = engine.inline_stack(f"{name}-peer", "peer", peer_program)
    if shaped:
        stacks["no-op components"] = engine.inline_stack(f"{name}-shaped", "shaped", shaped_program)
    stacks["lora"] = lora = engine.inline_stack(f"{name}-lora", "lora", lora_program)
    lora.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(tb.kubeconfig_path)))
    actions: dict[str, Callable[[auto.Stack], object]] = {
        "up": lambda s: s.up(),
        "refresh": lambda s: s.refresh(),
        "up (nothing to do)": lambda s: s.up(expect_no_changes=True),
        "preview --refresh": lambda s: s.preview(refresh=True, expect_no_changes=True),
    }
    walls: dict[str, float] = {}
    for label in ("up", *steps):
        # The first ``up`` creates; the other steps change nothing, so they repeat (each stack in
        # turn, side by side) and the median of each stack's walls is its figure.
        runs: dict[str, list[float]] = {}
        order = list(stacks.items())
        for _ in range(1 if label == "up" else repeat):
            order = order[1:] + order[:1]  # each stack in each place of the round in turn
            for kind, stack in order:
                with step(f"{kind} {label}", meter, walls):
                    actions[label](stack)
                runs.setdefault(f"{kind} {label}", []).append(walls[f"{kind} {label}"])
        walls |= {key: statistics.median(values) for key, values in runs.items()}
    tb.delete_inference_service(ns, "llama")
    return walls


@dataclass(frozen=True)
class Figure:
    """One figure of the table, its target (none: information), and whether it is met."""

    label: str
    value: float
    target: float | None = None
    unit: str = ""

    def line(self) -> str:
        """The figure as printed: value, target, PASS/FAIL."""
        value = f"{self.value:+.2f} s" if self.unit == "s" else f"{self.value:.2f}"
        if self.target is None:
            return f"  {self.label:<62} {value:>9}"
        verdict = "PASS" if self.value <= self.target else "FAIL"
        target = f"{self.target:+.2f} s" if self.unit == "s" else f"{self.target:.2f}"
        return f"  {self.label:<62} {value:>9}   target <= {target:<8} {verdict}"


def small_figures(size: Size, walls: dict[str, float]) -> list[Figure]:
    """The small fleet's figures (``up``, ``refresh``, ``up`` with nothing to do)."""
    return [
        Figure(
            f"up, {size}: (wall - no-op up) / floor",
            (walls["lora up"] - walls["no-op up"]) / size.floor,
            1.10,
        ),
        Figure(
            "refresh beyond the no-op refresh (medians)",
            walls["lora refresh"] - walls["no-op refresh"],
            0.3,
            "s",
        ),
        Figure(
            "up with nothing to do beyond the no-op's (medians)",
            walls["lora up (nothing to do)"] - walls["no-op up (nothing to do)"],
            0.3,
            "s",
        ),
        Figure(
            "refresh beyond a no-op recording an adapter's outputs",
            walls["lora refresh"] - walls["like refresh"],
            unit="s",
        ),
        Figure(
            "up with nothing to do beyond that no-op's",
            walls["lora up (nothing to do)"] - walls["like up (nothing to do)"],
            unit="s",
        ),
    ]


def yaml_program(size: Size, namespace: str, name: str) -> str:
    """A ``Pulumi.yaml`` of ``size.adapters`` LoRAAdapters from ``provider/``."""
    lines = [
        f"name: {name}-yaml",
        "runtime: yaml",
        "packages:",
        f"  pulumi-lora: {PROVIDER}",
        "resources:",
    ]
    for i in range(size.adapters):
        lines += [
            f"  a{i}:",
            "    type: pulumi-lora:index:LoRAAdapter",
            "    properties:",
            f"      adapterName: {name}-yaml-{i}",
            f"      path: /adapters/{name}-yaml-{i}",
            "      inferenceService: llama",
            f"      namespace: {namespace}",
        ]
    return "\n".join(lines) + "\n"


def run_yaml_fleet(tb: Testbed, tmp: Path, *, name: str, size: Size) -> dict[str, float]:
    """``pulumi up`` of the fleet from Pulumi YAML, on an InferenceService of its own of the
    same size (``provider/`` run by the CLI with this Python); returns its wall time."""
    ns, meter = deploy_target(tb, f"bench-{name}-yaml", size)
    for i in range(size.adapters):
        tb.make_adapter(f"{name}-yaml-{i}")
    folder = tmp / f"{name}-yaml"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text(yaml_program(size, ns, name), encoding="utf-8")
    engine = LocalEngine(
        tmp / "yaml-engine",
        extra_env={"PULUMI_PYTHON_CMD": sys.executable, "PULUMI_DISABLE_REGISTRY_RESOLVE": "true"},
    )
    runner = engine.project(folder)
    runner.pulumi("stack", "init", "bench")
    runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(tb.kubeconfig_path))
    walls: dict[str, float] = {}
    with step("yaml up", meter, walls):
        runner.pulumi("up", "--yes", "--skip-preview")
    tb.delete_inference_service(ns, "llama")
    return walls


def fleet_figures(size: Size, walls: dict[str, float]) -> list[Figure]:
    """The large fleet's figures: against the peer (``up``, ``preview --refresh``), YAML's
    ``up``, and the no-op ratios as information."""
    return [
        Figure(
            f"up, {size}: wall / max(floor, the peer's up)",
            walls["lora up"] / max(size.floor, walls["peer up"]),
            1.15,
        ),
        Figure(
            f"preview --refresh --expect-no-changes, {size.adapters}x{size.pods}: / the peer's",
            walls["lora preview --refresh"] / walls["peer preview --refresh"],
            0.90,
        ),
        Figure(
            f"YAML up, {size.adapters}x{size.pods} (provider/): / the Python resource's up",
            walls["yaml up"] / walls["lora up"],
            1.1,
        ),
        Figure(
            "  (information) up: (wall - no-op up) / floor",
            (walls["lora up"] - walls["no-op up"]) / size.floor,
        ),
        Figure(
            "  (information) preview --refresh: / the no-op's",
            walls["lora preview --refresh"] / walls["no-op preview --refresh"],
        ),
    ]


def main() -> None:
    """Run the fleets and print each figure with its target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("small", "fleet"))
    parser.add_argument("--small", type=Size.parse, default=Size(50, 4, 0.1))
    parser.add_argument(
        "--repeat",
        type=int,
        default=7,
        help="runs of each of the small fleet's steps that change nothing (refresh, up with "
        "nothing to do) on each stack, side by side; each figure is the median",
    )
    parser.add_argument("--fleet", type=Size.parse, default=Size(300, 8, 0.1))
    parser.add_argument(
        "--shaped",
        action="store_true",
        help="also run no-op components (a component with one dynamic child: the shape a "
        "LoRAAdapter has in other languages, and had in Python before it became one resource)",
    )
    parser.add_argument(
        "--llmkube",
        choices=("policy", "off", "on"),
        default="policy",
        help="LLMKube's own LoRA controller, which every testbed plays as every LLMKube install "
        "runs it: held off by pulumi-lora's coexistence policy (as the README sets it up), "
        "left out (to compare with runs from before it was played), or acting on every CR",
    )
    args = parser.parse_args()

    figures: list[Figure] = []
    floors: list[str] = []
    testbed = Testbed(llmkube_lora_controller=args.llmkube != "off")
    with tempfile.TemporaryDirectory() as tmp, testbed as tb:
        if args.llmkube == "policy":
            tb.apply_manifests(coexistence_policy("bench", managed_only=False))
            tb.wait_llmkube_held_off()
        engine = LocalEngine(Path(tmp) / "engine")
        if args.only in (None, "small"):
            walls = run_fleet(
                tb,
                engine,
                Path(tmp),
                name="small",
                size=args.small,
                steps=("refresh", "up (nothing to do)"),
                shaped=args.shaped,
                like=True,
                repeat=args.repeat,
            )
            figures += small_figures(args.small, walls)
            floors.append(f"small floor {args.small.floor:.2f} s")
        if args.only in (None, "fleet"):
            walls = run_fleet(
                tb,
                engine,
                Path(tmp),
                name="fleet",
                size=args.fleet,
                steps=("preview --refresh",),
                shaped=args.shaped,
                peer=True,
            )
            walls |= run_yaml_fleet(tb, Path(tmp), name="fleet", size=args.fleet)
            figures += fleet_figures(args.fleet, walls)
            floors.append(f"fleet floor {args.fleet.floor:.2f} s")
    print()
    print(f"  ({', '.join(floors)}; load average {', '.join(map(str, os.getloadavg()))})")
    for figure in figures:
        print(figure.line())


if __name__ == "__main__":
    main()
