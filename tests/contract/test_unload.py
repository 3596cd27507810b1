"""POST /unload_lora_adapter: 200 with what remains, 400 for unknown names, held while in use."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pulumi_lora.testing.emulator import StartupAdapter
from tests.contract._emulators import (
    LORA,
    AdapterFactory,
    Emulator,
    StartEmulator,
    client,
    wait_until,
)


def test_unload_answers_200_with_what_remains(lora: Emulator, make_adapter: AdapterFactory) -> None:
    keep = make_adapter("keep")
    lora.load("keep", keep)
    lora.load("drop", make_adapter("drop"))
    response = lora.unload("drop")
    assert response.status_code == 200
    assert response.json() == {
        "rid": None,
        "http_worker_ipc": None,
        "success": True,
        "error_message": "",
        "loaded_adapters": {"keep": keep},
    }
    assert lora.models() == {"keep": keep}


def test_unknown_name_is_a_400_naming_the_loaded_ones(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    lora.load("sql", make_adapter("sql"))
    response = lora.unload("never")
    assert response.status_code == 400
    body = response.json()
    assert body["success"] is False
    assert body["loaded_adapters"] is None
    assert "LoRA with name never does not exist. Loaded LoRAs: " in body["error_message"]
    assert "'sql'" in body["error_message"]


def test_unloading_twice_is_a_400(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.load("sql", make_adapter("sql"))
    assert lora.unload("sql").status_code == 200
    response = lora.unload("sql")
    assert response.status_code == 400
    assert "LoRA with name sql does not exist" in response.json()["error_message"]


def test_unloading_an_evicted_adapter_is_a_400(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, max_loras_per_batch=1, max_loaded_loras=1)
    emulator.load("old", make_adapter("old"))
    emulator.load("new", make_adapter("new"))
    response = emulator.unload("old")
    assert response.status_code == 400
    assert "LoRA with name old does not exist" in response.json()["error_message"]


def test_pinned_adapter_unloads_with_200(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.load("pinned", make_adapter("pinned"), pinned=True)
    assert lora.unload("pinned").status_code == 200
    assert lora.models() == {}


def test_startup_adapter_unloads_with_200(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    path = make_adapter("boot")
    emulator = start(lora_paths=(StartupAdapter("boot", path),))
    assert emulator.unload("boot").status_code == 200
    assert emulator.models() == {}


def test_unload_without_lora_enabled(start: StartEmulator) -> None:
    response = start().unload("sql")
    assert response.status_code == 400
    body = response.json()
    assert "LoRA is not enabled" in body["error_message"]
    assert body["loaded_adapters"] is None


@pytest.mark.parametrize("body", [{}, {"lora_name": None}, {"name": "sql"}])
def test_malformed_unload_body(lora: Emulator, body: object) -> None:
    response = lora.client.post("/unload_lora_adapter", json=body)
    assert response.status_code == 400
    assert response.json()["type"] == "Bad Request"


def test_adapter_in_use_is_unregistered_at_once_and_its_200_held_back(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, latency={"/generate": 0.5})
    emulator.load("sql", make_adapter("sql"))
    url = emulator.server.url
    with ThreadPoolExecutor(2) as pool, client(url) as inference, client(url) as admin:
        generating = pool.submit(
            inference.post, "/generate", json={"text": "hi", "lora_path": "sql"}
        )
        wait_until(lambda: emulator.state()["adapters"][0]["in_flight"] == 1)
        unloading = pool.submit(admin.post, "/unload_lora_adapter", json={"lora_name": "sql"})
        wait_until(lambda: emulator.models() == {})
        unloaded_early = unloading.done()
        draining = emulator.state()["draining"]
        # still in flight after the look at the unload: it cannot have answered yet
        assert [(ref["name"], ref["in_flight"]) for ref in draining] == [("sql", 1)]
        assert not unloaded_early
        assert generating.result().status_code == 200
        unloaded = unloading.result()
    assert unloaded.status_code == 200
    assert unloaded.json()["loaded_adapters"] == {}
    assert emulator.state()["draining"] == []
