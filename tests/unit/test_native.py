"""The provider ``provider/`` serves (``pulumi_lora._pulumi._native``): the translation between the
engine's camelCase property values and ``LoRAAdapterProvider``'s plain dicts, and what an
import reads off a CR. No cluster: the operations themselves are tested elsewhere; the real
engine runs this provider in ``tests/cli/``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pulumi.provider.experimental import provider as rpc
from pulumi.provider.experimental.property_value import Computed, PropertyValue

from pulumi_lora._core._readback import declared_by_cr
from pulumi_lora._pulumi import _native
from pulumi_lora._pulumi._properties import UNKNOWN


def value(plain: Any, secret: bool = False) -> PropertyValue:
    return _native.wrapped(plain).with_secret(secret)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def served() -> _native.NativeProvider:
    return _native.NativeProvider("0.0.0")


def test_properties_cross_in_snake_case_and_back_in_camel_case() -> None:
    given = {
        "adapterName": value("sql-lora"),
        "readyTimeoutSeconds": value(30),
        "kubeconfigPath": value("/k", secret=True),
        "__provider": value("pickled"),  # a dynamic resource's key: not the schema's
    }
    props = _native.props_in(given)
    assert props == {
        "adapter_name": "sql-lora",
        "ready_timeout_seconds": 30.0,
        "kubeconfig_path": "/k",
    }
    secret = _native.secret_keys(given)
    assert secret == {"kubeconfig_path"}
    out = _native.props_out(
        {**props, "cr_uid": "u-1", "pods": [{"pod": "p", "loaded": True}]}, secret
    )
    assert out["kubeconfigPath"].is_secret  # a secret input stays secret as an output
    assert not out["adapterName"].is_secret
    assert out["crUid"].value == "u-1"
    assert _native.plain(out["pods"]) == [{"pod": "p", "loaded": True}]


def test_unknowns_reach_the_core_as_the_engines_placeholder() -> None:
    assert _native.props_in({"path": PropertyValue(Computed())}) == {"path": UNKNOWN}


def test_config_variables_become_the_keys_the_core_reads() -> None:
    variables = {
        "pulumi-lora:config:kubeconfig": "/k",
        "pulumi-lora:config:sglangApiKey": "s3cret",
        "kubernetes:config:context": "other",
    }
    assert _native.config_values(variables) == {
        "pulumi-lora:kubeconfig": "/k",
        "pulumi-lora:sglangApiKey": "s3cret",
    }


def test_check_names_failures_in_the_schemas_spelling(served: _native.NativeProvider) -> None:
    request = rpc.CheckRequest(
        "urn:pulumi:dev::p::pulumi-lora:index:LoRAAdapter::sql",
        {},
        {"adapterName": value("-bad"), "path": value("/a"), "inferenceService": value("llama")},
        b"",
    )
    result = run(served.check(request))
    assert [f.property for f in result.failures or []] == ["adapterName"]
    assert "adapter_name '-bad'" in (result.failures or [])[0].reason


def test_config_changes_never_replace_adapters(served: _native.NativeProvider) -> None:
    request = rpc.DiffRequest(
        "urn", "id", {"loadTimeoutSeconds": value("300")}, {"loadTimeoutSeconds": value("600")}, []
    )
    result = run(served.diff_config(request))
    assert result.changes is True
    assert result.replaces == []


def test_an_input_change_is_named_on_the_step(served: _native.NativeProvider) -> None:
    """``[diff: ~path]``: the moved inputs, with defaults applied on both sides (a program
    that spells out a default is not a change)."""
    olds = {
        "adapterName": value("sql-lora"),
        "path": value("/adapters/a"),
        "inferenceService": value("llama"),
        "namespace": value("models"),
        "pods": value([]),
    }
    news = {**olds, "path": value("/adapters/b"), "pinned": value(False)}
    news.pop("pods")
    result = run(served.diff(rpc.DiffRequest("urn", "models/sql-lora", olds, news, [])))
    assert result.changes is True
    assert result.diffs == ["path"]
    assert result.replaces == []
    renamed = {**news, "adapterName": value("chat-lora")}
    result = run(served.diff(rpc.DiffRequest("urn", "models/sql-lora", olds, renamed, [])))
    assert result.replaces == ["adapterName"]
    assert result.detailed_diff["adapterName"].kind is rpc.PropertyDiffKind.UPDATE_REPLACE


def test_a_kubectl_made_cr_declares_its_spec_and_nothing_else() -> None:
    cr = {
        "metadata": {"name": "sql-lora", "namespace": "models"},
        "spec": {
            "name": "sql-lora",
            "path": "/adapters/sql-lora",
            "inferenceServiceRef": {"name": "llama"},
        },
    }
    assert declared_by_cr(cr) == {
        "adapter_name": "sql-lora",
        "path": "/adapters/sql-lora",
        "inference_service": "llama",
        "namespace": "models",
    }


def test_a_pulumi_lora_cr_declares_its_recorded_settings() -> None:
    cr = {
        "metadata": {
            "name": "sql",
            "namespace": "models",
            "annotations": {
                "pulumi-lora.dev/managed-by": "pulumi",
                "pulumi-lora.dev/pinned": "true",
                "pulumi-lora.dev/transport": "direct",
                "pulumi-lora.dev/readiness-policy": "AnyReadyPod",
                "pulumi-lora.dev/api-key-secret": "sglang/token",
            },
        },
        "spec": {
            "name": "sql-lora",
            "path": "/adapters/sql-lora",
            "inferenceServiceRef": {"name": "llama", "namespace": "serving"},
        },
    }
    assert declared_by_cr(cr) == {
        "adapter_name": "sql-lora",
        "path": "/adapters/sql-lora",
        "inference_service": "llama",
        "namespace": "models",
        "inference_service_namespace": "serving",
        "resource_name": "sql",
        "pinned": True,
        "readiness_policy": "AnyReadyPod",
        "api_key_secret_name": "sglang",
        "api_key_secret_key": "token",
    }


def test_an_import_id_that_is_not_namespace_slash_name_says_so(
    served: _native.NativeProvider,
) -> None:
    request = rpc.ReadRequest("urn", "sql-lora", {}, {})
    with pytest.raises(Exception, match=r"the ID of a LoRAAdapter is NAMESPACE/NAME"):
        run(served.read(request))
