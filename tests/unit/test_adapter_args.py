"""``LoRAAdapter``'s two call forms and ``LoRAAdapterArgs``: a typo fails where it is made.

As in Pulumi's own SDKs, an adapter takes an args object or its arguments as keywords, not
both. A TypedDict checks nothing at run time, so ``namespce=`` used to vanish and the CR landed
in ``default``; now every unknown or missing argument is a ``TypeError`` naming the valid ones.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pulumi
import pytest

from pulumi_lora import RESOURCE_TYPE, LoRAAdapter, LoRAAdapterArgs

VALID = (
    "valid arguments: adapter_name, inference_service, inference_service_namespace, namespace, "
    "resource_name, kube_context, kubeconfig_path, path, source, digests, source_endpoint, "
    "volume_claim, pinned, readiness_policy, ready_timeout_seconds, transport, "
    "api_key_secret_name, api_key_secret_key, kubeconfig, smoke_test, max_unavailable, "
    "drain_seconds, adopt, allow_mutable, "
    "source_secret_name, "
    "source_service_account, source_public"
)
SQL: dict[str, Any] = {
    "adapter_name": "sql-lora",
    "path": "/adapters/sql",
    "inference_service": "llama",
    "namespace": "models",
}


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.inputs: dict[str, dict[str, Any]] = {}
        self.types: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.inputs[args.name] = dict(args.inputs)
        self.types.append(args.typ)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


@pytest.fixture
def recorder() -> Recorder:
    asyncio.set_event_loop(asyncio.new_event_loop())  # see test_component_mocks.recorder
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    return mocks


def declared(recorder: Recorder, name: str) -> dict[str, Any]:
    """The inputs registered for ``name``, without the provider and the output placeholders."""
    return {k: v for k, v in recorder.inputs[name].items() if k in SQL or k == "pinned"}


@pulumi.runtime.test
def test_keyword_form_declares_what_the_args_form_declares(
    recorder: Recorder,
) -> pulumi.Output[Any]:
    by_args = LoRAAdapter("by-args", LoRAAdapterArgs(**SQL, pinned=True))
    by_dict = LoRAAdapter("by-dict", args={**SQL, "pinned": True})
    by_keywords = LoRAAdapter("by-keywords", **SQL, pinned=True)
    with_opts = LoRAAdapter("with-opts", pulumi.ResourceOptions(protect=False), **SQL)

    def check(_: object) -> None:
        assert recorder.types == [RESOURCE_TYPE] * 4
        expected = {**SQL, "pinned": True}
        assert declared(recorder, "by-args") == expected
        assert declared(recorder, "by-dict") == expected
        assert declared(recorder, "by-keywords") == expected
        assert declared(recorder, "with-opts") == SQL

    return pulumi.Output.all(by_args.urn, by_dict.urn, by_keywords.urn, with_opts.urn).apply(check)


@pulumi.runtime.test
def test_every_input_reads_back_set_or_not(recorder: Recorder) -> pulumi.Output[Any]:
    """A program reads any input off the resource, given or left unset (an unset one, never
    declared to the engine, is None); a misspelt attribute is still an AttributeError."""
    adapter = LoRAAdapter("reads", **SQL, pinned=True)
    with pytest.raises(AttributeError, match="nmespace"):
        adapter.nmespace  # type: ignore[attr-defined]  # noqa: B018

    def check(values: list[Any]) -> None:
        assert set(recorder.inputs["reads"]) >= {*SQL, "pinned"}
        assert "transport" not in vars(adapter)  # not declared: no Output made for it
        assert values == ["models", True, None, None]

    return pulumi.Output.all(
        adapter.namespace,
        adapter.pinned,  # type: ignore[attr-defined]
        adapter.transport,  # type: ignore[attr-defined]
        adapter.kube_context,  # type: ignore[attr-defined]
    ).apply(check)


def test_a_typo_in_the_args_object_fails_listing_the_valid_arguments() -> None:
    with pytest.raises(TypeError) as caught:
        LoRAAdapterArgs(  # type: ignore[typeddict-unknown-key]
            adapter_name="sql-lora", path="/adapters/sql", inference_service="llama", namespce="x"
        )
    assert str(caught.value) == f"LoRAAdapterArgs got unknown argument(s) 'namespce'; {VALID}"


def test_a_typo_in_the_keyword_form_fails_listing_the_valid_arguments() -> None:
    with pytest.raises(TypeError) as caught:
        LoRAAdapter("sql", **SQL, namespce="models", pined=True)
    assert str(caught.value) == f"LoRAAdapter got unknown argument(s) 'namespce', 'pined'; {VALID}"


def test_a_typo_in_a_plain_dict_fails_too() -> None:
    with pytest.raises(TypeError, match=r"^LoRAAdapter got unknown argument\(s\) 'namespce'; "):
        LoRAAdapter(
            "sql", {"adapter_name": "a", "path": "/p", "inference_service": "s", "namespce": "m"}
        )


def test_a_missing_required_argument_is_named() -> None:
    with pytest.raises(TypeError) as caught:
        LoRAAdapterArgs(adapter_name="sql-lora", namespace="models")  # type: ignore[typeddict-item]
    assert str(caught.value) == (
        "LoRAAdapterArgs is missing required argument(s) 'inference_service', 'path' (or "
        "'source'); required: adapter_name, inference_service, and path or source"
    )


def test_path_and_source_together_are_refused_in_the_program() -> None:
    with pytest.raises(TypeError, match=r"path .* or source .*, not both"):
        LoRAAdapterArgs(**SQL, source="hf://acme/sql-lora@" + "0" * 40)
    staged = {k: v for k, v in SQL.items() if k != "path"}
    assert LoRAAdapterArgs(**staged, source="hf://acme/sql-lora@" + "0" * 40)["source"]


def test_args_and_keywords_together_are_refused() -> None:
    with pytest.raises(TypeError) as caught:
        LoRAAdapter("sql", LoRAAdapterArgs(**SQL), namespace="other")  # type: ignore[call-overload]
    assert str(caught.value) == (
        "LoRAAdapter takes an args object or keyword arguments, not both; got args and namespace="
    )
    with pytest.raises(TypeError, match="not both; got args and path="):
        LoRAAdapter("sql", args=SQL, path="/elsewhere")  # type: ignore[call-overload]


def test_opts_must_be_resource_options() -> None:
    with pytest.raises(TypeError, match=r"LoRAAdapter's opts must be pulumi\.ResourceOptions"):
        LoRAAdapter("sql", SQL, {"protect": True})  # type: ignore[call-overload]
