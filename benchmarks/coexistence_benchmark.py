"""Benchmark: pulumi-lora beside LLMKube's own LoRA controller, in LLMKube's real time.

One testbed (real apiserver and etcd, emulated SGLang pods, LLMKube's LoRA controller played
from its source at its own clocks: 30 s requeues, a 2 minute skip window), one InferenceService
of 2 pods whose Service reaches them (``endpoint.port`` = the container's: LLMKube's loads land).
Side by side in one run:

1. **without the policy** (``--baseline`` minutes): pulumi-lora's adapters as LLMKube meets
   them in a cluster where nobody applied it; every few seconds something touches each CR (a
   label, as any tool may), which is all LLMKube needs to act again;
2. **with the policy** (``--minutes``): ``pulumi-lora coexistence-policy`` applied; a CR LLMKube
   marked in phase 1 is taken over by its next update; the same touches go on; a path swap every
   2 minutes; one adapter deleted and made again half way.

For each phase it counts the flips of ``Loaded``/``Ready``/``Error`` on pulumi-lora's CRs
(polled every 100 ms), LLMKube's requests to pods for them, and LLMKube's writes the apiserver
refused; then every swap's and delete's time. Targets (with the policy): zero flips, zero
requests, every swap loaded on every pod, every delete under 10 s, the old CR's finalizer gone.

Run: ``.venv/bin/python benchmarks/coexistence_benchmark.py [--minutes 10] [--baseline 3]``
(needs ``python3 tools/provision.py``). The default run takes about 14 minutes.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._models import LLMKUBE_CONTROLLER_USER, LLMKUBE_FINALIZER
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._pulumi._outputs import pod_path
from pulumi_lora.deploy import coexistence_policy
from pulumi_lora.testing.testbed import LLMKubeLoRAController, Testbed

WATCHED = ("Loaded", "Ready", "Error")


@dataclass
class Watch:
    """Flips of the watched conditions on some CRs, polled in a thread."""

    bed: Testbed
    namespace: str
    names: list[str]
    flips: dict[str, int] = field(default_factory=dict)
    _last: dict[str, dict[str, str]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Watch:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        client = self.bed.client()
        while not self._stop.wait(0.1):
            for name in list(self.names):
                cr = get_adapter(client, self.namespace, name)
                if cr is None:
                    self._last.pop(name, None)
                    continue
                now = {
                    c["type"]: c["status"]
                    for c in (cr.get("status") or {}).get("conditions") or []
                    if c["type"] in WATCHED
                }
                if name in self._last and self._last[name] != now:
                    self.flips[name] = self.flips.get(name, 0) + 1
                self._last[name] = now


def props(namespace: str, name: str, path: str) -> dict[str, Any]:
    return {
        "adapter_name": name,
        "path": path,
        "inference_service": "llama",
        "namespace": namespace,
    }


def llmkube_requests(llmkube: LLMKubeLoRAController, names: set[str], since: float) -> int:
    return sum(1 for r in llmkube.requests() if r.lora_name in names and r.at >= since)


def touch(bed: Testbed, namespace: str, names: list[str], stop: threading.Event) -> None:
    """Every 5 s, a label on each CR (any tool's harmless write): an event LLMKube reacts to."""
    count = 0
    while not stop.wait(5.0):
        count += 1
        for name in names:
            bed.kubectl("label", "--overwrite", "lora", name, "-n", namespace, f"touch={count}")


def policy_holds(bed: Testbed, namespace: str, name: str) -> bool:
    tried = bed.kubectl(
        "patch", "lora", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"status": {"loadedPath": "/x"}}', f"--as={LLMKUBE_CONTROLLER_USER}",
        "--as-group=system:serviceaccounts", "--dry-run=server",
    )  # fmt: skip
    return tried.returncode != 0 and "coexistence policy" in tried.stderr


@dataclass
class Bench:
    """The adapters under test and the provider that manages them."""

    bed: Testbed
    llmkube: LLMKubeLoRAController
    namespace: str
    names: list[str]
    provider: LoRAAdapterProvider = field(default_factory=LoRAAdapterProvider)
    paths: dict[str, list[str]] = field(default_factory=dict)
    outs: dict[str, dict[str, Any]] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)

    def create(self, name: str) -> None:
        path = self.paths[name][self.current.get(name, 0)]
        self.outs[name] = self.provider.create(props(self.namespace, name, path)).outs or {}

    def update(self, name: str) -> None:
        path = self.paths[name][self.current[name]]
        new = self.provider.update("", self.outs[name], props(self.namespace, name, path)).outs
        self.outs[name] = new or {}

    def delete(self, name: str) -> float:
        started = time.monotonic()
        self.provider.delete("", self.outs[name])
        return time.monotonic() - started

    def marked(self) -> list[str]:
        client = self.bed.client()
        return [
            n
            for n in self.names
            if LLMKUBE_FINALIZER
            in ((get_adapter(client, self.namespace, n) or {}).get("metadata") or {}).get(
                "finalizers", []
            )
        ]


