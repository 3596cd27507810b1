"""The real SGLang server, on the CPU with the tiny model: it starts, and the product's own client
loads, lists and unloads an adapter the testbed's writer made, which changes what it generates;
its smoke generation (what follows every load) answers a finite logprob through it.

The smoke test of the provisioned tree (``tools/sglang_env.py``): an SGLang upgrade that breaks
the shims, the flags or the adapter format fails here first, loudly. The figures (start time,
memory, load and unload latency) are printed for the record (``pytest -s``).
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pulumi_lora._sglang import (
    AlreadyLoaded,
    Loaded,
    NotLoaded,
    SGLangClient,
    Smoked,
    Unloaded,
)
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.sglang import RealSGLang, RealSGLangMissingError, generate
from pulumi_lora.testing.testbed._process import ManagedProcess, free_port

LORA_FLAGS = (
    "--enable-lora",
    "--max-lora-rank",
    "16",
    "--lora-target-modules",
    "q_proj",
    "v_proj",
    "--max-loras-per-batch",
    "4",
)
READY_TIMEOUT = 180.0


@dataclass
class Server:
    url: str
    process: ManagedProcess
    ready_after: float


def _rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and every descendant (SGLang runs four processes)."""
    done = subprocess.run(
        ["ps", "-eo", "pid=,ppid=,rss="], capture_output=True, text=True, check=True
    )
    rows = [tuple(int(x) for x in line.split()) for line in done.stdout.splitlines()]
    family, grew = {pid}, True
    while grew:
        grew = False
        for child, parent, _ in rows:
            if parent in family and child not in family:
                family.add(child)
                grew = True
    return sum(rss for p, _, rss in rows if p in family) * 1024


@pytest.fixture(scope="module")
def real() -> RealSGLang:
    try:
        return RealSGLang.find()
    except RealSGLangMissingError as exc:
        missing_real_part(str(exc))


@pytest.fixture(scope="module")
def server(real: RealSGLang, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    log = tmp_path_factory.mktemp("sglang") / "server.log"
    started = time.monotonic()
    process = real.serve(port, LORA_FLAGS, log, timeout=READY_TIMEOUT)
    try:
        yield Server(f"http://127.0.0.1:{port}", process, time.monotonic() - started)
    finally:
        process.stop(timeout=20)


def test_the_real_server_loads_serves_and_unloads_an_adapter(
    server: Server, tmp_path: Path
) -> None:
    folder = tmp_path / "sql"
    write_adapter(folder, rank=8, target_modules=("q_proj", "v_proj"), seed="sql")
    client = SGLangClient(server.url, label="real-sglang")
    base = generate(server.url)

    started = time.monotonic()
    loaded = client.load_adapter("sql", str(folder))
    load_seconds = time.monotonic() - started
    assert isinstance(loaded, Loaded), loaded
    assert client.list_models().adapters == {"sql": str(folder)}
    assert isinstance(client.load_adapter("sql", str(folder)), AlreadyLoaded)
    started = time.monotonic()
    smoked = client.smoke("sql")
    smoke_seconds = time.monotonic() - started
    assert isinstance(smoked, Smoked) and math.isfinite(smoked.logprob), smoked
    assert generate(server.url, "sql") != base  # the adapter applies, not only lists

    started = time.monotonic()
    assert isinstance(client.unload_adapter("sql"), Unloaded)
    unload_seconds = time.monotonic() - started
    assert client.list_models().adapters == {}
    assert isinstance(client.unload_adapter("sql"), NotLoaded)
    assert generate(server.url) == base
    client.close()
    pid = server.process.pid
    assert pid is not None
    print(
        f"\nreal SGLang: ready in {server.ready_after:.1f}s, RSS {_rss_bytes(pid) / 1e9:.2f} GB, "
        f"load {load_seconds * 1000:.0f} ms, smoke {smoke_seconds * 1000:.0f} ms, "
        f"unload {unload_seconds * 1000:.0f} ms"
    )
