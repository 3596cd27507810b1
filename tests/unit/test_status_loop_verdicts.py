"""``pulumi-lora status`` says what the loop's alerts would: not served since when, capacity."""

from __future__ import annotations

from typing import Any

from pulumi_lora._commands._operator import _status_table
from pulumi_lora._ops._status import AdapterVerdict, StatusReport, adapter_line, loop_verdicts


def cr(*conditions: dict[str, Any], generation: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "models", "name": "sql", "generation": generation},
        "spec": {"name": "sql", "path": "/adapters/sql", "inferenceServiceRef": {"name": "llama"}},
        "status": {"conditions": list(conditions)},
    }


def condition(
    kind: str, status: str, reason: str, generation: int = 2, **extra: str
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": extra.get("message", ""),
        "lastTransitionTime": extra.get("at", "2026-12-02T10:41:22Z"),
        "observedGeneration": generation,
    }


EVICTED = "InferenceService models/llama serves with --max-loaded-loras 1 but 2 adapters ..."


def test_not_served_since_and_capacity_come_from_the_loops_conditions() -> None:
    stuck = cr(
        condition("Loaded", "False", "MaxLoadedLorasExceeded", at="2026-12-02T10:41:22+01:00"),
        condition("OverCapacity", "True", "MaxLoadedLorasExceeded", message=EVICTED),
    )
    assert loop_verdicts(stuck) == ("2026-12-02T09:41:22Z", EVICTED)
    assert loop_verdicts(cr(condition("Loaded", "True", "AdapterLoaded"))) == (None, "")
    # A Loaded=False for an older generation is not today's verdict.
    assert loop_verdicts(cr(condition("Loaded", "False", "ServerError", generation=1))) == (
        None,
        "",
    )


def test_the_table_and_json_show_them() -> None:
    stuck = cr(
        condition("Loaded", "False", "MaxLoadedLorasExceeded"),
        condition("OverCapacity", "True", "MaxLoadedLorasExceeded", message=EVICTED),
    )
    line = adapter_line(stuck, None, transport="delegated")
    assert line.verdict is AdapterVerdict.DRIFT
    assert line.to_json()["not_served_since"] == "2026-12-02T10:41:22Z"
    assert line.to_json()["capacity"] == EVICTED
    text = _status_table(StatusReport((line,)), where="models")
    assert "models/sql: since 2026-12-02T10:41:22Z" in text
    assert f"Over capacity:\n  models/sql: {EVICTED}" in text
