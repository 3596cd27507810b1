"""Benchmark: staging an 80 MB adapter against one plain GET of the same bytes (target 1.3).

For each source, the played Hugging Face Hub (``pulumi_lora.testing.hub``, in a process of its
own, as a Hub never shares the stager's) and moto's S3 server, both on loopback, three things
run in turns, ``ROUNDS`` times, so all see the same load; each figure is the fastest of its runs:

* a **one-shot GET** of the weights to disk: a new client and connection per GET, 1 MiB chunks
  (``httpx2.stream``, resp. ``boto3.client`` + ``get_object``), as
  ``benchmarks/staged_up_benchmark.py`` measures its floor;
* a **warm GET**: the same, the client (and its connection) made before the clock starts, and
  httpx2's chunks taken as they arrive: the transfer alone;
* **stage**: the stager's core (``_staging._fetch.stage``: both files fetched, each hashed and
  flushed as it is written, verified from those facts, the manifest, the rename).

Neither GET hashes or fsyncs. The file a GET wrote is removed once timed: its bytes, never
flushed, would otherwise be written back during the next staging (whose fsync then waits for
them). Printed: each floor, the staging, their ratio against the target and PASS/FAIL; then, for
information, staging again when the directory is there (verify only), a copy of the bytes with
fsync and their sha256 in memory.

Run: ``.venv/bin/python benchmarks/staging_floor.py`` (the ``staging`` and ``test`` extras;
about 10 s).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import boto3
import httpx2

from pulumi_lora._staging._fetch import stage
from pulumi_lora._staging._source import StagingRequest, parse_source
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.s3 import MotoServer

SIZE = 80 * 10**6
WEIGHTS = "adapter_model.safetensors"
ROUNDS = 5
TARGET = 1.3
CHUNK = 1 << 20
S3_KEYS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_REGION": "us-east-1",
}

Run = Callable[[Path], object]


def serve_hub(connection: Connection, files: dict[str, bytes]) -> None:
    """The played Hub in this (child) process: publish, say where, serve until told to stop."""
    with PlayedHub() as hub:
        commit = hub.publish("acme/big", files, lfs=frozenset({WEIGHTS}))
        connection.send((hub.endpoint, commit))
        connection.recv()


def timed(run: Run, target: Path) -> float:
    started = time.perf_counter()
    run(target)
    return time.perf_counter() - started


def in_turns(work: Path, runs: Mapping[str, Run], staged: Run) -> dict[str, float]:
    """The fastest of ``ROUNDS`` runs of each GET and of the staging, run in turns."""
    figures: dict[str, list[float]] = {name: [] for name in [*runs, "stage"]}
    for attempt in range(ROUNDS):
        for name, run in runs.items():
            target = work / f"get-{attempt}.bin"
            figures[name].append(timed(run, target))
            target.unlink()
        figures["stage"].append(timed(staged, work / f"staged-{attempt}"))
    return {name: min(values) for name, values in figures.items()}


def rows(source: str, figures: dict[str, float]) -> list[str]:
    staged = figures["stage"]
    lines = []
    for floor in ("one-shot GET", "warm GET"):
        ratio = staged / figures[floor]
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        lines.append(
            f"{source:<11} {floor:<13} {figures[floor]:7.3f} s {staged:7.3f} s {ratio:9.2f}"
            f"   <= {TARGET}  {verdict}"
        )
    return lines


def write(chunks: Any, target: Path) -> None:
    with target.open("wb") as out:
        for chunk in chunks:
            out.write(chunk)


def hub_figures(
    work: Path, files: dict[str, bytes], digests: dict[str, str]
) -> tuple[list[str], float]:
    """The rows for the Hub, and the seconds of staging again (verify only)."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(target=serve_hub, args=(theirs, files), daemon=True)
    server.start()
    try:
        endpoint, commit = ours.recv()
        cdn = f"{endpoint}/cdn/{digests[WEIGHTS]}"
        warm = httpx2.Client()

        def one_shot(target: Path) -> None:
            with httpx2.stream("GET", cdn) as answer:
                write(answer.iter_bytes(CHUNK), target)

        def warm_get(target: Path) -> None:
            with warm.stream("GET", cdn) as answer:
                write(answer.iter_bytes(), target)

        request = parse_source(f"hf://acme/big@{commit}", digests=digests)
        env = {"HF_ENDPOINT": endpoint}
        figures = in_turns(
            work,
            {"one-shot GET": one_shot, "warm GET": warm_get},
            lambda root: stage(request, root, env=env),
        )
        again = best(lambda _: stage(request, work / "staged-0", env=env))
        return rows("played Hub", figures), again
    finally:
        ours.send("stop")
        server.join(timeout=10)


def s3_figures(work: Path, files: dict[str, bytes], digests: dict[str, str]) -> list[str]:
    with MotoServer() as moto:

        def client() -> Any:
            return boto3.client(
                "s3",
                endpoint_url=moto.endpoint,
                aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
                region_name="us-east-1",
            )

        warm = client()
        warm.create_bucket(Bucket="adapters")
        for name, data in files.items():
            warm.put_object(Bucket="adapters", Key=f"big/{name}", Body=data)

        def one_shot(target: Path) -> None:
            body = client().get_object(Bucket="adapters", Key=f"big/{WEIGHTS}")["Body"]
            write(body.iter_chunks(CHUNK), target)

        def warm_get(target: Path) -> None:
            body = warm.get_object(Bucket="adapters", Key=f"big/{WEIGHTS}")["Body"]
            write(body.iter_chunks(CHUNK), target)

        request: StagingRequest = parse_source(
            "s3://adapters/big/", digests=digests, s3_endpoint=moto.endpoint
        )
        figures = in_turns(
            work,
            {"one-shot GET": one_shot, "warm GET": warm_get},
            lambda root: stage(request, root, env=S3_KEYS),
        )
        return rows("moto S3", figures)


def best(run: Callable[[int], object]) -> float:
    runs = []
    for attempt in range(ROUNDS):
        started = time.perf_counter()
        run(attempt)
        runs.append(time.perf_counter() - started)
    return min(runs)


def fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def main() -> None:
    weights = os.urandom(SIZE)
    config = json.dumps({"peft_type": "LORA", "r": 16, "target_modules": ["q_proj", "v_proj"]})
    files = {"adapter_config.json": config.encode(), WEIGHTS: weights}
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    work = Path(tempfile.mkdtemp(prefix="staging-bench-"))
    try:
        (hub_work := work / "hub").mkdir()
        (s3_work := work / "s3").mkdir()
        hub_rows, again = hub_figures(hub_work, files, digests)
        s3_rows = s3_figures(s3_work, files, digests)
        source = work / "source.bin"
        source.write_bytes(weights)

        def copy(attempt: int) -> None:
            target = work / f"copy{attempt}.bin"
            shutil.copyfile(source, target)
            fsync(target)

        copied = best(copy)
        hashed = best(lambda _: hashlib.sha256(weights))
    finally:
        shutil.rmtree(work)

    print(f"80 MB adapter, fastest of {ROUNDS} runs each (the GETs and stage in turns)\n")
    print(
        f"{'source':<11} {'floor':<13} {'GET':>9} {'stage':>9} {'stage/GET':>9}   target  verdict"
    )
    print("\n".join([*hub_rows, *s3_rows]))
    print()
    notes = [
        ("stage again from the Hub (already staged: verify only)", again),
        ("plain copy of the bytes on disk (copyfile + fsync)", copied),
        ("sha256 of the bytes in memory", hashed),
    ]
    for what, figure in notes:
        print(f"{what:<60} {figure:7.3f} s")


if __name__ == "__main__":
    main()
