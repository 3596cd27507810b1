"""The ``pulumi-lora.dev/`` annotations: written by ``AdapterArgs.annotations``, read back by the
one reader ``read_annotations`` (the loop and ``pulumi-lora status`` both use it)."""

from __future__ import annotations

import pytest

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._readback import AdapterNotes, read_annotations
from pulumi_lora._models import ANNOTATION_API_KEY_SECRET, ANNOTATION_POLICY, Policy, Transport


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
