"""POST /load_lora_adapter: the body shape and every check, in SGLang's order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract._emulators import LORA, AdapterFactory, Emulator, StartEmulator

BODY_KEYS = {"rid", "http_worker_ipc", "success", "error_message", "loaded_adapters"}


def test_success_body_has_the_exact_shape(lora: Emulator, make_adapter: AdapterFactory) -> None:
    path = make_adapter("sql")
    response = lora.load("sql", path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "rid": None,
        "http_worker_ipc": None,
        "success": True,
        "error_message": "",
        "loaded_adapters": {"sql": path},
    }


def test_success_lists_the_full_current_map(lora: Emulator, make_adapter: AdapterFactory) -> None:
    first, second = make_adapter("a"), make_adapter("b")
    lora.load("a", first)
    assert lora.load("b", second).json()["loaded_adapters"] == {"a": first, "b": second}


def test_unknown_keys_in_the_request_are_ignored(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    response = lora.load("sql", make_adapter("sql"), load_inplace=True, whatever={"x": 1})
    assert response.status_code == 200


def test_1_lora_not_enabled(start: StartEmulator, make_adapter: AdapterFactory) -> None:
    emulator = start()
    response = emulator.load("sql", make_adapter("sql"))
    assert response.status_code == 400
    body = response.json()
    assert set(body) == BODY_KEYS
    assert body["success"] is False
    assert body["loaded_adapters"] is None
    expected = "LoRA is not enabled. Please set `--enable-lora` to enable LoRA."
    assert expected in body["error_message"]


def test_1_lora_not_enabled_wins_over_dp_size(start: StartEmulator) -> None:
    response = start(dp_size=2).load("sql", "/adapters/missing")
    assert response.status_code == 400
    assert "LoRA is not enabled" in response.json()["error_message"]


def test_2_missing_directory_is_a_hub_lookup_that_fails_offline(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    loaded = make_adapter("a")
    lora.load("a", loaded)
    response = lora.load("b", "/adapters/missing")
    assert response.status_code == 400
    body = response.json()
    assert body["success"] is False
    assert "Repo id must be in the form" in body["error_message"]
    assert "'/adapters/missing'" in body["error_message"]
    assert body["loaded_adapters"] == {"a": loaded}


def test_2_repo_id_like_path_fails_offline(lora: Emulator) -> None:
    response = lora.load("b", "org/not-downloaded")
    assert response.status_code == 400
    assert "check your internet connection" in response.json()["error_message"]


def test_2_directory_without_adapter_config(lora: Emulator, make_adapter: AdapterFactory) -> None:
    path = make_adapter("empty", config=False)
    response = lora.load("empty", path)
    assert response.status_code == 400
    body = response.json()
    assert "No such file or directory" in body["error_message"]
    assert "/adapters/empty/adapter_config.json" in body["error_message"]
    assert body["loaded_adapters"] == {}


@pytest.mark.parametrize(
    ("content", "quoted"),
    [("{not json", "Expecting property name"), ('{"target_modules": ["q_proj"]}', "'r'")],
)
def test_2_unreadable_adapter_config(
    lora: Emulator, fs_root: Path, make_adapter: AdapterFactory, content: str, quoted: str
) -> None:
    path = make_adapter("broken", config=False)
    (fs_root / "adapters" / "broken" / "adapter_config.json").write_text(content)
    response = lora.load("broken", path)
    assert response.status_code == 400
    assert quoted in response.json()["error_message"]


def test_2_bad_path_wins_over_duplicate_name(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.load("sql", make_adapter("sql"))
    response = lora.load("sql", "/adapters/missing")
    assert response.status_code == 400
    assert "Repo id must be in the form" in response.json()["error_message"]


def test_3_duplicate_name_is_not_idempotent(lora: Emulator, make_adapter: AdapterFactory) -> None:
    path = make_adapter("sql")
    assert lora.load("sql", path).status_code == 200
    response = lora.load("sql", path)
    assert response.status_code == 400
    body = response.json()
    assert body["success"] is False
    assert "Failed to load LoRA adapter sql because it is already loaded" in body["error_message"]
    assert body["loaded_adapters"] == {"sql": path}


def test_3_duplicate_name_with_another_path(lora: Emulator, make_adapter: AdapterFactory) -> None:
    lora.load("sql", make_adapter("v1"))
    response = lora.load("sql", make_adapter("v2"))
    assert response.status_code == 400
    assert "already loaded" in response.json()["error_message"]
    assert lora.models() == {"sql": "/adapters/v1"}


def test_3_same_path_under_another_name_is_a_second_copy(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    path = make_adapter("sql")
    lora.load("sql", path)
    response = lora.load("sql-copy", path)
    assert response.status_code == 200
    assert response.json()["loaded_adapters"] == {"sql": path, "sql-copy": path}


def test_4_rank_above_max_lora_rank(start: StartEmulator, make_adapter: AdapterFactory) -> None:
    emulator = start(**{**LORA, "max_lora_rank": 16})
    response = emulator.load("big", make_adapter("big", r=32))
    assert response.status_code == 400
    body = response.json()
    assert "LoRA adapter big with rank 32" in body["error_message"]
    assert "is incompatible with the current LoRA memory pool" in body["error_message"]
    assert body["loaded_adapters"] == {}


def test_4_rank_at_max_lora_rank_fits(start: StartEmulator, make_adapter: AdapterFactory) -> None:
    emulator = start(**{**LORA, "max_lora_rank": 16})
    assert emulator.load("edge", make_adapter("edge", r=16)).status_code == 200


def test_4_target_modules_outside_lora_target_modules(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**{**LORA, "lora_target_modules": ("q_proj", "v_proj")})
    mlp = make_adapter("mlp", target_modules=["q_proj", "down_proj"])
    response = emulator.load("mlp", mlp)
    assert response.status_code == 400
    assert "is incompatible with the current LoRA memory pool" in response.json()["error_message"]
    # q_proj, k_proj and v_proj share SGLang's stacked qkv_proj module
    attention = make_adapter("attn", target_modules=["model.layers.0.self_attn.k_proj"])
    assert emulator.load("attn", attention).status_code == 200


def test_4_incompatible_wins_over_pinned_starvation(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**{**LORA, "max_lora_rank": 8, "max_loras_per_batch": 1})
    response = emulator.load("big", make_adapter("big", r=16), pinned=True)
    assert "incompatible" in response.json()["error_message"]


def test_5_pinning_the_last_slot_is_starvation(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**{**LORA, "max_loras_per_batch": 3})
    assert emulator.load("p1", make_adapter("p1"), pinned=True).status_code == 200
    assert emulator.load("p2", make_adapter("p2"), pinned=True).status_code == 200
    response = emulator.load("p3", make_adapter("p3"), pinned=True)
    assert response.status_code == 400
    body = response.json()
    assert "starvation" in body["error_message"]
    assert set(body["loaded_adapters"]) == {"p1", "p2"}
    assert emulator.load("unpinned", make_adapter("unpinned")).status_code == 200


def test_5_by_default_seven_of_eight_slots_can_be_pinned(
    lora: Emulator, make_adapter: AdapterFactory
) -> None:
    for index in range(7):
        assert lora.load(f"p{index}", make_adapter(f"p{index}"), pinned=True).status_code == 200
    response = lora.load("p7", make_adapter("p7"), pinned=True)
    assert response.status_code == 400
    assert "starvation" in response.json()["error_message"]


def test_6_max_loaded_loras_evicts_and_answers_200(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**{**LORA, "max_loras_per_batch": 2, "max_loaded_loras": 2})
    emulator.load("a", make_adapter("a"))
    emulator.load("b", make_adapter("b"))
    response = emulator.load("c", make_adapter("c"))
    assert response.status_code == 200
    body = response.json()
    assert body["success"] is True
    assert body["loaded_adapters"] == {"b": "/adapters/b", "c": "/adapters/c"}
    assert emulator.models() == {"b": "/adapters/b", "c": "/adapters/c"}


@pytest.mark.parametrize(
    "body",
    [
        {"lora_name": "sql"},
        {"lora_path": "/adapters/sql"},
        {"lora_name": 7, "lora_path": "/adapters/sql"},
        {"lora_name": "sql", "lora_path": "/adapters/sql", "pinned": "sometimes"},
        ["sql", "/adapters/sql"],
    ],
)
def test_7_malformed_body(lora: Emulator, body: object) -> None:
    response = lora.client.post("/load_lora_adapter", json=body)
    assert response.status_code == 400
    payload = response.json()
    assert set(payload) == {"object", "message", "type", "param", "code"}
    assert payload["object"] == "error"
    assert payload["type"] == "Bad Request"
    assert payload["param"] is None
    assert payload["code"] == 400
    assert isinstance(payload["message"], str)
    assert payload["message"]


@pytest.mark.parametrize("raw", [b"", b"{not json"])
def test_7_body_that_is_not_json(lora: Emulator, raw: bytes) -> None:
    response = lora.client.post(
        "/load_lora_adapter", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["type"] == "Bad Request"


def test_7_malformed_body_wins_over_lora_not_enabled(start: StartEmulator) -> None:
    response = start().client.post("/load_lora_adapter", json={"lora_name": "x"})
    assert response.status_code == 400
    assert response.json()["type"] == "Bad Request"


def test_8_dp_size_above_one_is_a_plain_text_500(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, dp_size=2)
    for response in (emulator.load("sql", make_adapter("sql")), emulator.unload("sql")):
        assert response.status_code == 500
        assert response.headers["content-type"].startswith("text/plain")
        assert response.text == "Internal Server Error"


def test_the_call_returns_after_the_weights_are_read(
    start: StartEmulator, make_adapter: AdapterFactory
) -> None:
    emulator = start(**LORA, latency={"/load_lora_adapter": 0.1})
    response = emulator.load("sql", make_adapter("sql"))
    assert response.status_code == 200
    assert response.elapsed.total_seconds() >= 0.1
    assert emulator.models() == {"sql": "/adapters/sql"}
