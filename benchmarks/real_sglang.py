"""Benchmark: the real SGLang server on the CPU, next to the emulator and to a bare client.

Two figures, measured side by side in one run (needs ``python3 tools/provision.py`` and
``python3 tools/sglang_env.py``):

* **load and unload latency** of a rank-8 adapter on the real server (the tiny model, CPU), next
  to the emulator started with the same flags and to the latency the other benchmarks configure
  for a load (``--emulator-latency /load_lora_adapter=0.1``, docs/performance.md). Target: the
  real p99 within the configured 100 ms, so the emulated figures do not flatter the provider.
* **the provider's overhead on real pods**: ``pulumi up`` of N LoRAAdapters on a two-pod
  real-SGLang InferenceService, minus a ``pulumi up`` of N no-op dynamic resources (the
  engine's own cost), minus the same loads through a bare ``SGLangClient`` one pod at a time
  (the floor). Target: at most 1.5 s for N = 10.

    .venv/bin/python benchmarks/real_sglang.py [--adapters 10] [--cycles 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pulumi
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._sglang import SGLangClient
from pulumi_lora.testing import engine_probe
from pulumi_lora.testing.emulator import EmulatorServer
from pulumi_lora.testing.emulator._args import parse_args
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.sglang import RealSGLang
from pulumi_lora.testing.testbed import Testbed
from pulumi_lora.testing.testbed._process import free_port

FLAGS = ("--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all",
         "--max-loras-per-batch", "4")  # fmt: skip
CONFIGURED_LOAD_MS = 100.0
OVERHEAD_TARGET_S = 1.5


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples`` (milliseconds)."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def cycles(client: SGLangClient, folder: Path, count: int) -> tuple[list[float], list[float]]:
    """``count`` load + unload pairs of fresh adapters: (load ms, unload ms)."""
    loads, unloads = [], []
    for i in range(count):
        path = folder / f"cycle-{i}"
        write_adapter(path, seed=path.name)
        started = time.perf_counter()
        client.load_adapter(path.name, str(path))
        loads.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        client.unload_adapter(path.name)
        unloads.append((time.perf_counter() - started) * 1000)
    return loads, unloads


def latency(real: RealSGLang, root: Path, count: int) -> list[str]:
    """The load/unload figures of the real server and of the emulator."""
    port, started = free_port(), time.monotonic()
    process = real.serve(port, FLAGS, root / "sglang.log")
    url, ready = f"http://127.0.0.1:{port}", time.monotonic() - started
    try:
        with SGLangClient(url, label="real") as client:
            real_loads, real_unloads = cycles(client, root / "real", count)
    finally:
        process.stop(timeout=20)
    config, _ = parse_args(["--port", "0", *FLAGS])
    emulator = EmulatorServer(config).start()
    try:
        with SGLangClient(emulator.url, label="emulator") as client:
            emu_loads, emu_unloads = cycles(client, root / "emulator", count)
    finally:
        emulator.stop()
    (rl50, rl99), (ru50, ru99) = percentiles(real_loads), percentiles(real_unloads)
    (el50, el99), (eu50, eu99) = percentiles(emu_loads), percentiles(emu_unloads)
    verdict = "PASS" if rl99 <= CONFIGURED_LOAD_MS else "FAIL"
    return [
        f"real server ready in {ready:.1f} s",
        f"load    real p50 {rl50:6.1f} ms p99 {rl99:6.1f} ms | emulator p50 {el50:5.1f} ms "
        f"p99 {el99:5.1f} ms | configured {CONFIGURED_LOAD_MS:.0f} ms",
        f"unload  real p50 {ru50:6.1f} ms p99 {ru99:6.1f} ms | emulator p50 {eu50:5.1f} ms "
        f"p99 {eu99:5.1f} ms",
        f"real load p99 / configured load latency: {rl99 / CONFIGURED_LOAD_MS:.2f} "
        f"(target <= 1.00) {verdict}",
    ]


def overhead(root: Path, n: int) -> list[str]:
    """``pulumi up`` of ``n`` adapters on two real pods against no-op resources and a bare
    client."""
    with Testbed() as tb:
        namespace = tb.create_namespace("bench-real")
        handle = tb.deploy_inference_service(
            namespace, "llama", replicas=2, server="sglang", extra_args=FLAGS, probe_time_scale=1.0
        )
        handle.wait_ready(timeout=300)
        bare_paths = [tb.make_adapter(f"bare-{i}") for i in range(n)]
        started = time.monotonic()
        for pod in handle.ready_pods():
            with SGLangClient(pod.url, label=pod.name) as client:
                for i, path in enumerate(bare_paths):
                    client.load_adapter(f"bare-{i}", path)
        bare = time.monotonic() - started
        paths = [tb.make_adapter(f"lora-{i}") for i in range(n)]

        def noop() -> None:
            for i in range(n):
                engine_probe.ProbeFile(f"noop-{i}", path=str(root / f"noop-{i}"), content="x")

        def lora() -> None:
            for i, path in enumerate(paths):
                args = LoRAAdapterArgs(
                    adapter_name=f"lora-{i}", path=path, inference_service="llama",
                    namespace=namespace,
                )  # fmt: skip
                LoRAAdapter(f"a{i}", args)
            pulumi.export("n", n)

        engine = LocalEngine(root / "engine")
        noop_stack = engine.inline_stack("bench-real", "noop", noop)
        lora_stack = engine.inline_stack("bench-real", "lora", lora)
        lora_stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(tb.kubeconfig_path)))
        started = time.monotonic()
        noop_stack.up()
        noop_wall = time.monotonic() - started
        started = time.monotonic()
        lora_stack.up()
        lora_wall = time.monotonic() - started
    extra = lora_wall - noop_wall - bare
    verdict = "PASS" if extra <= OVERHEAD_TARGET_S else "FAIL"
    return [
        f"{n} adapters x 2 real pods: bare client {bare:.2f} s, no-op up {noop_wall:.2f} s, "
        f"lora up {lora_wall:.2f} s",
        f"provider overhead (lora up - no-op up - bare loads): {extra:+.2f} s "
        f"(target <= {OVERHEAD_TARGET_S:.1f} s) {verdict}",
    ]


def main() -> None:
    """Run both parts and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapters", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=20)
    args = parser.parse_args()
    real = RealSGLang.find()
    with tempfile.TemporaryDirectory() as tmp:
        lines = latency(real, Path(tmp), args.cycles)
        lines += overhead(Path(tmp), args.adapters)
    print()
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    main()
