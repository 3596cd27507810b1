"""/generate and the OpenAI routes: choosing the adapter, batches, and their error shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulumi_lora.testing.peft import write_adapter
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


# --- logprobs and max_new_tokens (the smoke generation after every load) --------------------------


def test_generate_honours_max_new_tokens(sql: Emulator) -> None:
    body = {"text": "hi", "lora_path": "sql", "sampling_params": {"max_new_tokens": 2}}
    answer = sql.client.post("/generate", json=body).json()
    assert answer["text"] == "emulated output"
    assert answer["meta_info"]["completion_tokens"] == 2
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 2}
    assert "output_token_logprobs" not in answer["meta_info"]  # only when asked


def test_return_logprob_gives_each_tokens_logprob_as_sglang_does(sql: Emulator) -> None:
    body = {
        "input_ids": [1],
        "lora_path": "sql",
        "sampling_params": {"max_new_tokens": 3, "temperature": 0},
        "return_logprob": True,
    }
    meta = sql.client.post("/generate", json=body).json()["meta_info"]
    tokens = meta["output_token_logprobs"]
    assert len(tokens) == meta["output_token_logprobs_length"] == 3
    for logprob, token_id, text in tokens:  # [logprob, token id, text unless asked: null]
        assert isinstance(logprob, float) and logprob < 0
        assert isinstance(token_id, int) and text is None
    assert meta["input_token_logprobs"] == []  # SGLang's default logprob_start_len: none


def test_a_batch_takes_return_logprob_per_prompt(sql: Emulator) -> None:
    body = {"text": ["a", "b"], "lora_path": "sql", "return_logprob": [True, False]}
    first, second = sql.client.post("/generate", json=body).json()
    assert "output_token_logprobs" in first["meta_info"]
    assert "output_token_logprobs" not in second["meta_info"]


def test_nan_weights_load_and_then_give_null_logprobs(
    lora: Emulator, fs_root: Path, make_adapter: AdapterFactory
) -> None:
    write_adapter(fs_root / "adapters" / "broken", nan=True)
    assert lora.load("broken", "/adapters/broken").status_code == 200  # loaded without a word
    assert lora.load("fine", make_adapter("fine")).status_code == 200
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}, "return_logprob": True}
    for name, logprob in (("broken", None), ("fine", -0.6931), (None, -0.6931)):
        answer = lora.client.post("/generate", json={**body, "lora_path": name})
        assert answer.status_code == 200
        assert answer.json()["meta_info"]["output_token_logprobs"][0][0] == logprob


def test_the_state_counts_inferences_through_each_adapter(sql: Emulator) -> None:
    assert sql.state()["inferences"] == {}
    sql.generate("sql")
    sql.generate(None)
    sql.generate(["sql", "sql"], text=["a", "b"])
    sql.chat("base:sql")
    assert sql.state()["inferences"] == {"sql": 4}