def without_policy(bench: Bench, minutes: float) -> tuple[int, int, list[str]]:
    """Phase 1: (flips, LLMKube's requests to pods, CRs carrying its finalizer)."""
    watch = Watch(bench.bed, bench.namespace, bench.names).start()
    since = time.monotonic()
    time.sleep(minutes * 60)
    watch.stop()
    return (
        sum(watch.flips.values()),
        llmkube_requests(bench.llmkube, set(bench.names), since),
        bench.marked(),
    )


def with_policy(
    bench: Bench, minutes: float, marked: list[str]
) -> list[tuple[str, str, str, bool]]:
    """Phase 2: apply the policy, take the older CRs over, swap, delete; the figures."""
    bench.bed.apply_manifests(coexistence_policy())
    started = time.monotonic()
    while not policy_holds(bench.bed, bench.namespace, bench.names[0]):
        time.sleep(0.1)
    print(f"  the policy held after {time.monotonic() - started:.1f} s")
    stats = bench.llmkube.stats
    refused_before = stats.finalizer_refused + stats.status_refused
    for name in bench.names:  # the takeover: each CR's next update removes LLMKube's finalizer
        bench.update(name)
    kept = bench.marked()
    watch = Watch(bench.bed, bench.namespace, bench.names).start()
    since = time.monotonic()
    swaps: list[float] = []
    deletes: list[float] = []
    swaps_ok, recreated = True, False
    next_swap = since + 120
    while time.monotonic() < since + minutes * 60:
        if time.monotonic() >= next_swap:
            name = bench.names[len(swaps) % len(bench.names)]
            bench.current[name] ^= 1
            t0 = time.monotonic()
            bench.update(name)
            swaps.append(time.monotonic() - t0)
            want = bench.paths[name][bench.current[name]]
            outs = bench.outs[name]
            swaps_ok &= bool(outs["loaded"]) and all(
                pod_path(p, outs) == want for p in outs["pods"]
            )
            next_swap += 120
        if not recreated and time.monotonic() >= since + minutes * 30:
            deletes.append(bench.delete(bench.names[-1]))
            bench.create(bench.names[-1])
            recreated = True
        time.sleep(0.5)
    watch.stop()
    deletes += [bench.delete(name) for name in bench.names]
    flips = sum(watch.flips.values())
    requests = llmkube_requests(bench.llmkube, set(bench.names), since)
    refused = stats.finalizer_refused + stats.status_refused - refused_before
    print(
        f"  flips {flips}, LLMKube requests to pods {requests}, its writes refused {refused}, "
        f"swaps {len(swaps)} ({max(swaps, default=0):.2f} s max), "
        f"deletes {len(deletes)} ({max(deletes):.2f} s max)"
    )
    return [
        ("flips of Loaded/Ready/Error (policy)", str(flips), "0", flips == 0),
        ("LLMKube requests to pods (policy)", str(requests), "0", requests == 0),
        ("path swaps loaded on every pod", str(len(swaps)), "all", swaps_ok and bool(swaps)),
        ("slowest delete", f"{max(deletes):.2f} s", "< 10 s", max(deletes) < 10),
        (
            "older CRs taken over (finalizer gone)",
            f"{len(marked) - len(kept)}/{len(marked)}",
            "all",
            not kept,
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="with the policy")
    parser.add_argument("--baseline", type=float, default=3.0, help="without it, first")
    parser.add_argument("--adapters", type=int, default=3)
    opts = parser.parse_args()
    with Testbed(audit=False) as bed:
        assert bed.llmkube is not None
        ns = bed.create_namespace("coexist-bench")
        bed.deploy_inference_service(ns, "llama", replicas=2, endpoint_port=30000).wait_ready(30)
        names = [f"bench-{i}" for i in range(opts.adapters)]
        bench = Bench(bed, bed.llmkube, ns, names)
        bench.provider._config = ProviderConfig(kube=KubeSource(str(bed.kubeconfig_path)))
        for name in names:
            bench.paths[name] = [bed.make_adapter(f"{name}-v1"), bed.make_adapter(f"{name}-v2")]
            bench.current[name] = 0
            bench.create(name)
        stop = threading.Event()
        threading.Thread(target=touch, args=(bed, ns, names, stop), daemon=True).start()
        print(f"phase 1: {opts.baseline:g} min without the policy ({len(names)} adapters)")
        base_flips, base_requests, marked = without_policy(bench, opts.baseline)
        print(f"  flips {base_flips}, LLMKube requests to pods {base_requests}, marked {marked}")
        print(f"phase 2: {opts.minutes:g} min with the policy")
        results = with_policy(bench, opts.minutes, marked)
        stop.set()
    print("\nwithout the policy, for comparison (no target):")
    print(f"  flips {base_flips}, LLMKube requests to pods {base_requests}")
    print(f"\n{'figure':<42} {'measured':>12} {'target':>8}  result")
    for figure, measured, target, ok in results:
        print(f"{figure:<42} {measured:>12} {target:>8}  {'PASS' if ok else 'FAIL'}")
    passed = all(ok for *_, ok in results)
    print(json.dumps({"pass": passed}))
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
