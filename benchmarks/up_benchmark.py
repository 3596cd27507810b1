"""Benchmark: `pulumi up` and `pulumi refresh` of 50 LoRAAdapters on a 4-pod InferenceService.

Each emulated SGLang takes 100 ms per load and serializes its loads, pods run in parallel, so
the ideal `up` is 50 x 100 ms = 5 s. The same run measures the engine's own overhead for 50
no-op dynamic resources (up and refresh), so the figures compare like with like:

    target: up <= 1.3 x ideal + no-op up;  refresh <= no-op refresh + 2 s

Run: ``.venv/bin/python benchmarks/up_benchmark.py [--adapters 50] [--pods 4] [--latency 0.1]``
(needs the provisioned tools: ``python3 tools/provision.py``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pulumi
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.engine_probe import ProbeFile
from pulumi_lora.testing.testbed import Testbed


def timed(label: str, fn: Callable[[], object]) -> float:
    """Run ``fn()`` and return its wall time in seconds."""
    start = time.monotonic()
    fn()
    elapsed = time.monotonic() - start
    print(f"  {label:<34} {elapsed:7.2f} s", flush=True)
    return elapsed


def main() -> None:
    """Run both stacks and print the figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapters", type=int, default=50)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per load")
    args = parser.parse_args()
    n = args.adapters

    with tempfile.TemporaryDirectory() as tmp, Testbed() as tb:
        ns = tb.create_namespace("bench")
        handle = tb.deploy_inference_service(
            ns,
            "llama",
            replicas=args.pods,
            emulator_args=("--emulator-latency", f"/load_lora_adapter={args.latency}"),
        )
        handle.wait_ready(timeout=60)
        paths = [tb.make_adapter(f"bench-{i}") for i in range(n)]
        engine = LocalEngine(Path(tmp) / "engine")

        def noop_program() -> None:
            for i in range(n):
                ProbeFile(f"noop-{i}", path=str(Path(tmp) / f"noop-{i}"), content="x")

        def lora_program() -> None:
            for i, path in enumerate(paths):
                LoRAAdapter(
                    f"a{i}",
                    LoRAAdapterArgs(
                        adapter_name=f"bench-{i}",
                        path=path,
                        inference_service="llama",
                        namespace=ns,
                    ),
                )
            pulumi.export("n", n)

        print(f"{n} adapters, {args.pods} pods, {args.latency * 1000:.0f} ms per load")
        noop = engine.inline_stack("bench-noop", "noop", noop_program)
        noop_up = timed(f"no-op up ({n} dynamic resources)", noop.up)
        noop_refresh = timed("no-op refresh", noop.refresh)

        lora = engine.inline_stack("bench-lora", "lora", lora_program)
        lora.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(tb.kubeconfig_path)))
        up = timed(f"up ({n} LoRAAdapters)", lora.up)
        refresh = timed("refresh", lora.refresh)
        timed("destroy", lora.destroy)
        timed("no-op destroy", noop.destroy)

    ideal = n * args.latency
    print()
    print(f"  ideal up (n x load latency)        {ideal:7.2f} s")
    print(
        f"  up beyond the no-op engine         {up - noop_up:7.2f} s"
        f"   ratio to ideal {(up - noop_up) / ideal:5.2f}   (target <= 1.30)"
    )
    print(
        f"  refresh beyond the no-op refresh   {refresh - noop_refresh:7.2f} s   (target <= 2.00 s)"
    )


if __name__ == "__main__":
    main()
