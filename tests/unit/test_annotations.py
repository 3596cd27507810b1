"""The ``pulumi-lora.dev/`` annotations: written by ``AdapterArgs.annotations``, read back by the
one reader ``read_annotations`` (the loop and ``pulumi-lora status`` both use it)."""

from __future__ import annotations

import re

import pytest

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._readback import AdapterNotes, declared_by_cr, read_annotations
from pulumi_lora._kube._admission import _PODS
from pulumi_lora._models import (
    ANNOTATION_API_KEY_SECRET,
    ANNOTATION_POLICY,
    ANNOTATION_SMOKE_TEST,
    MOST_UNAVAILABLE,
    Policy,
    Transport,
)


def test_what_is_written_reads_back() -> None:
    args = AdapterArgs(
        adapter_name="sql",
        path="/adapters/sql",
        inference_service="llama",
        pinned=True,
        readiness_policy=Policy.ANY_READY_POD,
        transport=Transport.PROXY,
        api_key_secret_name="sglang-key",
        api_key_secret_key="token",
    )
    assert read_annotations(args.annotations()) == AdapterNotes(
        managed=True,
        pinned=True,
        transport="proxy",
        readiness_policy=Policy.ANY_READY_POD,
        api_key_secret=("sglang-key", "token"),
    )


def test_a_cr_made_by_someone_else_reads_as_the_defaults() -> None:
    assert read_annotations(None) == AdapterNotes()
    assert read_annotations({}) == AdapterNotes(transport="direct")


@pytest.mark.parametrize("value", ["", "nokey", "/", "name/", "/key"])
def test_a_secret_reference_that_is_not_name_slash_key_is_no_key(value: str) -> None:
    assert read_annotations({ANNOTATION_API_KEY_SECRET: value}).api_key_secret is None


def test_an_unknown_policy_is_all_ready_pods() -> None:
    notes = read_annotations({ANNOTATION_POLICY: "MostPods"})
    assert notes.readiness_policy is Policy.ALL_READY_PODS


def test_smoke_test_false_is_written_and_read_back_and_true_is_the_absent_default() -> None:
    args = AdapterArgs(adapter_name="sql", path="/a", inference_service="llama", smoke_test=False)
    assert args.annotations()[ANNOTATION_SMOKE_TEST] == "false"
    assert read_annotations(args.annotations()).smoke_test is False
    unchanged = AdapterArgs(adapter_name="sql", path="/a", inference_service="llama")
    assert ANNOTATION_SMOKE_TEST not in unchanged.annotations()  # CRs made before stay as they are
    for value in (None, "true", "TRUE", "maybe", ""):
        notes = {} if value is None else {ANNOTATION_SMOKE_TEST: value}
        assert read_annotations(notes).smoke_test is True, value


def test_an_import_declares_smoke_test_only_when_off() -> None:
    cr = {
        "metadata": {"name": "sql", "namespace": "default", "annotations": {}},
        "spec": {"name": "sql", "path": "/a", "inferenceServiceRef": {"name": "llama"}},
    }
    assert "smoke_test" not in declared_by_cr(cr)
    cr["metadata"]["annotations"] = {ANNOTATION_SMOKE_TEST: "false"}
    assert declared_by_cr(cr)["smoke_test"] is False


def test_a_swaps_pace_is_written_only_when_not_the_default_and_read_back() -> None:
    base = {"adapter_name": "sql", "path": "/a", "inference_service": "llama"}
    assert "pulumi-lora.dev/max-unavailable" not in AdapterArgs(**base).annotations()
    assert "pulumi-lora.dev/drain-seconds" not in AdapterArgs(**base).annotations()
    notes = AdapterArgs(**base, max_unavailable=3, drain_seconds=0.5).annotations()
    assert notes["pulumi-lora.dev/max-unavailable"] == "3"
    assert notes["pulumi-lora.dev/drain-seconds"] == "0.5"
    read = read_annotations(notes)
    assert (read.max_unavailable, read.drain_seconds) == (3, 0.5)
    spec = {"name": "sql", "path": "/a", "inferenceServiceRef": {"name": "llama"}}
    cr = {"metadata": {"name": "sql", "namespace": "default", "annotations": notes}, "spec": spec}
    declared = declared_by_cr(cr)
    assert (declared["max_unavailable"], declared["drain_seconds"]) == (3, 0.5)
    assert (
        AdapterArgs(**base, drain_seconds=10).annotations()["pulumi-lora.dev/drain-seconds"] == "10"
    )


def test_a_pace_a_reader_does_not_understand_reads_as_the_default() -> None:
    for pods, seconds in (("0", "-1"), ("many", "soon"), ("5000", "601")):
        read = read_annotations(
            {"pulumi-lora.dev/max-unavailable": pods, "pulumi-lora.dev/drain-seconds": seconds}
        )
        assert (read.max_unavailable, read.drain_seconds) == (1, 2.0), (pods, seconds)


def test_the_admission_policy_admits_every_pace_the_inputs_take() -> None:
    """The ``adapter-annotations`` policy's pattern for ``max-unavailable`` spans the input's
    range (it stopped at 999, refusing a CR declared with ``max_unavailable=1000``)."""
    most = AdapterArgs(
        adapter_name="sql",
        path="/adapters/sql",
        inference_service="llama",
        max_unavailable=MOST_UNAVAILABLE,
    ).annotations()["pulumi-lora.dev/max-unavailable"]
    assert re.fullmatch(_PODS, most) and re.fullmatch(_PODS, "1")
    assert not re.fullmatch(_PODS, str(MOST_UNAVAILABLE + 1)) and not re.fullmatch(_PODS, "0")
