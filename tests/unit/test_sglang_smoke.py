"""The smoke generation's contract: the request sent after every load, and how its answer is read.

A smoke passes only on a 200 whose first output token has a finite logprob; SGLang writes NaN and
±Inf as ``null`` (orjson), so a JSON number that is not a bool and is finite. Everything else
fails in SGLang's words, or as an answer outside the contract.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulumi_lora._core._reconcile import ReplyKind
from pulumi_lora._errors import (
    PulumiLoRAError,
    ServerStarting,
    SGLangProtocolError,
    SGLangServerError,
    SmokeFailed,
    Unauthorized,
)
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import _protocol
from pulumi_lora._sglang._answers import NULL_LOGPROB, classify_smoke
from pulumi_lora._sglang._executor import failure_reply, to_reply
from pulumi_lora._sglang._protocol import Peer, Request, Smoked

PEER = Peer("llama-0")
KEYED = Peer("llama-0", api_key_configured=True)
NAME = "sql"


def generated(*tokens: list[Any], **meta: Any) -> bytes:
    """A ``/generate`` answer with ``return_logprob``, as SGLang 0.5.23 writes it."""
    info = {
        "id": "75dff890",
        "finish_reason": {"type": "length", "length": len(tokens)},
        "prompt_tokens": 1,
        "input_token_logprobs": [],
        "output_token_logprobs": list(tokens),
        "output_token_logprobs_length": len(tokens),
        "completion_tokens": len(tokens),
        **meta,
    }
    return json.dumps({"text": "", "output_ids": [0], "meta_info": info}).encode()


def smoke(status: int, body: bytes, peer: Peer = PEER) -> Any:
    return classify_smoke(status, body, name=NAME, peer=peer)


def test_the_request_is_one_greedy_token_through_the_adapter_with_its_logprob() -> None:
    timeouts = ClientTimeouts(connect=1, read=2, load=3, unload=4, smoke=5)
    assert _protocol.smoke_request(NAME, timeouts=timeouts) == Request(
        "POST",
        "/generate",
        5,
        {
            "input_ids": [1],
            "lora_path": NAME,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True,
        },
    )
    assert ClientTimeouts().smoke == 60.0


@pytest.mark.parametrize(
    ("status", "body", "expected", "said"),
    [
        pytest.param(200, generated([-5.93, 0, None]), Smoked(NAME, -5.93), None, id="finite"),
        pytest.param(200, generated([0, 7, "a"]), Smoked(NAME, 0.0), None, id="integer-zero"),
        pytest.param(200, generated([None, 0, None]), SmokeFailed, NULL_LOGPROB, id="null"),
        pytest.param(
            200,
            b'{"meta_info": {"output_token_logprobs": [[NaN, 0, null]]}}',
            SmokeFailed,
            "logprob is nan",
            id="nan-literal",
        ),
        pytest.param(
            200,
            b'{"meta_info": {"output_token_logprobs": [[-Infinity, 0, null]]}}',
            SmokeFailed,
            "logprob is -inf",
            id="inf-literal",
        ),
        pytest.param(
            400,
            json.dumps(
                {"error": {"message": "Got LoRA adapter that has never been loaded: sql"}}
            ).encode(),
            SmokeFailed,
            "Got LoRA adapter that has never been loaded: sql",
            id="400-error-message",
        ),
        pytest.param(
            400,
            b'{"error": "invalid type: string \\"yes\\", expected a value"}',
            SmokeFailed,
            'invalid type: string "yes", expected a value',
            id="400-contract-check",
        ),
        pytest.param(
            400,
            json.dumps({"object": "error", "message": "bad", "type": "BadRequestError"}).encode(),
            SmokeFailed,
            "bad",
            id="400-openai-shape",
        ),
        pytest.param(200, generated([True, 0, None]), SGLangProtocolError, None, id="bool"),
        pytest.param(200, generated(["-1.0", 0, None]), SGLangProtocolError, None, id="string"),
        pytest.param(200, generated(), SGLangProtocolError, None, id="no-tokens"),
        pytest.param(200, generated([]), SGLangProtocolError, None, id="empty-token"),
        pytest.param(
            200,
            b'{"text": "hi", "meta_info": {}}',
            SGLangProtocolError,
            None,
            id="missing-logprobs",
        ),
        pytest.param(200, b'{"text": "hi"}', SGLangProtocolError, None, id="missing-meta"),
        pytest.param(200, b"[]", SGLangProtocolError, None, id="a-batch"),
        pytest.param(503, b"", ServerStarting, None, id="starting"),
        pytest.param(500, b"Internal Server Error", SGLangServerError, None, id="500"),
    ],
)
def test_classify(status: int, body: bytes, expected: Any, said: str | None) -> None:
    if isinstance(expected, type):
        with pytest.raises(expected) as caught:
            smoke(status, body)
        assert type(caught.value) is expected
        assert caught.value.route == "/generate" and caught.value.target == "llama-0"
        assert caught.value.server_message == said
        if said is not None:
            assert str(caught.value).endswith(f"SGLang said: {said}")
    else:
        assert smoke(status, body) == expected


def test_a_failed_smoke_is_a_permanent_refusal_in_sglangs_words() -> None:
    with pytest.raises(SmokeFailed) as caught:
        smoke(200, generated([None, 0, None]))
    error = caught.value
    assert error.reason == "SmokeFailed" and not error.retryable
    assert str(error) == (
        "the smoke generation through the adapter failed [llama-0 /generate: HTTP 200] "
        "SGLang said: logprob is null (NaN or Inf)"
    )
    reply = failure_reply(error)
    assert reply.kind is ReplyKind.FAILED and reply.reason == "SmokeFailed"
    assert to_reply(Smoked(NAME, -1.0)).kind is ReplyKind.SMOKED


def test_a_refused_key_on_generate_names_the_two_key_setup() -> None:
    with pytest.raises(Unauthorized) as caught:
        smoke(401, b'{"error": "Unauthorized"}', KEYED)
    assert "--admin-api-key" in str(caught.value) and "smoke_test=false" in str(caught.value)


TOKEN = st.lists(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=3), max_size=3
)
BODIES = st.binary(max_size=128) | st.fixed_dictionaries(
    {},
    optional={
        "meta_info": st.fixed_dictionaries(
            {}, optional={"output_token_logprobs": st.lists(TOKEN, max_size=2) | st.none()}
        )
        | st.none(),
        "error": st.text(max_size=5) | st.dictionaries(st.just("message"), st.text()),
    },
).map(lambda value: json.dumps(value).encode())


@settings(max_examples=300, deadline=None)
@given(status=st.integers(min_value=-1, max_value=1000), body=BODIES)
def test_classification_never_raises_outside_the_tree(status: int, body: bytes) -> None:
    try:
        outcome = smoke(status, body)
    except PulumiLoRAError:
        return
    assert status == 200 and isinstance(outcome, Smoked)
    assert outcome.logprob == outcome.logprob and abs(outcome.logprob) != float("inf")
