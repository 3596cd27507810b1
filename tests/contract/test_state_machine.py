"""The pure state machine on its own: check order, LRU, pinning, draining, implicit reload."""

from __future__ import annotations

import pytest

from pulumi_lora.testing.emulator._state import (
    AdapterReadError,
    AdapterSpec,
    DpSizeAssertionError,
    InferenceError,
    LoraPolicy,
    LoraState,
    Reload,
)

SMALL = AdapterSpec(rank=8, target_modules=frozenset({"qkv_proj"}))


def policy(**changes: object) -> LoraPolicy:
    fields: dict[str, object] = {
        "enabled": True,
        "max_lora_rank": 16,
        "target_modules": frozenset({"qkv_proj", "o_proj"}),
        "max_loras_per_batch": 3,
        "max_loaded_loras": None,
        "dp_size": 1,
    }
    return LoraPolicy(**{**fields, **changes})  # type: ignore[arg-type]


def read_small(path: str) -> AdapterSpec:
    if path.startswith("/missing"):
        raise AdapterReadError(f"no adapter at {path}")
    return SMALL


def test_checks_run_in_order() -> None:
    state = LoraState(policy())
    assert state.load("a", "/a", False, read_small).result.success
    cases = [
        # 2 beats 3: a bad path under a duplicate name
        ("a", "/missing", False, "no adapter at /missing"),
        ("a", "/a2", False, "already loaded"),
    ]
    for name, path, pinned, quoted in cases:
        result = state.load(name, path, pinned, read_small).result
        assert not result.success
        assert quoted in str(result.error_message)
        assert result.loaded_adapters == {"a": "/a"}


def test_disabled_comes_before_dp_size() -> None:
    disabled = LoraState(policy(enabled=False, dp_size=2))
    assert disabled.load("a", "/a", False, read_small).result.loaded_adapters is None
    with pytest.raises(DpSizeAssertionError):
        LoraState(policy(dp_size=2)).load("a", "/a", False, read_small)


def test_the_reader_is_not_called_when_lora_is_disabled() -> None:
    def explode(path: str) -> AdapterSpec:
        raise AssertionError("read")

    assert not LoraState(policy(enabled=False)).load("a", "/a", False, explode).result.success


def test_unload_is_two_steps_around_in_flight_requests() -> None:
    state = LoraState(policy())
    state.load("a", "/a", False, read_small)
    (lora_id,) = state.acquire(["a", None])
    started = state.begin_unload("a")
    assert started == lora_id
    assert state.registered() == []
    assert [ref.name for ref in state.draining()] == ["a"]
    assert state.in_flight(lora_id) == 1
    state.release([lora_id])
    result = state.finish_unload(lora_id)
    assert result.success
    assert result.loaded_adapters == {}
    assert state.draining() == []


def test_a_draining_name_cannot_start_new_requests_but_plans_a_reload() -> None:
    state = LoraState(policy())
    state.load("a", "/a", True, read_small)
    state.acquire(["a"])
    state.begin_unload("a")
    assert state.plan_inference(["a"]) == (Reload("a", "/a", True),)
    with pytest.raises(InferenceError, match="not loaded: a"):
        state.acquire(["a"])


def test_plan_inference_touches_lru_and_rejects_unknown_names() -> None:
    state = LoraState(policy())
    for name in ("a", "b"):
        state.load(name, f"/{name}", False, read_small)
    assert state.plan_inference(["a", None]) == ()
    assert [ref.name for ref in state.registered()] == ["b", "a"]
    with pytest.raises(InferenceError, match="never been loaded: c"):
        state.plan_inference(["c"])
    with pytest.raises(InferenceError, match="but LoRA is not enabled"):
        LoraState(policy(enabled=False)).plan_inference(["a"])


def test_eviction_unregisters_the_lru_unpinned_and_reports_it_draining() -> None:
    state = LoraState(policy(max_loaded_loras=2))
    state.load("pinned", "/p", True, read_small)
    state.load("old", "/o", False, read_small)
    outcome = state.load("new", "/n", False, read_small)
    assert outcome.result.loaded_adapters == {"pinned": "/p", "new": "/n"}
    assert [ref.name for ref in state.draining()] == ["old"]
    (victim,) = outcome.draining
    assert state.finish_unload(victim).loaded_adapters == {"pinned": "/p", "new": "/n"}
