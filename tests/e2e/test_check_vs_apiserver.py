"""Property tests: `check` never crashes, and it agrees with the real apiserver's validation.

Everything `check` accepts, the apiserver accepts (a server-side-apply dry run of the CR). What
`check` refuses while the apiserver would accept is only ever one of the project's deliberate,
documented rules (DNS-valid reference names), never an accident.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lightkube import ApiError, Client

from pulumi_lora._kube._objects import LoRAAdapterResource
from pulumi_lora._kube._source import SPEC_MANAGER
from pulumi_lora._models import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, PATH_PATTERN
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.testbed import Testbed

DELIBERATE = {
    "inference_service": DNS_SUBDOMAIN_PATTERN,
    "inference_service_namespace": DNS_LABEL_PATTERN,
    "path": PATH_PATTERN,
}

names = st.one_of(
    st.text(alphabet="abcXYZ019._-", min_size=0, max_size=70),
    st.text(min_size=0, max_size=10),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", fullmatch=True),
)
paths = st.one_of(
    st.just(""),
    st.text(min_size=0, max_size=40),
    st.text(alphabet=st.characters(max_codepoint=0xA0), max_size=5),
)
refs = st.one_of(
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
    st.text(alphabet="aZ_.-9 ", min_size=1, max_size=20),
)


def dry_run(client: Client, namespace: str, spec: dict[str, Any]) -> ApiError | None:
    """Server-side apply of the CR with dryRun=All: the apiserver's full validation, no write."""
    body = {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": spec,
    }
    try:
        client.apply(
            LoRAAdapterResource.from_dict(body),
            field_manager=SPEC_MANAGER,
            force=True,
            dry_run=True,
        )
    except ApiError as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def bed_client(testbed: Testbed) -> tuple[Client, str]:
    return testbed.client(), testbed.create_namespace("hypothesis")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(adapter_name=names, path=paths, isvc=refs, isvc_ns=st.one_of(st.none(), refs))
def test_check_agrees_with_the_apiserver(
    bed_client: tuple[Client, str], adapter_name: str, path: str, isvc: str, isvc_ns: str | None
) -> None:
    client, namespace = bed_client
    inputs: dict[str, Any] = {
        "adapter_name": adapter_name,
        "path": path,
        "inference_service": isvc,
        "namespace": namespace,
    }
    if isvc_ns is not None:
        inputs["inference_service_namespace"] = isvc_ns
    result = LoRAAdapterProvider().check({}, inputs)  # never raises, whatever the input
    refused = {f.property for f in result.failures}
    assert all(f.reason.startswith(f.property) for f in result.failures)  # names the field

    ref: dict[str, Any] = {"name": isvc}
    if isvc_ns is not None:
        ref["namespace"] = isvc_ns
    rejection = dry_run(
        client, namespace, {"name": adapter_name, "path": path, "inferenceServiceRef": ref}
    )
    if not refused:
        assert rejection is None, f"check accepted what the apiserver refused: {rejection}"
    elif rejection is None:
        # Only the deliberate rules may refuse what the apiserver accepts.
        assert refused <= set(DELIBERATE), refused
        for field in refused:
            assert not re.fullmatch(DELIBERATE[field], str(inputs[field]))


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=30),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(),
            st.text(max_size=30),
            st.lists(st.integers(), max_size=3),
            st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
        ),
        max_size=8,
    )
)
def test_check_never_crashes_on_arbitrary_shapes(inputs: dict[str, Any]) -> None:
    result = LoRAAdapterProvider().check({}, inputs)
    for failure in result.failures:
        assert failure.property and failure.reason.startswith(failure.property)
