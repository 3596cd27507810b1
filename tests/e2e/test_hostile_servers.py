"""Malformed or hostile answers from a server give a clear error: never a hang, never a crash.

One pod of three misbehaves on its load; the create must fail with a message naming that pod
and what was wrong, and leave nothing behind (no CR, no adapter on the two healthy pods).
"""

from __future__ import annotations

import time

import pytest

from pulumi_lora import AdapterNotLoaded
from pulumi_lora._cluster import get_adapter
from pulumi_lora._operations import ProviderConfig
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import emulator_post, served


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("/load_lora_adapter:malformed", "the answer is not valid JSON"),
        ("/load_lora_adapter:huge=3000000", "the answer is larger than 1048576 bytes"),
        ("/load_lora_adapter:drop", "Server disconnected without sending a response"),
        ("/load_lora_adapter:status=500,body=Internal Server Error", "SGLang failed with HTTP 500"),
        ("/load_lora_adapter:status=418,body=teapot", "unexpected HTTP status 418"),
        ("/load_lora_adapter:status=200,body=[1, 2, 3]", "the answer is not a JSON object"),
    ],
)
def test_a_hostile_answer_fails_clearly_and_leaves_nothing(
    testbed: Testbed,
    namespace: str,
    isvc: InferenceServiceHandle,
    config: ProviderConfig,
    fault: str,
    said: str,
) -> None:
    bad = isvc.ready_pods()[2]
    armed = emulator_post(bad.url, "/_emulator/faults", {"faults": [fault]})
    assert armed.status_code < 300, armed.text
    provider = LoRAAdapterProvider()
    provider._config = config
    start = time.monotonic()
    with pytest.raises(AdapterNotLoaded) as caught:
        provider.create(
            {
                "adapter_name": "hostile",
                "path": testbed.make_adapter("hostile"),
                "inference_service": "llama",
                "namespace": namespace,
            }
        )
    assert time.monotonic() - start < 60  # bounded: no hang on a hostile body
    message = str(caught.value)
    assert f"pod {bad.name}" in message and "loaded on 2/3 Ready pods" in message
    assert said in message and len(message) < 2000  # clear, and bounded even for a huge body
    assert get_adapter(testbed.client(), namespace, "hostile") is None
    assert all("hostile" not in adapters for adapters in served(isvc).values())
