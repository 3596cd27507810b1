"""A kubeconfig is a credential wherever it goes (issue 53): ``check`` never quotes it, an
object (pulumi-eks' ``Cluster.kubeconfig``) is content, and the checked inputs keep one form.

The value of a credential-bearing input reached ``pulumi preview``'s output and CI logs through
a CheckFailure that quoted it ("kubeconfig {'apiVersion': ... 'token': ...}: Input should be a
valid string"). What ``check`` says is asserted here, as the engine prints it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from pulumi_lora._args import AdapterArgs
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._pulumi._calls import CALLS

TOKEN = "SUPER-SECRET-TOKEN-5f1d2c"  # made up: no message may show it
EKS_KUBECONFIG: dict[str, Any] = {  # the shape pulumi-eks' Cluster.kubeconfig has
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "eks", "cluster": {"server": "https://127.0.0.1:1"}}],
    "contexts": [{"name": "aws", "context": {"cluster": "eks", "user": "aws"}}],
    "current-context": "aws",
    "users": [{"name": "aws", "user": {"token": TOKEN}}],
}
DECLARED = {"adapter_name": "sql", "path": "/adapters/sql", "inference_service": "llama"}


def said(failures: list[Any]) -> str:
    """Everything check's failures print (property and reason), as one text."""
    return "\n".join(f"{f.property}: {f.reason}" for f in failures)


def test_a_kubeconfig_object_is_accepted_as_content() -> None:
    checked = CALLS.check(ProviderConfig(), {}, {**DECLARED, "kubeconfig": EKS_KUBECONFIG})
    assert checked.failures == []
    text = checked.inputs["kubeconfig"]
    assert isinstance(text, str) and json.loads(text) == EKS_KUBECONFIG  # one form in the state
    args = AdapterArgs.parse(checked.inputs)
    loaded = KubeSource(args.kubeconfig).load()  # the provider reads it as kubeconfig content
    assert loaded.cluster.server == "https://127.0.0.1:1"


def test_parse_takes_the_object_too() -> None:
    args = AdapterArgs.parse({**DECLARED, "kubeconfig": EKS_KUBECONFIG})
    assert yaml.safe_load(args.kubeconfig or "") == EKS_KUBECONFIG
    assert TOKEN not in repr(args)


@pytest.mark.parametrize(
    "bad",
    [
        [EKS_KUBECONFIG],  # a list of them
        42,
        True,
    ],
    ids=["list", "number", "bool"],
)
def test_a_kubeconfig_of_a_bad_type_is_named_not_quoted(bad: Any) -> None:
    checked = CALLS.check(ProviderConfig(), {}, {**DECLARED, "kubeconfig": bad})
    text = said(checked.failures)
    assert [f.property for f in checked.failures] == ["kubeconfig"]
    assert "Input should be a valid string" in text
    assert "its value is not shown: it holds credentials" in text
    assert TOKEN not in text and "42" not in text


def test_a_misspelt_credential_input_is_not_quoted() -> None:
    found = AdapterArgs.failures({**DECLARED, "kube_config": EKS_KUBECONFIG})
    assert found == [("kube_config", "kube_config: Extra inputs are not permitted")]


def test_other_inputs_are_still_quoted() -> None:
    checked = CALLS.check(ProviderConfig(), {}, {**DECLARED, "namespace": "Not_A_Name"})
    assert "namespace 'Not_A_Name': String should match pattern" in said(checked.failures)
