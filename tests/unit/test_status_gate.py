"""``pulumi-lora status`` and the readiness gate (issue 54, item 1): which pods carry it, and
which it holds unready past the bound, with the gate's own words."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pulumi_lora._commands._operator import _status_table
from pulumi_lora._core._llmkube import GATE_CONDITION, PodEndpoint, pod_from_object
from pulumi_lora._lifecycle import PodReport
from pulumi_lora._ops._status import (
    HELD_AFTER,
    HeldPod,
    StatusReport,
    adapter_line,
    held_pods,
    with_gates,
)

NOW = datetime(2026, 12, 2, 10, 47, 30, tzinfo=UTC)
WAITING = "waiting for 1 of 2 adapters: sql (/adapters/sql)"


def cr() -> dict[str, Any]:
    return {
        "metadata": {"namespace": "models", "name": "sql", "generation": 1},
        "spec": {"name": "sql", "path": "/adapters/sql", "inferenceServiceRef": {"name": "llama"}},
        "status": {"lastLoadedAt": "2026-12-02T10:00:00Z"},
    }


def pod(name: str, gate: dict[str, str] | None, *, gated: bool = True) -> PodEndpoint:
    conditions = [{"type": "ContainersReady", "status": "True"}]
    conditions += [{"type": GATE_CONDITION, **gate}] if gate else []
    spec: dict[str, Any] = {"containers": [{"name": "sglang"}]}
    if gated:
        spec["readinessGates"] = [{"conditionType": GATE_CONDITION}]
    running = {"running": {"startedAt": "2026-12-02T10:00:00Z"}}
    return pod_from_object(
        {
            "metadata": {
                "namespace": "models",
                "name": name,
                "labels": {"inference.llmkube.dev/service": "llama"},
            },
            "spec": spec,
            "status": {
                "conditions": conditions,
                "containerStatuses": [{"name": "sglang", "state": running}],
            },
        }
    )


def waiting(since: str) -> dict[str, str]:
    return {
        "status": "False",
        "reason": "AdaptersLoading",
        "message": WAITING,
        "lastTransitionTime": since,
    }


def test_held_pods_are_gated_ready_containers_whose_gate_is_not_true_past_the_bound() -> None:
    assert HELD_AFTER == 120
    pods = [
        pod("llama-b", waiting("2026-12-02T10:41:22Z")),  # 368 s: held
        pod("llama-a", waiting("2026-12-02T10:45:30Z")),  # exactly 120 s: not yet
        pod("llama-c", {"status": "True", "lastTransitionTime": "2026-12-02T10:01:00Z"}),
        pod("llama-d", waiting("2026-12-02T10:41:22Z"), gated=False),  # no gate: its own Ready
    ]
    assert held_pods(pods, NOW) == (
        HeldPod("models", "llama-b", "llama", "2026-12-02T10:41:22Z", 368, WAITING),
    )
    assert held_pods(pods, NOW)[0].held_for == "6 min"
    assert held_pods(pods, NOW)[0].to_json() == {
        "namespace": "models",
        "pod": "llama-b",
        "inference_service": "llama",
        "since": "2026-12-02T10:41:22Z",
        "seconds": 368,
        "message": WAITING,
    }


def test_the_table_marks_gated_pods_and_lists_the_held_ones_under_the_summary() -> None:
    line = adapter_line(
        cr(),
        [
            PodReport("llama-a", True, True, "/adapters/sql"),
            PodReport("llama-b", True, False),
        ],
    )
    line = with_gates(line, {"llama-b"})
    assert [(p.pod, p.gated) for p in line.pods] == [("llama-a", False), ("llama-b", True)]
    held = held_pods([pod("llama-b", waiting("2026-12-02T10:41:22Z"))], NOW)
    text = _status_table(StatusReport((line,), held), where="models")
    rows = text.splitlines()
    assert rows[1].split()[4:6] == ["llama-a", "yes"]
    assert rows[2].split()[4:7] == ["llama-b", "(gated)", "no"]
    assert text.endswith(
        "1 LoRAAdapter(s): 0 ok, 1 drift, 0 error\n"
        "\n"
        "Held unready by the readiness gate for more than 120 s (containers ready, "
        "pulumi-lora.dev/adapters-loaded not True):\n"
        f"  models/llama-b: since 2026-12-02T10:41:22Z (6 min): {WAITING}\n"
        "runbook: docs/operations.md#pulumilorapodheldunready (alert PulumiLoRAPodHeldUnready)"
    )
    data = StatusReport((line,), held).to_json()
    assert [p["gated"] for p in data["adapters"][0]["pods"]] == [False, True]
    assert data["held"] == [h.to_json() for h in held]


def test_without_gated_pods_the_table_reads_as_before() -> None:
    line = adapter_line(cr(), [PodReport("llama-a", True, True, "/adapters/sql")])
    text = _status_table(StatusReport((with_gates(line, set()),)), where="models")
    assert "gated" not in text and "Held" not in text
    assert text.splitlines()[-1] == "1 LoRAAdapter(s): 1 ok, 0 drift, 0 error"
