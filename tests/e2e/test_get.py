"""``LoRAAdapter.get(name, id)``: an adapter another stack (or kubectl) made, read by its ID on
the real engine and apiserver: its outputs are the pods' truth, nothing is written (the
apiserver's audit log), no pod is asked to load or unload, and destroying the reading stack
leaves the CR and its loads in place."""

from __future__ import annotations

from pathlib import Path

import pulumi
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import AuditCounter, served

WRITES = ("create", "update", "patch", "delete")


def test_get_reads_an_adapter_and_its_stack_never_owns_it(
    engine: LocalEngine,
    testbed: Testbed,
    namespace: str,
    isvc: InferenceServiceHandle,
    tmp_path: Path,
) -> None:
    path = testbed.make_adapter("read-me")
    kubeconfig = auto.ConfigValue(str(testbed.kubeconfig_path))

    def owner() -> None:
        LoRAAdapter(
            "sql",
            LoRAAdapterArgs(
                adapter_name="read-me", path=path, inference_service="llama", namespace=namespace
            ),
        )

    def reader() -> None:
        found = LoRAAdapter.get("found", f"{namespace}/read-me")
        pulumi.export("loaded", found.loaded)
        pulumi.export("path", found.path)
        pulumi.export("pods", found.pods)

    made = engine.inline_stack("lora-owner", "owner", owner)
    made.set_config("pulumi-lora:kubeconfig", kubeconfig)
    made.up()
    try:
        reading = engine.inline_stack("lora-reader", "reader", reader)
        reading.set_config("pulumi-lora:kubeconfig", kubeconfig)
        audit = AuditCounter(testbed.audit_log_path, namespace)
        loads = {pod.name: pod for pod in isvc.ready_pods()}
        up = reading.up()
        assert up.outputs["loaded"].value is True
        assert up.outputs["path"].value == path
        assert sorted(p["pod"] for p in up.outputs["pods"].value if p["loaded"]) == sorted(loads)
        assert all(audit.count(verb, "loraadapters") == 0 for verb in WRITES)
        reading.destroy()
        assert all(audit.count(verb, "loraadapters") == 0 for verb in WRITES)
        assert all(adapters == {"read-me": path} for adapters in served(isvc).values())
    finally:
        made.destroy()
    assert all(not adapters for adapters in served(isvc).values())
