"""One pod run against an in-process emulator (real sockets, no cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._errors import ClusterError
from pulumi_lora._resync._podrun import PodRun, run_pod
from pulumi_lora._resync._views import SecretRef
from pulumi_lora._resync._world import AdapterTask, PodWork, Unload
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora.testing.emulator import EmulatorConfig, EmulatorServer
from pulumi_lora.testing.peft import write_adapter

KEY = SecretRef("ns", "sglang", "api-key")


@pytest.fixture
def fs_root(tmp_path: Path) -> Path:
    for name in ("a", "b", "a2"):
        write_adapter(tmp_path / "adapters" / name, target_modules=("q_proj",))
    write_adapter(tmp_path / "adapters" / "nan", target_modules=("q_proj",), nan=True)
    return tmp_path


@pytest.fixture
def start(fs_root: Path) -> Iterator[Any]:
    servers: list[EmulatorServer] = []

    def start(**fields: Any) -> EmulatorServer:
        config = EmulatorConfig(
            fs_root=fs_root,
            admin=True,
            enable_lora=True,
            max_lora_rank=64,
            lora_target_modules=("all",),
            **fields,
        )
        servers.append(EmulatorServer(config).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def facts(server: EmulatorServer) -> PodEndpoint:
    return PodEndpoint(
        name="p1",
        namespace="ns",
        uid="uid",
        ready=True,
        ip="127.0.0.1",
        port=server.port,
        state="",
        restart_count=0,
        service="llama",
    )


def task(
    name: str, path: str | None = None, *, key: SecretRef | None = None, smoke: bool = True
) -> AdapterTask:
    return AdapterTask(("ns", name), 1, name, path or f"/adapters/{name}", False, key, smoke)


def work(
    *tasks: AdapterTask, unloads: tuple[Unload, ...] = (), skips: frozenset[str] = frozenset()
) -> PodWork:
    return PodWork(tuple(tasks), unloads, skips, frozenset())


def run(
    server: EmulatorServer,
    plan: PodWork,
    *,
    key: str | Exception = "k",
    allowed: bool = True,
    on_result: Any = None,
    settled: Any = None,
) -> PodRun:
    async def read_key(ref: SecretRef) -> str:
        if isinstance(key, Exception):
            raise key
        return key

    return asyncio.run(
        run_pod(
            facts(server),
            plan,
            read_key=read_key,
            timeouts=ClientTimeouts(),
            still_permitted=lambda t: allowed,
            settled=settled,
            on_result=on_result,
        )
    )


def served(server: EmulatorServer, key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = httpx2.get(f"{server.url}/v1/models", headers=headers, timeout=5).json()
    return {m["id"]: m["root"] for m in body["data"] if m.get("parent")}


def test_loads_keeps_and_swaps(start: Any) -> None:
    server = start()
    first = run(server, work(task("a"), task("b")))
    assert first.listed and [o.did_load for _, o in first.results] == [True, True]
    assert first.first_load is not None
    again = run(server, work(task("a"), task("b")))
    assert [o.did_load for _, o in again.results] == [False, False] and again.first_load is None
    swapped = run(server, work(task("a", "/adapters/a2")))
    outcome = swapped.results[0][1]
    assert outcome.did_unload and outcome.did_load and outcome.loaded
    assert served(server) == {"a": "/adapters/a2", "b": "/adapters/b"}


def test_each_outcome_is_told_as_soon_as_it_is_known(start: Any) -> None:
    server = start()
    told: list[tuple[str, bool, dict[str, str]]] = []

    def on_result(task: AdapterTask, outcome: Any) -> None:
        told.append((task.name, outcome.loaded, served(server)))  # the server, at that moment

    done = run(server, work(task("a"), task("b")), on_result=on_result)
    assert told == [("a", True, {"a": "/adapters/a"}), ("b", True, served(server))]
    assert [t.name for t, _ in done.results] == ["a", "b"]


def test_an_eviction_within_the_run_is_caught_and_later_skipped(start: Any) -> None:
    server = start(max_loaded_loras=1, max_loras_per_batch=1)
    first = run(server, work(task("a"), task("b")))
    (_, a), (_, b) = first.results
    assert not a.loaded and a.reason == "MaxLoadedLorasExceeded" and a.did_load
    assert b.loaded and first.ledger.evicted == {"a": "/adapters/a"}
    second = run(server, work(task("a"), task("b"), skips=frozenset({"a"})))
    assert second.first_load is None and second.ledger.loads == 0
    assert second.results[0][1].reason == "MaxLoadedLorasExceeded"
    assert served(server) == {"b": "/adapters/b"}


def test_unloads_and_tolerates_what_is_gone(start: Any) -> None:
    server = start()
    run(server, work(task("a")))
    done = run(server, work(unloads=(Unload("a"), Unload("never"))))
    assert [(u.name, o.did_unload, o.error) for u, o in done.unloaded] == [
        ("a", True, ""),
        ("never", False, ""),
    ]
    assert served(server) == {}


def test_api_keys_come_from_the_secret_and_failures_are_reported(start: Any) -> None:
    server = start(api_key="right")
    ok = run(server, work(task("a", key=KEY)), key="right")
    assert ok.results[0][1].loaded and served(server, "right") == {"a": "/adapters/a"}
    wrong = run(server, work(task("b", key=KEY)), key="sk-not-the-one-7f3a")
    assert wrong.results[0][1].reason == "Unauthorized" and wrong.unauthorized == {KEY}
    assert "sk-not-the-one-7f3a" not in wrong.results[0][1].error
    missing = run(server, work(task("b", key=KEY)), key=ClusterError("Secret ns/sglang has no key"))
    outcome = missing.results[0][1]
    assert outcome.reason == "ApiKeySecretUnavailable" and outcome.retryable


def test_a_cr_that_became_off_limits_is_skipped(start: Any) -> None:
    server = start()
    assert run(server, work(task("a")), allowed=False).results == []
    assert served(server) == {}


def test_an_unreachable_pod_fails_retryably(start: Any) -> None:
    server = start()
    port = server.port
    server.stop()
    dead = PodEndpoint(
        name="p1",
        namespace="ns",
        uid="uid",
        ready=True,
        ip="127.0.0.1",
        port=port,
        state="",
        restart_count=0,
        service="llama",
    )

    async def read_key(ref: SecretRef) -> str:
        return ""

    result = asyncio.run(
        run_pod(
            dead,
            work(task("a")),
            read_key=read_key,
            timeouts=ClientTimeouts(connect=0.5),
            still_permitted=lambda t: True,
        )
    )
    assert not result.listed
    outcome = result.results[0][1]
    assert outcome.reason == "ConnectionFailed" and outcome.retryable and not outcome.loaded


def test_a_pod_left_as_the_last_clean_run_left_it_is_not_worked_again(start: Any) -> None:
    server = start()
    plan = work(task("a"), task("b"))
    first = run(server, plan)
    assert first.settled is not None and not first.untouched
    again = run(server, plan, key=AssertionError("no key expected"), settled=first.settled)
    assert again.untouched and again.results == [] and again.settled == first.settled
    httpx2.post(f"{server.url}/unload_lora_adapter", json={"lora_name": "b"}, timeout=5)
    healed = run(server, plan, key=AssertionError("no key expected"), settled=first.settled)
    assert not healed.untouched and [o.did_load for _, o in healed.results] == [False, True]
    assert healed.settled == first.settled  # the same state again once healed


def inferences(server: EmulatorServer) -> dict[str, int]:
    """Generations through each adapter the emulator ran, ever."""
    state: dict[str, int] = httpx2.get(f"{server.url}/_emulator/state", timeout=5).json()[
        "inferences"
    ]
    return state


def test_every_load_is_smoked_and_a_failed_smoke_is_unloaded_and_reported(start: Any) -> None:
    server = start()
    done = run(server, work(task("nan"), task("a")))
    (_, broken), (_, fine) = done.results
    assert not broken.loaded and broken.reason == "SmokeFailed" and not broken.did_load
    assert broken.error.startswith("smoke generation after the load: ")
    assert "SGLang said: logprob is null (NaN or Inf)" in broken.error
    assert fine.loaded and fine.did_load
    assert served(server) == {"a": "/adapters/a"}  # the bad load did not stay
    assert inferences(server) == {"nan": 1, "a": 1}
    assert done.settled is None  # a failure: the next sweep works the pod again

    unchecked = run(server, work(task("nan", smoke=False), task("a")))
    assert unchecked.results[0][1].loaded and unchecked.results[0][1].did_load
    assert served(server) == {"a": "/adapters/a", "nan": "/adapters/nan"}
    assert inferences(server) == {"nan": 1, "a": 1}  # smoke_test=false: no generation
