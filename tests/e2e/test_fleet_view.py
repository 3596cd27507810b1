"""A fleet's operations share one look at the target, and the sharing hides no drift.

On the real engine: a refresh of many adapters lists the target's pods once per look (not once
per adapter), drift made out of band before a command is seen by it, and this process's own
loads retire the looks they make stale.
"""

from __future__ import annotations

import time
from typing import Any

import pulumi
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._lifecycle import LOOK_MAX_AGE_SECONDS, ProviderConfig
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import AuditCounter, drift_report, drift_seen, emulator_post, served

ADAPTERS = 10


def fleet_stack(engine: LocalEngine, testbed: Testbed, namespace: str) -> auto.Stack:
    paths = [testbed.make_adapter(f"fleet-{i}") for i in range(ADAPTERS)]

    def program() -> None:
        for i, path in enumerate(paths):
            adapter = LoRAAdapter(
                f"a{i}",
                LoRAAdapterArgs(
                    adapter_name=f"fleet-{i}",
                    path=path,
                    inference_service="llama",
                    namespace=namespace,
                ),
            )
            pulumi.export(f"a{i}_loaded", adapter.loaded)

    stack = engine.inline_stack("lora-fleet", "fleet", program)
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    return stack


def test_a_fleet_refresh_shares_its_look_and_drift_is_still_seen(
    engine: LocalEngine, testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    stack = fleet_stack(engine, testbed, namespace)
    assert stack.up().summary.resource_changes == {"create": 1 + ADAPTERS}

    audit = AuditCounter(testbed.audit_log_path, namespace)
    start = time.monotonic()
    stack.refresh()
    looks_allowed = 1 + int((time.monotonic() - start) / LOOK_MAX_AGE_SECONDS)
    # The CRs come from one listing of the cluster's CRs per look, not a read per adapter.
    assert audit.count("get", "loraadapters") == 0
    listings = audit.count("list", "loraadapters", cluster_wide=True)
    assert 1 <= listings <= min(looks_allowed, ADAPTERS - 1)
    for verb, resource in (("list", "pods"), ("get", "inferenceservices")):
        assert 1 <= audit.count(verb, resource) <= min(looks_allowed, ADAPTERS - 1)

    # preview --refresh: each diff trusts the refresh's read of its adapter, made in the same
    # command by the same provider process (no own load since): the reads' listings only.
    audit = AuditCounter(testbed.audit_log_path, namespace)
    start = time.monotonic()
    assert drift_report(stack) is None
    looks_allowed = 1 + int((time.monotonic() - start) / LOOK_MAX_AGE_SECONDS)
    assert audit.count("get", "loraadapters") == 0
    assert 1 <= audit.count("list", "loraadapters", cluster_wide=True) <= looks_allowed

    # Drift made just before a command is seen by it: an unload on one pod, a restart of another.
    first, second = isvc.ready_pods()[:2]
    emulator_post(first.url, "/unload_lora_adapter", {"lora_name": "fleet-3"})
    assert drift_seen(stack)
    testbed.restart_pod(namespace, second.name)
    isvc.wait_ready(timeout=30)
    assert drift_seen(stack)
    healed = stack.up().summary.resource_changes or {}
    assert healed.get(auto.OpType.UPDATE) == ADAPTERS
    assert all(len(adapters) == ADAPTERS for adapters in served(isvc).values())
    assert drift_report(stack) is None
    stack.destroy()


def props(namespace: str, name: str, path: str) -> dict[str, Any]:
    return {
        "adapter_name": name,
        "path": path,
        "inference_service": "llama",
        "namespace": namespace,
    }


def test_own_loads_retire_the_shared_look(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, config: ProviderConfig
) -> None:
    """A look taken before this process loaded an adapter must not make its diff see drift."""
    p = LoRAAdapterProvider()
    p._config = config
    first = p.create(props(namespace, "look-a", testbed.make_adapter("look-a")))
    first_outs = first.outs or {}
    looked = p.read(first.id, first_outs).outs or {}  # the look now shared
    assert all(pod["loaded"] for pod in looked["pods"])
    path_b = testbed.make_adapter("look-b")
    second = p.create(props(namespace, "look-b", path_b))
    second_outs = second.outs or {}
    assert not p.diff(second.id, second_outs, props(namespace, "look-b", path_b)).changes
    read = p.read(second.id, second_outs).outs or {}
    assert read["path"] == path_b
    assert all(pod["loaded"] and "path" not in pod for pod in read["pods"])
    p.delete(first.id, first_outs)
    p.delete(second.id, second_outs)
