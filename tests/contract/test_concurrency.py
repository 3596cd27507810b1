"""Loads and unloads are serialized per server; every other route stays concurrent."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx2

from tests.contract._emulators import LORA, AdapterFactory, StartEmulator, client, wait_until

THREADS = 16


def test_concurrent_loads_are_serialized_and_none_is_lost(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, latency={"/load_lora_adapter": 0.01})
    paths = {f"a{index}": make_adapter(f"a{index}") for index in range(THREADS)}
    url = emulator.server.url

    def load(name: str) -> httpx2.Response:
        with client(url) as own:
            return own.post(
                "/load_lora_adapter", json={"lora_name": name, "lora_path": paths[name]}
            )

    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        responses = list(pool.map(load, paths))
    elapsed = time.monotonic() - started
    assert [response.status_code for response in responses] == [200] * THREADS
    assert elapsed >= 0.01 * THREADS  # one at a time
    sizes = sorted(len(response.json()["loaded_adapters"]) for response in responses)
    assert sizes == list(range(1, THREADS + 1))  # each saw all the loads before it
    assert emulator.models() == paths


def test_waiting_loads_are_served_in_arrival_order(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    """SGLang's ``lora_update_lock`` is an ``asyncio.Lock``: waiters go first come, first served.
    Every load arrives while the first still holds the lock; each sees exactly those before it.

    Each load is sent once the one before it reached the lock (``update_requests``): sleeps
    between them could not fix the order of arrival on a busy machine."""
    emulator = start(**LORA, latency={"/load_lora_adapter": 0.4})
    names = [f"q{index}" for index in range(4)]
    paths = {name: make_adapter(name) for name in names}
    url = emulator.server.url
    asked = emulator.state()["update_requests"]

    def load(index: int) -> list[str]:
        wait_until(lambda: emulator.state()["update_requests"] == asked + index)
        with client(url) as own:
            body = {"lora_name": names[index], "lora_path": paths[names[index]]}
            response = own.post("/load_lora_adapter", json=body)
        assert response.status_code == 200, response.text
        return sorted(response.json()["loaded_adapters"])

    with ThreadPoolExecutor(len(names)) as pool:
        seen = list(pool.map(load, range(len(names))))
    assert seen == [sorted(names[: index + 1]) for index in range(len(names))]


def test_concurrent_loads_of_one_name_succeed_once(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA)
    path, url = make_adapter("sql"), emulator.server.url

    def load(_: int) -> int:
        with client(url) as own:
            body = {"lora_name": "sql", "lora_path": path}
            return own.post("/load_lora_adapter", json=body).status_code

    with ThreadPoolExecutor(THREADS) as pool:
        statuses = sorted(pool.map(load, range(THREADS)))
    assert statuses == [200] + [400] * (THREADS - 1)


def test_models_stay_fast_and_concurrent_during_a_slow_load(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, latency={"/load_lora_adapter": 0.6})
    path, url = make_adapter("sql"), emulator.server.url

    def list_models(_: int) -> list[int]:
        with client(url) as own:
            return [own.get("/v1/models").status_code for _ in range(5)]

    with ThreadPoolExecutor(THREADS + 1) as pool, client(url) as admin:
        loading = pool.submit(
            admin.post, "/load_lora_adapter", json={"lora_name": "sql", "lora_path": path}
        )
        wait_until(lambda: emulator.state()["updating"])
        statuses = [status for batch in pool.map(list_models, range(THREADS)) for status in batch]
        assert emulator.state()["updating"]  # every listing was answered during the load
        assert loading.result().status_code == 200
    assert statuses == [200] * THREADS * 5


def test_an_unload_waits_behind_a_slow_load(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, latency={"/load_lora_adapter": 0.1})
    url = emulator.server.url
    with ThreadPoolExecutor(2) as pool, client(url) as first, client(url) as second:
        body = {"lora_name": "sql", "lora_path": make_adapter("sql")}
        loading = pool.submit(first.post, "/load_lora_adapter", json=body)
        wait_until(lambda: emulator.state()["updating"])  # the load holds the update lock
        unload = second.post("/unload_lora_adapter", json={"lora_name": "sql"})
        assert loading.result().status_code == 200
    assert unload.status_code == 200  # it ran after the load, so the name existed
    assert emulator.models() == {}
