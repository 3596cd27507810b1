"""How long the SGLang emulator takes per request when no latency is injected.

Starts the emulator in process on 127.0.0.1 and times, over kept-alive httpx2 clients:

- sequentially: ``GET /v1/models`` and ``POST /load_lora_adapter`` + ``/unload_lora_adapter``
  pairs (the adapter directory is read for real on every load);
- concurrently: ``GET /v1/models`` from 16 client threads, one client each.

Prints p50/p99 per route in milliseconds, the ratio of p99 to the 2 ms target, and the CPU time
per request of the whole process (client and server), which contention on a busy machine does
not inflate. The times are client round trips, so they bound the emulator's own overhead from
above; the load average is printed to judge the p99s.

    .venv/bin/python benchmarks/emulator_overhead.py [--requests 2000] [--threads 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2

from pulumi_lora.testing.emulator import EmulatorConfig, EmulatorServer
from pulumi_lora.testing.peft import write_adapter

TARGET_MS = 2.0


def timed(call: Callable[[], httpx2.Response]) -> float:
    """One request's round trip in milliseconds; fails loudly on an unexpected status."""
    started = time.perf_counter()
    response = call()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"unexpected {response.status_code}: {response.text[:200]}")
    return elapsed


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(label: str, samples: list[float]) -> None:
    p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
    print(
        f"{label:<38} n={len(samples):<6} p50={p50:6.3f} ms  p99={p99:7.3f} ms  "
        f"mean={statistics.fmean(samples):6.3f} ms  p99/target={p99 / TARGET_MS:5.2f}"
    )


def report_cpu(cpu_started: float, requests: int) -> None:
    cpu_ms = (time.process_time() - cpu_started) * 1000 / requests
    print(f"{'':<38} cpu={cpu_ms:.3f} ms/request (client + server)")


def client(url: str) -> httpx2.Client:
    return httpx2.Client(base_url=url, trust_env=False, timeout=10.0)


def sequential(url: str, requests: int) -> None:
    with client(url) as http:
        for _ in range(50):  # warm the connection and the code paths
            http.get("/v1/models")
        cpu = time.process_time()
        report(
            "GET /v1/models (sequential)",
            [timed(lambda: http.get("/v1/models")) for _ in range(requests)],
        )
        report_cpu(cpu, requests)
        load = {"lora_name": "bench", "lora_path": "/adapters/bench"}
        unload = {"lora_name": "bench"}
        loads, unloads = [], []
        cpu = time.process_time()
        for _ in range(requests // 2):
            loads.append(timed(lambda: http.post("/load_lora_adapter", json=load)))
            unloads.append(timed(lambda: http.post("/unload_lora_adapter", json=unload)))
        report("POST /load_lora_adapter (sequential)", loads)
        report("POST /unload_lora_adapter (sequential)", unloads)
        report_cpu(cpu, len(loads) + len(unloads))


def concurrent(url: str, requests: int, threads: int) -> None:
    per_thread = max(1, requests // threads)
    clients = [client(url) for _ in range(threads)]  # one kept-alive client per thread

    def run(http: httpx2.Client) -> list[float]:
        http.get("/v1/models")
        return [timed(lambda: http.get("/v1/models")) for _ in range(per_thread)]

    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        samples = [sample for batch in pool.map(run, clients) for sample in batch]
    wall = time.perf_counter() - started
    for http in clients:
        http.close()
    report(f"GET /v1/models ({threads} threads)", samples)
    report_cpu(cpu, len(samples) + threads)
    print(f"{'':<38} throughput={(len(samples) + threads) / wall:,.0f} requests/s")


def main() -> None:
    parser = argparse.ArgumentParser(description="Time the SGLang emulator's requests.")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        write_adapter(Path(root, "adapters", "bench"), target_modules=("q_proj", "v_proj"))
        config = EmulatorConfig(
            enable_lora=True, max_lora_rank=64, lora_target_modules=("all",), fs_root=Path(root)
        )
        with EmulatorServer(config) as server:
            load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
            print(f"emulator at {server.url}; target {TARGET_MS} ms per request")
            print(f"load average {load} on {os.cpu_count()} CPUs")
            sequential(server.url, args.requests)
            concurrent(server.url, args.requests, args.threads)


if __name__ == "__main__":
    main()
