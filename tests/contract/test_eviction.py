"""--max-loaded-loras: a load evicts the least recently used unpinned adapter and answers 200."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pulumi_lora.testing.emulator._state import (
    AdapterSpec,
    LoraPolicy,
    LoraState,
)
from tests.contract._emulators import LORA, AdapterFactory, StartEmulator, client, wait_until

LIMIT_2 = {**LORA, "max_loras_per_batch": 2, "max_loaded_loras": 2}


def test_the_least_recently_loaded_is_evicted(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LIMIT_2)
    for name in ("a", "b", "c"):
        assert emulator.load(name, make_adapter(name)).status_code == 200
    assert set(emulator.models()) == {"b", "c"}


def test_inference_marks_an_adapter_as_recently_used(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LIMIT_2)
    emulator.load("a", make_adapter("a"))
    emulator.load("b", make_adapter("b"))
    assert emulator.generate("a").status_code == 200
    response = emulator.load("c", make_adapter("c"))
    assert response.status_code == 200
    assert set(response.json()["loaded_adapters"]) == {"a", "c"}


def test_chat_marks_an_adapter_as_recently_used(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LIMIT_2)
    emulator.load("a", make_adapter("a"))
    emulator.load("b", make_adapter("b"))
    assert emulator.chat("base:a").status_code == 200
    emulator.load("c", make_adapter("c"))
    assert set(emulator.models()) == {"a", "c"}


def test_pinned_adapters_are_never_evicted(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LIMIT_2)
    emulator.load("pinned", make_adapter("pinned"), pinned=True)
    emulator.load("b", make_adapter("b"))
    emulator.load("c", make_adapter("c"))
    assert set(emulator.models()) == {"pinned", "c"}


def test_a_busy_lru_victim_holds_the_load_back(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LIMIT_2, latency={"/generate": 0.5})
    emulator.load("a", make_adapter("a"))
    emulator.load("b", make_adapter("b"))
    url = emulator.server.url
    with ThreadPoolExecutor(2) as pool, client(url) as inference, client(url) as admin:
        # b is in use, then a is used after it: b is the least recently used, yet busy
        generating = pool.submit(inference.post, "/generate", json={"text": "x", "lora_path": "b"})
        wait_until(lambda: any(ref["in_flight"] for ref in emulator.state()["adapters"]))
        assert emulator.chat("base:a").status_code == 200  # /v1/chat/completions: no latency
        path_c = make_adapter("c")
        loading = pool.submit(
            admin.post, "/load_lora_adapter", json={"lora_name": "c", "lora_path": path_c}
        )
        wait_until(lambda: "b" not in emulator.models())
        loaded_early = loading.done()
        assert [ref["in_flight"] for ref in emulator.state()["draining"]] == [1]
        assert not loaded_early
        assert generating.result().status_code == 200
        response = loading.result()
    assert response.status_code == 200
    assert set(response.json()["loaded_adapters"]) == {"a", "c"}


def test_nothing_evictable_is_a_400_with_null_map() -> None:
    """Unreachable through the flags SGLang accepts (max-loaded ≥ per-batch), so tested on the
    state machine: every registered adapter pinned and one over the limit."""
    policy = LoraPolicy(
        enabled=True,
        max_lora_rank=64,
        target_modules=frozenset({"qkv_proj"}),
        max_loras_per_batch=3,
        max_loaded_loras=1,
        dp_size=1,
    )
    state = LoraState(policy)

    def read(path: str) -> AdapterSpec:
        return AdapterSpec(rank=8, target_modules=frozenset({"qkv_proj"}))

    assert state.load("a", "/adapters/a", True, read).result.success
    outcome = state.load("b", "/adapters/b", True, read)
    body = outcome.result.body()
    assert body["success"] is False
    assert body["loaded_adapters"] is None
    assert "Didn't find any LoRA adapters when trying to evict" in str(body["error_message"])
    assert outcome.draining == ()
