"""The readiness gate's decision (``_core._gate``) and where loads go on a gated pod (issue 54).

A gated pod turns Ready only once its adapters are loaded, so the provider and the loop load on
its ready *containers*; the gate's condition is False while the container is stopped or new,
True once every established adapter is served, and never turned False on a serving pod for an
adapter that is merely missing.
"""

from __future__ import annotations

from typing import Any

from pulumi_lora._core._gate import (
    GATE_CONDITION,
    GateVerdict,
    condition_patch,
    established,
    verdict,
)
from pulumi_lora._core._llmkube import PodEndpoint, pod_from_object

CONTAINER = "containerd://3f2a9c1b0d4e5f60718293a4b5c6d7e8"


def pod_object(
    *, gated: bool, containers_ready: bool, ready: bool, gate: dict[str, Any] | None = None
) -> dict[str, Any]:
    conditions = [
        {"type": "ContainersReady", "status": str(containers_ready)},
        {"type": "Ready", "status": str(ready)},
    ]
    if gate is not None:
        conditions.append({"type": GATE_CONDITION, **gate})
    spec: dict[str, Any] = {"containers": [{"name": "sglang"}]}
    if gated:
        spec["readinessGates"] = [{"conditionType": GATE_CONDITION}]
    return {
        "metadata": {"name": "llama-0", "namespace": "models", "uid": "u"},
        "spec": spec,
        "status": {
            "podIP": "10.0.0.1",
            "conditions": conditions,
            "containerStatuses": [{"name": "sglang", "containerID": CONTAINER}],
        },
    }


def endpoint(**kwargs: Any) -> PodEndpoint:
    return pod_from_object(pod_object(**kwargs))


def test_a_gated_pod_takes_loads_once_its_containers_are_ready() -> None:
    held = endpoint(gated=True, containers_ready=True, ready=False)
    assert held.gated and held.ready and held.serving
    assert held.container_id == CONTAINER
    assert not endpoint(gated=True, containers_ready=False, ready=False).ready


def test_an_ungated_pod_is_ready_as_its_ready_condition_says() -> None:
    assert not endpoint(gated=False, containers_ready=True, ready=False).ready
    assert endpoint(gated=False, containers_ready=True, ready=True).ready


REQUIRED = {"sql": "/adapters/sql-v2", "chat": "/adapters/chat"}


def test_true_once_every_required_adapter_is_served_naming_the_container() -> None:
    pod = endpoint(gated=True, containers_ready=True, ready=False)
    found = verdict(pod, REQUIRED, dict(REQUIRED))
    assert found == GateVerdict(
        True, "AdaptersLoaded", "2 adapters loaded (container 3f2a9c1b0d4e)"
    )


def test_false_naming_what_is_missing_until_then() -> None:
    pod = endpoint(gated=True, containers_ready=True, ready=False)
    found = verdict(pod, REQUIRED, {"chat": "/adapters/chat", "sql": "/adapters/sql-v1"})
    assert found == GateVerdict(
        False, "AdaptersLoading", "waiting for 1 of 2 adapters: sql (/adapters/sql-v2)"
    )


def test_a_serving_pod_stays_ready_when_an_adapter_is_merely_missing() -> None:
    true = {
        "status": "True",
        "reason": "AdaptersLoaded",
        "message": "1 adapter loaded (container 3f2a9c1b0d4e)",
    }
    pod = endpoint(gated=True, containers_ready=True, ready=True, gate=true)
    assert verdict(pod, {**REQUIRED, "new": "/adapters/new"}, dict(REQUIRED)) is None


def test_false_as_soon_as_the_container_stops_or_is_a_new_one() -> None:
    true = {
        "status": "True",
        "reason": "AdaptersLoaded",
        "message": "2 adapters loaded (container 3f2a9c1b0d4e)",
    }
    stopped = endpoint(gated=True, containers_ready=False, ready=False, gate=true)
    assert verdict(stopped, REQUIRED, None) == GateVerdict(
        False, "ContainerStopped", "the sglang container is not ready"
    )
    stale = {**true, "message": "2 adapters loaded (container 000000000000)"}
    restarted = endpoint(gated=True, containers_ready=True, ready=True, gate=stale)
    found = verdict(restarted, REQUIRED, {})
    assert found is not None and not found.status and found.reason == "ContainerStopped"


def test_false_while_swapping_and_no_write_when_nothing_changes() -> None:
    pod = endpoint(gated=True, containers_ready=True, ready=False)
    assert verdict(pod, REQUIRED, dict(REQUIRED), swapping="sql") == GateVerdict(
        False, "Swapping", "swapping sql"
    )
    said = {"status": "False", "reason": "Swapping", "message": "swapping sql"}
    same = endpoint(gated=True, containers_ready=True, ready=False, gate=said)
    assert verdict(same, REQUIRED, dict(REQUIRED), swapping="sql") is None
    assert verdict(pod, REQUIRED, None) is None  # unread: nothing to say


def test_a_swap_keeps_its_words_until_the_pod_is_back() -> None:
    """A swap (the provider's or the loop's rolling swap) holds the pod out with ``Swapping``;
    another writer's False (waiting for the new revision) does not replace those words, and
    only a True (every adapter served) or the swap itself moves it."""
    said = {"status": "False", "reason": "Swapping", "message": "swapping sql"}
    held = endpoint(gated=True, containers_ready=True, ready=False, gate=said)
    assert verdict(held, {"sql": "/adapters/sql-v2"}, {"sql": "/adapters/sql"}) is None
    stopped = endpoint(gated=True, containers_ready=False, ready=False, gate=said)
    assert verdict(stopped, REQUIRED, None) is None  # out of rotation either way
    back = verdict(held, REQUIRED, dict(REQUIRED))
    assert back is not None and back.status and back.reason == "AdaptersLoaded"


def test_only_adapters_loaded_once_are_required() -> None:
    crs = [
        {"spec": {"name": "sql", "path": "/a/sql"}, "status": {"loadedPath": "/a/sql"}},
        {"spec": {"name": "new", "path": "/a/new"}, "status": {}},
        {
            "metadata": {"deletionTimestamp": "2026-12-07T00:00:00Z"},
            "spec": {"name": "gone", "path": "/a/gone"},
            "status": {"loadedPath": "/a/gone"},
        },
    ]
    assert established(crs) == {"sql": "/a/sql"}


def test_the_patch_keeps_the_transition_time_unless_the_status_changes() -> None:
    found = GateVerdict(True, "AdaptersLoaded", "1 adapter loaded (container x)")
    body = condition_patch(found, "2026-12-07T10:00:00Z", None, "42")
    (written,) = body["status"]["conditions"]
    assert written["type"] == GATE_CONDITION and written["status"] == "True"
    assert written["lastTransitionTime"] == "2026-12-07T10:00:00Z"
    assert body["metadata"] == {"resourceVersion": "42"}
    before = {"status": "True", "lastTransitionTime": "2026-12-07T09:00:00Z"}
    kept = condition_patch(found, "2026-12-07T10:00:00Z", before)
    assert kept["status"]["conditions"][0]["lastTransitionTime"] == "2026-12-07T09:00:00Z"
    false = condition_patch(GateVerdict(False, "Swapping", "swapping sql"), "t", before, "42")
    assert "metadata" not in false  # a False needs no precondition
