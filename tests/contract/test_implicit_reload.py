"""Implicit reload (≥0.5.6): inference naming an unloaded or evicted adapter loads it again."""

from __future__ import annotations

import shutil
from pathlib import Path

from pulumi_lora.testing.emulator import StartupAdapter
from tests.contract._emulators import LORA, AdapterFactory, Emulator, StartEmulator


def test_generate_reloads_an_unloaded_adapter(lora: Emulator, make_adapter: AdapterFactory) -> None:
    path = make_adapter("sql")
    lora.load("sql", path)
    lora.unload("sql")
    assert lora.models() == {}
    response = lora.generate("sql")
    assert response.status_code == 200
    assert response.json()["text"].endswith("with LoRA adapter sql")
    assert lora.models() == {"sql": path}


def test_chat_reloads_an_evicted_adapter_evicting_another(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, max_loras_per_batch=1, max_loaded_loras=1)
    emulator.load("a", make_adapter("a"))
    emulator.load("b", make_adapter("b"))
    assert set(emulator.models()) == {"b"}
    response = emulator.chat("base:a")
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"].endswith("with LoRA adapter a")
    assert set(emulator.models()) == {"a"}


def test_reload_uses_the_last_loaded_path_and_pinning(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    lora.load("sql", make_adapter("v1"))
    lora.unload("sql")
    v2 = make_adapter("v2")
    lora.load("sql", v2, pinned=True)
    lora.unload("sql")
    assert lora.generate("sql").status_code == 200
    assert lora.state()["adapters"] == [{"name": "sql", "path": v2, "pinned": True, "in_flight": 0}]


def test_startup_adapters_are_reloaded_too(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    path = make_adapter("boot")
    emulator = start(lora_paths=(StartupAdapter("boot", path),))
    emulator.unload("boot")
    assert emulator.generate("boot").status_code == 200
    assert emulator.models() == {"boot": path}


def test_never_loaded_name_fails_generate(lora: Emulator) -> None:
    response = lora.generate("ghost")
    assert response.status_code == 400
    assert response.json() == {
        "error": {"message": "Got LoRA adapter that has never been loaded: ghost"}
    }


def test_never_loaded_name_fails_chat(lora: Emulator) -> None:
    response = lora.chat("base:ghost")
    assert response.status_code == 400
    body = response.json()
    assert body == {
        "object": "error",
        "message": body["message"],
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert "Got LoRA adapter that has never been loaded: ghost" in body["message"]


def test_a_failed_load_does_not_count_as_loaded(lora: Emulator) -> None:
    assert lora.load("ghost", "/adapters/missing").status_code == 400
    response = lora.generate("ghost")
    assert response.status_code == 400
    assert "never been loaded: ghost" in response.json()["error"]["message"]


def test_reload_of_a_vanished_directory_fails_the_request(
    lora: Emulator, fs_root: Path, make_adapter: AdapterFactory
) -> None:
    lora.load("sql", make_adapter("sql"))
    lora.unload("sql")
    shutil.rmtree(fs_root / "adapters" / "sql")
    response = lora.generate("sql")
    assert response.status_code == 400
    assert "Failed to implicitly load LoRA adapter sql" in response.json()["error"]["message"]
    assert lora.models() == {}
