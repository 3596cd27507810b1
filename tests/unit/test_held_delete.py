"""The pure parts of a held delete (issue 31): the conditions a CR carries while a pod still
serves its adapter, the finalizer in the applied manifest, the ``NAMESPACE/NAME`` IDs, and
which pods may still serve an adapter the loop unloads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._conditions import unload_conditions
from pulumi_lora._core._llmkube import PodEndpoint, adapter_manifest
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._errors import ConfigurationError
from pulumi_lora._lifecycle._byid import split_id
from pulumi_lora._lifecycle._steps import deletion_refusal
from pulumi_lora._models import (
    LLMKUBE_FINALIZER,
    UNLOAD_FINALIZER,
    Condition,
    ConditionStatus,
    format_time,
)
from pulumi_lora._resync._decide import lease_left
from pulumi_lora._resync._held import is_held, may_serve

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def test_the_conditions_name_every_pod_that_still_serves_the_adapter() -> None:
    available = Condition(
        type="Available",
        status=ConditionStatus.TRUE,
        reason="InferenceServiceReady",
        message="",
        last_transition_time=NOW - timedelta(hours=1),
        observed_generation=1,
    )
    loaded_before = available.replace(type="Loaded", reason="AdapterLoaded")
    failed = [
        PodOutcome("llama-a", loaded=True, error="sglang answered 500"),
        PodOutcome("llama-b", loaded=True, error="timed out"),
    ]
    conditions = unload_conditions(
        failed, generation=2, previous=[available, loaded_before], now=NOW
    )
    got = {c.type: c for c in conditions}
    assert set(got) == {"Available", "Loaded", "Error", "Ready"}
    assert got["Available"] == available  # kept as it was
    error = got["Error"]
    assert (error.status, error.reason, error.observed_generation) == (
        ConditionStatus.TRUE,
        "UnloadUnsuccessful",
        2,
    )
    assert error.message == (
        "still served by 2 Ready pod(s) after a failed unload (pod llama-a: sglang answered 500; "
        f"pod llama-b: timed out); finalizer {UNLOAD_FINALIZER} holds the CR until every pod has "
        "unloaded it"
    )
    assert (got["Ready"].status, got["Ready"].reason) == (ConditionStatus.FALSE, "Deleting")
    # Loaded stays True (the adapter is still served): its transition time does not move.
    assert got["Loaded"].status is ConditionStatus.TRUE
    assert got["Loaded"].last_transition_time == NOW - timedelta(hours=1)


def test_only_a_delete_applies_the_finalizer() -> None:
    plain = adapter_manifest("models", "sql-lora", {"name": "sql-lora"}, {})
    assert "finalizers" not in plain["metadata"]
    held = adapter_manifest(
        "models", "sql-lora", {"name": "sql-lora"}, {}, finalizers=(UNLOAD_FINALIZER,)
    )
    assert held["metadata"]["finalizers"] == ["pulumi-lora.dev/unload"]


@pytest.mark.parametrize("bad", ["sql-lora", "/sql-lora", "models/", "a/b/c"])
def test_an_id_that_is_not_namespace_slash_name_says_how(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="the ID of a LoRAAdapter is NAMESPACE/NAME"):
        split_id(bad, "finish the deletion of")
    assert split_id("models/sql-lora", "import") == ("models", "sql-lora")


def test_the_loop_acts_for_a_held_delete_once_the_providers_lease_is_over() -> None:
    lease = timedelta(minutes=5)
    started = NOW - timedelta(minutes=2)
    assert lease_left(f"delete@{format_time(started)}", NOW, lease) == 180.0
    assert lease_left(f"delete@{format_time(NOW - lease)}", NOW, lease) == 0.0
    assert lease_left(f"delete@{format_time(NOW + timedelta(hours=1))}", NOW, lease) == 300.0
    for unknown in (None, "", "delete@yesterday", "delete"):
        assert lease_left(unknown, NOW, lease) == 0.0


def test_only_a_deleted_cr_with_pulumi_loras_finalizer_is_held() -> None:
    def cr(**meta: object) -> dict[str, object]:
        return {"metadata": {"name": "sql-lora", **meta}}

    deleting = "2026-12-05T09:00:00Z"
    assert is_held(cr(deletionTimestamp=deleting, finalizers=[UNLOAD_FINALIZER]))
    assert not is_held(cr(finalizers=[UNLOAD_FINALIZER]))  # not being deleted
    assert not is_held(cr(deletionTimestamp=deleting, finalizers=[LLMKUBE_FINALIZER]))
    assert not is_held(cr())


def _cr(**meta: object) -> dict[str, object]:
    return {"metadata": {"name": "sql-lora", "namespace": "models", **meta}}


def test_an_update_refuses_a_cr_that_a_failed_destroy_holds() -> None:
    args = AdapterArgs(
        adapter_name="sql-lora", path="/adapters/sql", inference_service="llama", namespace="models"
    )
    assert deletion_refusal(None, args) is None
    assert deletion_refusal(_cr(finalizers=[LLMKUBE_FINALIZER]), args) is None
    held = deletion_refusal(
        _cr(deletionTimestamp=format_time(NOW), finalizers=[UNLOAD_FINALIZER]), args
    )
    assert held is not None
    assert held.startswith(
        "LoRAAdapter models/sql-lora is being deleted: a failed `pulumi destroy`"
    )
    assert "`pulumi-lora finish-delete models/sql-lora`" in held
    other = deletion_refusal(
        _cr(deletionTimestamp=format_time(NOW), finalizers=[LLMKUBE_FINALIZER]), args
    )
    assert other == (
        "LoRAAdapter models/sql-lora is being deleted (finalizers "
        f"['{LLMKUBE_FINALIZER}']); `pulumi up` again once it is gone creates it anew"
    )


@pytest.mark.parametrize(
    ("ready", "state", "started_at", "serves"),
    [
        (True, "Running, Ready", "2026-12-05T08:00:00Z", True),
        (False, "Running, not Ready (ContainersNotReady)", "2026-12-05T08:00:00Z", True),
        (False, "Running, terminating", "2026-12-05T08:00:00Z", True),
        (False, "Running, not Ready (ContainersNotReady)", None, True),  # restarting: it may
        (False, "Unknown, not Ready", None, True),  # its node is out of touch: it may run
        (False, "Failed, not Ready (PodFailed)", None, False),  # evicted: no server
        (False, "Succeeded, not Ready (PodCompleted)", None, False),
        (False, "Pending, not Ready (ContainersNotReady)", None, False),  # never started
    ],
)
def test_a_pod_may_serve_a_loaded_adapter_while_its_server_may_run(
    ready: bool, state: str, started_at: str | None, serves: bool
) -> None:
    facts = PodEndpoint("p", "models", "uid-p", ready, "10.0.0.7", 30000, state, 0, started_at)
    assert may_serve(facts) is serves
