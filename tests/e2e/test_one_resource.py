"""Stacks made when ``LoRAAdapter`` was a component move to the one-resource ``LoRAAdapter``.

On the real engine and apiserver: the first ``up`` of the new program keeps every adapter's
state (no load, no CR write, no replacement) and drops only the empty components, for an
adapter at the top of the stack and one inside a user's own component; a user's resource
under an adapter keeps its state with the alias the README gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
from pulumi import automation as auto

from pulumi_lora import RESOURCE_TYPE, TYPE_TOKEN, LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._pulumi._component import LoRAAdapter as LoRAAdapterComponent
from pulumi_lora._pulumi._resource import DYNAMIC_TYPE
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.engine_probe import ProbeFile
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import AuditCounter, drift_report, served

WRITES = ("create", "update", "patch", "delete")


def types_in(stack: auto.Stack) -> list[str]:
    """The type of every resource in the stack's state but the stack and the default provider."""
    resources: list[dict[str, Any]] = stack.export_stack().deployment["resources"]
    return sorted(r["type"] for r in resources if not r["type"].startswith("pulumi:"))


def cr_uid(testbed: Testbed, namespace: str, name: str) -> str | None:
    """The CR's uid, or None when it does not exist."""
    cr = get_adapter(testbed.client(), namespace, name)
    return None if cr is None else str(cr["metadata"]["uid"])


def test_a_component_stack_moves_to_one_resource_without_touching_the_cluster(
    engine: LocalEngine,
    testbed: Testbed,
    namespace: str,
    isvc: InferenceServiceHandle,
    tmp_path: Path,
) -> None:
    paths = {name: testbed.make_adapter(f"moved-{name}") for name in ("top", "nested")}
    shape: dict[str, type[Any]] = {"adapter": LoRAAdapterComponent}  # what the program declares

    def program() -> None:
        team = pulumi.ComponentResource("acme:index:Team", "team")
        adapters = {}
        for name, parent in (("top", None), ("nested", team)):
            adapters[name] = adapter = shape["adapter"](
                "sql",  # the same name under two parents: the aliases must tell them apart
                LoRAAdapterArgs(
                    adapter_name=f"moved-{name}",
                    path=paths[name],
                    inference_service="llama",
                    namespace=namespace,
                ),
                pulumi.ResourceOptions(parent=parent),
            )
            pulumi.export(f"{name}_loaded_at", adapter.last_loaded_at)
        # A resource of the user's under the top adapter keeps its state through the alias the
        # README gives (a no-op while the adapter is still the component).
        top, was = adapters["top"], pulumi.create_urn("sql", TYPE_TOKEN)
        ProbeFile(
            "note",
            path=str(tmp_path / "note"),
            content="x",
            opts=pulumi.ResourceOptions(parent=top, aliases=[pulumi.Alias(parent=was)]),
        )

    stack = engine.inline_stack("lora-moved", "moved", program)
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    first = stack.up()
    assert types_in(stack) == sorted(
        ["acme:index:Team", *[TYPE_TOKEN, DYNAMIC_TYPE] * 2, DYNAMIC_TYPE]  # the last: the note
    )
    uids = {name: cr_uid(testbed, namespace, f"moved-{name}") for name in paths}
    assert all(uids.values())

    shape["adapter"] = LoRAAdapter
    audit = AuditCounter(testbed.audit_log_path, namespace)
    moved = stack.up()
    # The stack, the team, the two adapters and the note are the same; only the components go.
    assert moved.summary.resource_changes == {"same": 5, "delete": 2}
    assert types_in(stack) == sorted(
        ["acme:index:Team", RESOURCE_TYPE, RESOURCE_TYPE, DYNAMIC_TYPE]
    )
    assert all(audit.count(verb, "loraadapters") == 0 for verb in WRITES)
    for name in paths:  # not loaded again, the same CR
        key = f"{name}_loaded_at"
        assert moved.outputs[key].value == first.outputs[key].value is not None
        assert cr_uid(testbed, namespace, f"moved-{name}") == uids[name]
    expected = {f"moved-{name}": path for name, path in paths.items()}
    assert all(adapters == expected for adapters in served(isvc).values())
    assert drift_report(stack) is None

    stack.destroy()
    assert all(not adapters for adapters in served(isvc).values())
    assert all(cr_uid(testbed, namespace, f"moved-{n}") is None for n in paths)
