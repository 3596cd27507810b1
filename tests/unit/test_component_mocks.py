"""Registration and pickling of the component and its dynamic child, under Pulumi's mocks."""

from __future__ import annotations

import base64
from typing import Any

import dill
import pulumi
import pytest

from pulumi_lora import TYPE_TOKEN, LoRAAdapter, LoRAAdapterArgs, LoRAAdapterProvider


class Recorder(pulumi.runtime.Mocks):
    """Records every registration; echoes inputs as outputs, as the engine's mocks do."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        outs = dict(args.inputs)
        if args.typ == "pulumi-python:dynamic:Resource":
            outs.update(loaded=True, cr_name="sql-lora", pods=[])
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


@pytest.fixture
def recorder() -> Recorder:
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    return mocks


@pulumi.runtime.test
def test_component_registers_one_dynamic_child_with_a_by_reference_provider(
    recorder: Recorder,
) -> pulumi.Output[Any]:
    sql = LoRAAdapter(
        "sql",
        LoRAAdapterArgs(
            adapter_name="sql-lora",
            path="/adapters/sql",
            inference_service="llama",
            namespace="models",
        ),
    )

    def check(values: list[Any]) -> None:
        loaded, cr_name = values
        assert loaded is True and cr_name == "sql-lora"
        types = [r.typ for r in recorder.resources]
        assert types == [TYPE_TOKEN, "pulumi-python:dynamic:Resource"]
        child = recorder.resources[1]
        assert child.inputs["adapter_name"] == "sql-lora"
        assert child.inputs["inference_service"] == "llama"
        pickled = base64.b64decode(child.inputs["__provider"])
        # By reference: module path + class name, not the source code of the class.
        assert b"pulumi_lora._provider" in pickled and b"LoRAAdapterProvider" in pickled
        assert len(pickled) < 2048
        provider = dill.loads(pickled)
        assert isinstance(provider, LoRAAdapterProvider)

    return pulumi.Output.all(sql.loaded, sql.cr_name).apply(check)
