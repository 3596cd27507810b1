"""/v1/models, /server_info, /model_info, and what a restart looks like from outside."""

from __future__ import annotations

import time

from pulumi_lora.testing.emulator import StartupAdapter
from tests.contract._emulators import LORA, AdapterFactory, Emulator, StartEmulator


def test_models_lists_the_base_then_every_adapter(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, served_model_name="qwen", context_length=32768)
    path = make_adapter("sql")
    emulator.load("sql", path)
    before = int(time.time())
    body = emulator.client.get("/v1/models").json()
    assert body["object"] == "list"
    base, adapter = body["data"]
    assert base == {
        "id": "qwen",
        "object": "model",
        "created": base["created"],
        "owned_by": "sglang",
        "root": "qwen",
        "parent": None,
        "max_model_len": 32768,
    }
    assert adapter == {
        "id": "sql",
        "object": "model",
        "created": adapter["created"],
        "owned_by": "sglang",
        "root": path,
        "parent": "qwen",
        "max_model_len": None,
    }
    assert abs(base["created"] - before) <= 2  # stamped per request


def test_models_default_base_is_the_model_path(start: StartEmulator) -> None:
    emulator = start(model_path="Qwen/Qwen2.5-0.5B")
    (base,) = emulator.client.get("/v1/models").json()["data"]
    assert base["id"] == base["root"] == "Qwen/Qwen2.5-0.5B"
    assert base["max_model_len"] == 131072


def test_adapters_are_listed_least_recently_used_first(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    lora.load("a", make_adapter("a"))
    lora.load("b", make_adapter("b"))
    assert list(lora.models()) == ["a", "b"]
    lora.generate("a")
    assert list(lora.models()) == ["b", "a"]


def test_root_shows_a_path_drift(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.load("sql", make_adapter("v1"))
    lora.unload("sql")
    lora.load("sql", make_adapter("v2"))
    assert lora.models() == {"sql": "/adapters/v2"}


def test_server_info_and_its_alias(start: StartEmulator, make_adapter: AdapterFactory) -> None:
    boot = make_adapter("boot")
    emulator = start(
        lora_paths=(StartupAdapter("boot", boot, pinned=True),),
        api_key="plain-key",
        admin_api_key="admin-key",
        random_seed=1234,
    )
    headers = {"Authorization": "Bearer plain-key"}
    info = emulator.client.get("/server_info", headers=headers)
    assert info.status_code == 200
    body = info.json()
    assert body["version"] == "0.5.15"
    assert body["random_seed"] == 1234
    assert body["lora_paths"] == [{"lora_name": "boot", "lora_path": boot, "pinned": True}]
    assert body["api_key"] == "plain-key"  # SGLang echoes the keys: never log this route
    assert body["admin_api_key"] == "admin-key"
    assert body["port"] == emulator.server.port
    assert body["enable_lora"] is True
    assert emulator.client.get("/get_server_info", headers=headers).json() == body


def test_server_info_lora_paths_is_never_updated(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    boot = make_adapter("boot")
    emulator = start(lora_paths=(StartupAdapter("boot", boot),))
    emulator.load("dynamic", make_adapter("dynamic"))
    emulator.unload("boot")
    paths = emulator.client.get("/server_info").json()["lora_paths"]
    assert paths == [{"lora_name": "boot", "lora_path": boot, "pinned": False}]


def test_random_seed_changes_per_launch_unless_pinned(start: StartEmulator) -> None:
    seeds = {start().client.get("/server_info").json()["random_seed"] for _ in range(3)}
    assert len(seeds) == 3
    pinned = {start(random_seed=7).client.get("/server_info").json()["random_seed"] for _ in "ab"}
    assert pinned == {7}


def test_a_restart_forgets_dynamic_adapters_and_reloads_startup_ones(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    boot = make_adapter("boot")
    fields = {"lora_paths": (StartupAdapter("boot", boot),)}
    first = start(**fields)
    first.load("dynamic", make_adapter("dynamic"))
    first.server.stop()
    second = start(**fields)
    assert second.models() == {"boot": boot}
    assert second.generate("dynamic").status_code == 400  # the reload cache is gone too


def test_model_info_and_its_alias(start: StartEmulator) -> None:
    emulator = start(model_path="Qwen/Qwen2.5-0.5B")
    body = emulator.client.get("/model_info").json()
    assert body["model_path"] == "Qwen/Qwen2.5-0.5B"
    assert body["architectures"]
    assert emulator.client.get("/get_model_info").json() == body
