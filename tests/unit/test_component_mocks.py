"""Registration and pickling of ``LoRAAdapter`` (one resource) and of the component served to other
languages (a component and its dynamic child), under Pulumi's mocks."""

from __future__ import annotations

import asyncio
import base64
import pickle
from typing import Any

import dill
import pulumi
import pytest

from pulumi_lora import (
    RESOURCE_TYPE,
    TYPE_TOKEN,
    LoRAAdapter,
    LoRAAdapterArgs,
    LoRAAdapterProvider,
)
from pulumi_lora._pulumi._component import LoRAAdapter as LoRAAdapterComponent
from pulumi_lora._pulumi._resource import DYNAMIC_TYPE


class Recorder(pulumi.runtime.Mocks):
    """Records every registration; echoes inputs as outputs, as the engine's mocks do."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        outs = dict(args.inputs)
        if args.typ in (RESOURCE_TYPE, DYNAMIC_TYPE):
            outs.update(loaded=True, cr_name="sql-lora", pods=[])
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


@pytest.fixture
def recorder() -> Recorder:
    # set_mocks registers the root stack on the current event loop, and a test run before this
    # one in the same worker (any asyncio.run) leaves the main thread without one. The loop stays
    # current afterwards: the mocks' last RPCs are still queued on it.
    asyncio.set_event_loop(asyncio.new_event_loop())
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    return mocks


SQL = LoRAAdapterArgs(
    adapter_name="sql-lora", path="/adapters/sql", inference_service="llama", namespace="models"
)


def assert_by_reference(resource: pulumi.runtime.MockResourceArgs) -> None:
    """The dynamic resource's inputs and its provider, pickled by reference."""
    assert resource.inputs["adapter_name"] == "sql-lora"
    assert resource.inputs["inference_service"] == "llama"
    pickled = base64.b64decode(resource.inputs["__provider"])
    # By reference: module path + class name, not the source code of the class.
    assert b"pulumi_lora._provider" in pickled and b"LoRAAdapterProvider" in pickled
    assert len(pickled) < 2048
    provider = dill.loads(pickled)
    assert isinstance(provider, LoRAAdapterProvider)


@pulumi.runtime.test
def test_an_adapter_is_one_resource_of_its_own_type(recorder: Recorder) -> pulumi.Output[Any]:
    sql = LoRAAdapter("sql", SQL)

    def check(values: list[Any]) -> None:
        loaded, cr_name, urn = values
        assert loaded is True and cr_name == "sql-lora"
        assert [r.typ for r in recorder.resources] == [RESOURCE_TYPE]
        assert urn.endswith(f"{RESOURCE_TYPE}::sql")
        assert_by_reference(recorder.resources[0])

    return pulumi.Output.all(sql.loaded, sql.cr_name, sql.urn).apply(check)


@pulumi.runtime.test
def test_an_adapter_is_aliased_to_the_child_of_the_component_it_was(
    recorder: Recorder,
) -> pulumi.Output[Any]:
    """Stacks made when ``LoRAAdapter`` was a component keep their state (tested on the real
    engine in tests/e2e/test_one_resource.py); here, the alias's URN for both parents."""
    holder = pulumi.ComponentResource("acme:index:Team", "team")
    top = LoRAAdapter("sql", SQL)
    nested = LoRAAdapter("sql", SQL, pulumi.ResourceOptions(parent=holder))
    stack = f"{pulumi.get_stack()}::{pulumi.get_project()}"

    def check(values: list[Any]) -> None:
        top_alias, nested_alias, holder_urn = values
        # A top-level component's URN has no parent type; a nested one's has its parent's types.
        assert top_alias == (
            f"urn:pulumi:{stack}::pulumi-lora:index:LoRAAdapter$pulumi-python:dynamic:Resource::sql"
        )
        holder_types = holder_urn.rsplit("::", 1)[0]
        assert nested_alias == (
            f"{holder_types}$pulumi-lora:index:LoRAAdapter$pulumi-python:dynamic:Resource::sql"
        )

    def alias_urn(adapter: LoRAAdapter) -> pulumi.Output[str]:
        (alias,) = adapter._aliases  # the one alias the constructor adds
        return alias

    return pulumi.Output.all(alias_urn(top), alias_urn(nested), holder.urn).apply(check)


@pulumi.runtime.test
def test_the_component_registers_one_dynamic_child_with_a_by_reference_provider(
    recorder: Recorder,
) -> pulumi.Output[Any]:
    sql = LoRAAdapterComponent("sql", SQL)

    def check(values: list[Any]) -> None:
        loaded, cr_name = values
        assert loaded is True and cr_name == "sql-lora"
        assert [r.typ for r in recorder.resources] == [TYPE_TOKEN, DYNAMIC_TYPE]
        assert_by_reference(recorder.resources[1])

    return pulumi.Output.all(sql.loaded, sql.cr_name).apply(check)


def test_a_long_lived_process_can_make_any_number_of_dynamic_children(recorder: Recorder) -> None:
    """pulumi.dynamic leaves one pickler wrapper behind per dynamic resource; we remove it.

    Without that, an Automation API process fails with RecursionError after ~480 LoRAAdapters
    (seen in the chaos run); the serialized provider must stay the same every time.
    """
    from pulumi.dynamic.dynamic import serialize_provider  # noqa: PLC0415

    from pulumi_lora._pulumi._resource import unwrap_sorted_batch_setitems  # noqa: PLC0415

    provider = LoRAAdapterProvider()
    first = serialize_provider(provider)
    for _ in range(50):  # wrappers left behind by dynamic resources made before ours
        serialize_provider(provider)
    for index in range(600):  # each serializes its provider synchronously, in __init__
        LoRAAdapter(
            f"a{index}",
            LoRAAdapterArgs(
                adapter_name=f"a{index}", path="/adapters/a", inference_service="llama"
            ),
        )
    assert pickle._Pickler._batch_setitems.__name__ == "_batch_setitems"  # depth back to one
    assert serialize_provider(provider) == first  # sorting still applies: deterministic
    unwrap_sorted_batch_setitems()


class ReadRecorder(Recorder):
    """Also records reads (``LoRAAdapter.get``): the mocks route them to ``new_resource`` with
    the ID set."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        outs = {"adapter_name": "sql-lora", "namespace": "models", "loaded": True}
        return str(args.resource_id), outs


@pulumi.runtime.test
def test_get_reads_an_adapter_by_its_id_and_declares_nothing() -> pulumi.Output[Any]:
    asyncio.set_event_loop(asyncio.new_event_loop())
    mocks = ReadRecorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    found = LoRAAdapter.get("existing", "models/sql-lora")

    def check(values: list[Any]) -> None:
        id_, loaded = values
        assert (id_, loaded) == ("models/sql-lora", True)
        (read,) = mocks.resources
        assert (read.typ, read.name) == (RESOURCE_TYPE, "existing")
        assert read.resource_id == "models/sql-lora"
        # no argument of its own: the provider reads the CR's declaration (nothing written)
        assert not {k for k, v in read.inputs.items() if v is not None} - {"__provider"}
        assert_by_reference_only(read)

    return pulumi.Output.all(found.id, found.loaded).apply(check)


def assert_by_reference_only(resource: pulumi.runtime.MockResourceArgs) -> None:
    provider = dill.loads(base64.b64decode(resource.inputs["__provider"]))
    assert isinstance(provider, LoRAAdapterProvider)
