"""Benchmark: what the dynamic provider process pays before and per answer, against the no-op's.

A nothing-to-do ``pulumi up`` asks the provider one resource at a time (the engine's step
generator is serial), so the provider's first answer waits for its imports, and every resource
adds its check and diff. Measured side by side in one run, each figure the median of
``--repeat`` fresh interpreters or ``--calls`` calls:

* **import**: CPU of what the provider process loads at its first call, after
  ``pulumi.dynamic`` (``_provider._calls()``: the calls' module, imported with the cyclic GC
  paused), against a plain import of the clients it needs to look at a cluster at all
  (lightkube, httpx2, httpcore2 with what httpcore2 imports: ``h11``, ``anyio``, and ``h2``,
  installed by lightkube's ``httpx2[http2]``) and the no-op provider's (``ProbeFile``);
* **per resource**: the Pulumi SDK's deserializing of a check's and a diff's properties, our
  check and our diff (the live look answered by a recorded state, so only our own work counts),
  for an adapter on 4 pods against the no-op's.

========================================================  ======
figure                                                    target
========================================================  ======
import: ours / the clients' (CPU, same run)              <= 1.5
check + diff of one adapter (our work, without the SDK)   <= 0.25 ms
========================================================  ======

Run: ``.venv/bin/python benchmarks/provider_calls_benchmark.py [--repeat 9] [--calls 500]``
(no testbed; a few seconds). ``benchmarks/up_benchmark.py --only small`` measures the same
costs inside a real ``pulumi up``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import dill
from pulumi.runtime import rpc

from pulumi_lora._args import AdapterArgs
from pulumi_lora._lifecycle import AdapterState, PodReport
from pulumi_lora._models import Condition, ConditionStatus
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._pulumi import _calls as calls
from pulumi_lora._pulumi import _outputs
from pulumi_lora.testing.engine_probe import ProbeFileProvider

PROVIDER_KEY = "__provider"
INPUTS = {
    "adapter_name": "small-1",
    "path": "/adapters/small-1",
    "inference_service": "llama",
    "namespace": "bench-small",
}
PROBE = {"path": "probe.txt", "content": "x"}  # never written: only check and diff run


def import_cpu(statement: str, repeat: int) -> float:
    """Median CPU seconds of ``statement`` (an import) in a fresh interpreter after
    pulumi.dynamic."""
    code = (
        "import time, pulumi.dynamic, grpc, dill\n"
        f"t = time.process_time()\n{statement}\nprint(time.process_time() - t)"
    )
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout.split()[-1]
        )
        for _ in range(repeat)
    ]
    return statistics.median(runs)


def recorded_state() -> AdapterState:
    """An adapter served by 4 Ready pods, its three conditions True."""
    since = datetime(2026, 12, 1, tzinfo=UTC)
    conditions = tuple(
        Condition(
            type=kind,
            status=ConditionStatus.TRUE,
            reason=reason,
            last_transition_time=since,
            observed_generation=1,
        )
        for kind, reason in (
            ("Available", "TargetResolved"),
            ("Loaded", "AdapterLoaded"),
            ("Ready", "AdapterReady"),
        )
    )
    pods = tuple(
        PodReport(f"llama-6d5f-{i}", ready=True, loaded=True, path="/adapters/small-1")
        for i in range(4)
    )
    spec = {
        "name": "small-1",
        "path": "/adapters/small-1",
        "inferenceServiceRef": {"name": "llama"},
    }
    return AdapterState(
        uid="u1",
        generation=1,
        spec=spec,
        annotations={},
        conditions=conditions,
        pods=pods,
        loaded_path="/adapters/small-1",
        last_loaded_at="2026-12-01T00:00:00Z",
    )


def struct(props: dict[str, Any]) -> Any:
    """``props`` as the engine sends them (a protobuf Struct)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()


def median_us(step: Callable[[], object], calls_: int) -> float:
    """Median microseconds of ``step``."""
    times = []
    for _ in range(calls_):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def per_resource(
    provider: Any, inputs: dict[str, Any], olds: dict[str, Any], n: int
) -> dict[str, float]:
    """The SDK's deserializing, our check and our diff, in microseconds."""
    pickled = base64.b64encode(dill.dumps(provider)).decode()
    news = {**inputs, PROVIDER_KEY: pickled}
    recorded = {**olds, PROVIDER_KEY: pickled}
    wire_news, wire_olds = struct(news), struct(recorded)
    return {
        "sdk": median_us(
            lambda: (
                rpc.deserialize_properties(wire_olds, True),
                rpc.deserialize_properties(wire_news, True),
                rpc.deserialize_properties(wire_news, True),
            ),
            n,
        ),
        "check": median_us(lambda: provider.check(dict(news), news), n),
        "diff": median_us(lambda: provider.diff("id", recorded, news), n),
    }


def verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()

    ours_import = import_cpu("import pulumi_lora._provider as p; p._calls()", args.repeat)
    clients_import = import_cpu("import lightkube, httpx2, httpcore2", args.repeat)
    probe_import = import_cpu("import pulumi_lora.testing.engine_probe", args.repeat)

    state = recorded_state()
    calls.lifecycle.observe = lambda *_a, **_k: state  # type: ignore[assignment]
    calls.lifecycle.target_generation = lambda *_a, **_k: 0  # type: ignore[assignment]
    olds = _outputs.outputs(AdapterArgs.parse(INPUTS), state)
    ours = per_resource(LoRAAdapterProvider(), INPUTS, olds, args.calls)
    probe = per_resource(ProbeFileProvider(), PROBE, PROBE, args.calls)

    ratio = ours_import / clients_import
    work = (ours["check"] + ours["diff"]) / 1000
    ours_ms, probe_ms = ours_import * 1000, probe_import * 1000
    print(
        f"import (CPU)            ours {ours_ms:6.1f} ms   no-op {probe_ms:6.1f} ms   "
        f"the clients {clients_import * 1000:6.1f} ms"
    )
    for key, label in (("sdk", "SDK deserializing"), ("check", "check"), ("diff", "diff")):
        print(f"{label:22}  ours {ours[key]:6.0f} us   no-op {probe[key]:6.0f} us")
    print(
        f"  import: ours / the clients'          {ratio:6.2f}      target <= 1.5      "
        f"{verdict(ratio, 1.5)}"
    )
    print(
        f"  check + diff of one adapter          {work:6.3f} ms   target <= 0.25 ms  "
        f"{verdict(work, 0.25)}"
    )


if __name__ == "__main__":
    main()
