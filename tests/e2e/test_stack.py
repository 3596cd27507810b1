"""End to end on the real engine and the real apiserver: `pulumi up`, updates, destroy (drift
and its heal: ``test_drift_words.py``).

Every scenario runs an Automation API inline program that declares ``LoRAAdapter`` components,
against a multi-replica InferenceService whose pods are emulated SGLang servers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pulumi
import pytest
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import drift_report, keyed_service, served

Declared = dict[str, dict[str, Any]]


def program_of(declared: Declared) -> Callable[[], None]:
    """An inline program declaring whatever ``declared`` holds when it runs."""

    def program() -> None:
        for name, args in declared.items():
            adapter = LoRAAdapter(name, LoRAAdapterArgs(**args))  # type: ignore[typeddict-item]
            pulumi.export(f"{name}_loaded", adapter.loaded)
            pulumi.export(f"{name}_pods", adapter.pods)

    return program


def stack_for(engine: LocalEngine, testbed: Testbed, declared: Declared, name: str) -> auto.Stack:
    stack = engine.inline_stack("lora-e2e", name, program_of(declared))
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    return stack


def everywhere(handle: InferenceServiceHandle, name: str, path: str) -> bool:
    return all(adapters.get(name) == path for adapters in served(handle).values())


def nowhere(handle: InferenceServiceHandle, name: str) -> bool:
    return all(name not in adapters for adapters in served(handle).values())


def test_path_swap_rename_and_retarget(
    engine: LocalEngine, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    other = testbed.deploy_inference_service(namespace, "mistral", replicas=2)
    other.wait_ready(timeout=30)
    v1, v2 = testbed.make_adapter("chat-v1"), testbed.make_adapter("chat-v2")
    args = {
        "adapter_name": "chat",
        "path": v1,
        "inference_service": "llama",
        "namespace": namespace,
        "resource_name": "chat",
    }
    declared = {"chat": args}
    stack = stack_for(engine, testbed, declared, "swap")
    stack.up()
    assert everywhere(isvc, "chat", v1)

    args["path"] = v2  # in place: a swap on every pod, never a duplicate-name error
    swapped = stack.up()
    assert swapped.summary.resource_changes.get("update") == 1
    assert everywhere(isvc, "chat", v2)

    args["adapter_name"] = "chat-two"  # a replace: the old name is unloaded first
    renamed = stack.up()
    assert renamed.summary.resource_changes.get("replace") == 1
    assert nowhere(isvc, "chat") and everywhere(isvc, "chat-two", v2)

    args["inference_service"] = "mistral"  # retarget: the old target is cleaned
    stack.up()
    assert nowhere(isvc, "chat-two") and everywhere(other, "chat-two", v2)

    stack.destroy()
    assert nowhere(other, "chat-two")
    assert get_adapter(testbed.client(), namespace, "chat") is None


def test_bad_input_fails_before_the_cluster(
    engine: LocalEngine, testbed: Testbed, namespace: str
) -> None:
    declared = {
        "bad": {
            "adapter_name": "-nope",
            "path": "",
            "inference_service": "llama",
            "namespace": namespace,
        }
    }
    stack = stack_for(engine, testbed, declared, "bad")
    with pytest.raises(auto.errors.CommandError) as caught:
        stack.up()
    text = str(caught.value)
    assert "adapter_name '-nope': String should match pattern" in text
    assert "path '': String should have at least 1 character" in text
    assert get_adapter(testbed.client(), namespace, "nope") is None


def test_api_key_from_a_secret_never_reaches_state_logs_or_status(
    engine: LocalEngine, testbed: Testbed, namespace: str
) -> None:
    key = "sk-e2e-" + base64.b16encode(namespace.encode()).decode()[:16]
    keyed_service(testbed, namespace, "keyed", key)
    path = testbed.make_adapter("keyed-adapter")
    declared = {
        "keyed": {
            "adapter_name": "keyed",
            "path": path,
            "inference_service": "keyed",
            "namespace": namespace,
            "api_key_secret_name": "sglang-key",
        }
    }
    stack = stack_for(engine, testbed, declared, "keyed")
    log: list[str] = []
    up = stack.up(on_output=log.append, log_verbosity=9, log_flow=True)
    assert up.outputs["keyed_loaded"].value is True
    state = json.dumps(stack.export_stack().deployment)
    stored = json.dumps(get_adapter(testbed.client(), namespace, "keyed"))
    assert key not in state and key not in "".join(log) and key not in stored
    assert "sglang-key/api-key" in stored  # the reference travels, the value never does
    stack.destroy(on_output=log.append)
    assert key not in "".join(log)


def test_proxy_transport_reaches_pods_through_the_apiserver(
    engine: LocalEngine, testbed: Testbed, namespace: str, netns_required: None
) -> None:
    handle = testbed.deploy_inference_service(namespace, "netpods", replicas=2, network="netns")
    handle.wait_ready(timeout=30)
    path = testbed.make_adapter("proxied")
    declared = {
        "proxied": {
            "adapter_name": "proxied",
            "path": path,
            "inference_service": "netpods",
            "namespace": namespace,
            "transport": "proxy",
        }
    }
    stack = stack_for(engine, testbed, declared, "proxy")
    up = stack.up()
    assert up.outputs["proxied_loaded"].value is True
    assert everywhere(handle, "proxied", path)
    assert drift_report(stack) is None
    stack.destroy()
    assert nowhere(handle, "proxied")
