"""Malformed or hostile answers from a server give a clear error: never a hang, never a crash.

One pod of three misbehaves on its load; the create must fail with a message naming that pod
and what was wrong, and leave nothing behind (no CR, no adapter on the two healthy pods).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from pulumi_lora import AdapterNotLoaded
from pulumi_lora._errors import SwapRolledBack
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import emulator_post, emulator_state, served


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
    provider = short(config)  # a dropped load is watched for landing as long as its timeout
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


# --- slow and stalled servers -------------------------------------------------------------------

#: Short client timeouts for the slow-server tests: a load gets 4 s to answer (then as long again
#: to land, see `_lifecycle._settle`), everything else 2 s.
SHORT = ClientTimeouts(connect=2.0, read=2.0, load=4.0, unload=2.0)


def short(config: ProviderConfig) -> LoRAAdapterProvider:
    provider = LoRAAdapterProvider()
    provider._config = dataclasses.replace(config, timeouts=SHORT)
    return provider


def arm(url: str, fault: str) -> None:
    armed = emulator_post(url, "/_emulator/faults", {"faults": [fault]})
    assert armed.status_code < 300, armed.text


def adapter_props(namespace: str, name: str, path: str) -> dict[str, Any]:
    return {
        "adapter_name": name,
        "path": path,
        "inference_service": "llama",
        "namespace": namespace,
    }


@pytest.mark.parametrize(
    ("fault", "bound"),
    [
        # Held back 6 s, then loaded: past the 4 s load timeout, so the answer is never seen and
        # the adapter lands after the rollback's first unload found nothing. (Without the
        # timeout the create would succeed: its failure is the proof; no time bound.)
        ("/load_lora_adapter:stall=6", None),
        # Loaded at once, then the ~80-byte answer one byte every 0.5 s (≈40 s): no single read
        # waits past 2 s, only the per-request deadline ends it. Bound: well short of the ≈40 s
        # the drip takes, however slow the machine (the deadline is 4 s).
        ("/load_lora_adapter:drip=0.5,chunk=1", 25.0),
        # Loaded at once, then the status line and headers one byte every 0.5 s: httpx2's
        # per-read timeout never trips and no body chunk arrives to check a deadline against.
        ("/load_lora_adapter:drip=0.5,chunk=1,head", 25.0),
    ],
    ids=["stall", "drip", "drip-head"],
)
def test_a_slow_load_times_out_naming_the_pod_and_leaves_nothing(
    testbed: Testbed,
    namespace: str,
    isvc: InferenceServiceHandle,
    config: ProviderConfig,
    fault: str,
    bound: float | None,
) -> None:
    slow = isvc.ready_pods()[1]
    arm(slow.url, fault)
    start = time.monotonic()
    with pytest.raises(AdapterNotLoaded) as caught:
        short(config).create(adapter_props(namespace, "slow", testbed.make_adapter("slow")))
    took = time.monotonic() - start
    print(f"{fault}: create failed after {took:.2f} s: {caught.value}")
    assert bound is None or took < bound, f"the drip was waited out: {took:.1f} s"
    message = str(caught.value)
    assert f"pod {slow.name}" in message and "timed out" in message
    assert "loaded on 2/3 Ready pods" in message and len(message) < 2000
    assert get_adapter(testbed.client(), namespace, "slow") is None
    wait_until(
        lambda: "slow" in emulator_state(slow.url)["ever_loaded"],
        timeout=15,
        what="the late load to land on the slow pod",
    )
    assert all("slow" not in adapters for adapters in served(isvc).values())


def test_a_dropped_load_that_lands_late_is_rolled_back(
    testbed: Testbed,
    namespace: str,
    isvc: InferenceServiceHandle,
    config: ProviderConfig,
) -> None:
    """The connection drops before any answer and the server loads 2 s later (a proxy that lost
    the client but still forwards the request): the rollback's unload finds nothing yet, so the
    failed create watches that pod as it does after a timeout, and unloads the late load."""
    dropped = isvc.ready_pods()[1]
    arm(dropped.url, "/load_lora_adapter:drop,land=2")
    start = time.monotonic()
    with pytest.raises(AdapterNotLoaded) as caught:
        short(config).create(adapter_props(namespace, "late", testbed.make_adapter("late")))
    took = time.monotonic() - start
    print(f"dropped load landing late: create failed after {took:.2f} s: {caught.value}")
    message = str(caught.value)
    assert f"pod {dropped.name}" in message and "Server disconnected" in message
    assert "loaded on 2/3 Ready pods" in message
    assert get_adapter(testbed.client(), namespace, "late") is None
    assert "late" in emulator_state(dropped.url)["ever_loaded"]  # it did land, during the watch
    assert all("late" not in adapters for adapters in served(isvc).values())


def test_a_swap_whose_unload_times_out_is_rolled_back_and_said_so(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    """A swap whose unload times out on one pod is rolled back: the CR names the old path again,
    and the error says the truth about that pod: the rollback swaps it back rather than trusting
    what it lists meanwhile (SGLang queues that behind the late unload), and says the late call
    may still land (a request held before SGLang got it does); the next ``up`` heals it then."""
    provider = short(config)
    v1, v2 = testbed.make_adapter("swap-v1"), testbed.make_adapter("swap-v2")
    provider.create(adapter_props(namespace, "swap", v1))
    slow = isvc.ready_pods()[0]
    arm(slow.url, "/unload_lora_adapter:stall=4")
    start = time.monotonic()
    with pytest.raises(SwapRolledBack) as caught:
        provider.update(
            f"{namespace}/swap",
            adapter_props(namespace, "swap", v1),
            adapter_props(namespace, "swap", v2),
        )
    took = time.monotonic() - start
    print(f"swap with a stalled unload rolled back after {took:.2f} s: {caught.value}")
    assert took < 15
    message = str(caught.value)
    assert f"failed (pod {slow.name}: unloading the old path {v1!r}" in message
    assert "timed out" in message and f"rolled back to {v1!r}" in message
    names = ", ".join(sorted(p.name for p in isvc.ready_pods()))
    assert f"it serves again on {names}; on {slow.name} a call got no answer and may" in message
    stored = get_adapter(testbed.client(), namespace, "swap")
    assert stored is not None and stored["spec"]["path"] == v1
    # The stalled unload lands after the rollback's (this emulator does not queue a stalled
    # request behind the others): the slow pod serves nothing, the others v1 (never v2).
    expected = {pod.name: (None if pod.name == slow.name else v1) for pod in isvc.ready_pods()}
    wait_until(
        lambda: {pod: adapters.get("swap") for pod, adapters in served(isvc).items()} == expected,
        timeout=15,
        what="the stalled unload to land",
    )
    # The next update (the next `pulumi up`) heals it.
    healed = provider.update(
        f"{namespace}/swap",
        adapter_props(namespace, "swap", v1),
        adapter_props(namespace, "swap", v1),
    )
    assert healed.outs["loaded"]
    assert all(adapters.get("swap") == v1 for adapters in served(isvc).values())


def test_a_delete_whose_unload_times_out_keeps_the_cr_for_a_retry(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    provider = short(config)
    path = testbed.make_adapter("gone")
    props = adapter_props(namespace, "gone", path)
    provider.create(props)
    slow = isvc.ready_pods()[2]
    arm(slow.url, "/unload_lora_adapter:drip=0.5,chunk=1")
    start = time.monotonic()
    with pytest.raises(AdapterNotLoaded) as caught:
        provider.delete(f"{namespace}/gone", props)
    took = time.monotonic() - start
    print(f"delete with a dripping unload failed after {took:.2f} s: {caught.value}")
    assert took < 10
    message = str(caught.value)
    assert message.startswith("could not unload adapter 'gone'")
    assert f"pod {slow.name}" in message and "timed out" in message
    assert get_adapter(testbed.client(), namespace, "gone") is not None  # kept for the retry
    provider.delete(f"{namespace}/gone", props)  # the retry finds nothing left to unload
    assert get_adapter(testbed.client(), namespace, "gone") is None
    assert all("gone" not in adapters for adapters in served(isvc).values())
