"""/generate and the OpenAI routes: choosing the adapter, batches, and their error shapes."""

from __future__ import annotations

import pytest

from tests.contract._emulators import AdapterFactory, Emulator, StartEmulator

BASE_OUTPUT = "emulated output of emulator/base-model"


@pytest.fixture
def sql(lora: Emulator, make_adapter: AdapterFactory) -> Emulator:
    """A LoRA server with the adapter ``sql`` loaded."""
    assert lora.load("sql", make_adapter("sql")).status_code == 200
    return lora


def test_generate_with_a_string_answers_one_result(sql: Emulator) -> None:
    response = sql.generate("sql")
    assert response.status_code == 200
    body = response.json()
    assert body["text"] == f"{BASE_OUTPUT} with LoRA adapter sql"
    assert "meta_info" in body


def test_generate_with_null_lora_path_runs_the_base(sql: Emulator) -> None:
    assert sql.generate(None).json()["text"] == BASE_OUTPUT


def test_generate_with_a_list_answers_a_list_parallel_to_lora_path(sql: Emulator) -> None:
    response = sql.generate(["sql", None, "sql"], text=["a", "b", "c"])
    assert response.status_code == 200
    texts = [item["text"] for item in response.json()]
    assert texts == [f"{BASE_OUTPUT} with LoRA adapter sql", BASE_OUTPUT, texts[0]]


def test_generate_with_a_list_and_one_adapter_name(sql: Emulator) -> None:
    response = sql.generate("sql", text=["a", "b"])
    assert [item["text"] for item in response.json()] == [
        f"{BASE_OUTPUT} with LoRA adapter sql"
    ] * 2


def test_generate_with_input_ids(sql: Emulator) -> None:
    single = sql.client.post("/generate", json={"input_ids": [1, 2, 3], "lora_path": "sql"})
    batch = sql.client.post("/generate", json={"input_ids": [[1], [2]], "lora_path": None})
    assert single.json()["text"].endswith("sql")
    assert [item["text"] for item in batch.json()] == [BASE_OUTPUT, BASE_OUTPUT]


def test_generate_accepts_put(sql: Emulator) -> None:
    response = sql.client.put("/generate", json={"text": "hi"})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"lora_path": "sql"},
        {"text": ["a", "b"], "lora_path": ["sql"]},
    ],
)
def test_generate_errors_have_the_native_shape(sql: Emulator, body: object) -> None:
    response = sql.client.post("/generate", json=body)
    assert response.status_code == 400
    payload = response.json()
    assert list(payload) == ["error"]
    assert list(payload["error"]) == ["message"]


def test_generate_malformed_body(sql: Emulator) -> None:
    response = sql.client.post("/generate", json={"text": 12})
    assert response.status_code == 400
    assert response.json()["type"] == "Bad Request"


def test_chat_chooses_the_adapter_with_base_colon_adapter(sql: Emulator) -> None:
    response = sql.chat("emulator/base-model:sql")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "emulator/base-model:sql"
    assert body["choices"][0]["message"]["content"] == f"{BASE_OUTPUT} with LoRA adapter sql"


def test_chat_with_a_bare_adapter_name_silently_runs_the_base(sql: Emulator) -> None:
    for model in ("sql", "never-loaded"):
        response = sql.chat(model)
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == BASE_OUTPUT


def test_completions_choose_the_adapter_the_same_way(sql: Emulator) -> None:
    response = sql.client.post("/v1/completions", json={"model": "base:sql", "prompt": ["a", "b"]})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "text_completion"
    assert [choice["text"] for choice in body["choices"]] == [
        f"{BASE_OUTPUT} with LoRA adapter sql"
    ] * 2
    bare = sql.client.post("/v1/completions", json={"model": "sql", "prompt": "a"})
    assert bare.json()["choices"][0]["text"] == BASE_OUTPUT


def test_completions_never_loaded_error_shape(sql: Emulator) -> None:
    response = sql.client.post("/v1/completions", json={"model": "b:ghost", "prompt": "a"})
    assert response.status_code == 400
    assert response.json()["type"] == "BadRequestError"
    assert "never been loaded: ghost" in response.json()["message"]


def test_chat_malformed_body(sql: Emulator) -> None:
    response = sql.client.post("/v1/chat/completions", json={"model": "base:sql"})
    assert response.status_code == 400
    assert response.json()["type"] == "Bad Request"


def test_lora_not_enabled_and_an_adapter_requested(start: StartEmulator) -> None:
    emulator = start()
    generate = emulator.generate("sql")
    assert generate.status_code == 400
    assert "but LoRA is not enabled" in generate.json()["error"]["message"]
    chat = emulator.chat("base:sql")
    assert chat.status_code == 400
    assert chat.json()["type"] == "BadRequestError"
    assert "but LoRA is not enabled" in chat.json()["message"]


def test_lora_not_enabled_still_serves_the_base(start: StartEmulator) -> None:
    emulator = start()
    assert emulator.generate(None).json()["text"] == BASE_OUTPUT
    assert emulator.chat("sql").status_code == 200
