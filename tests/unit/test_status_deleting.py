"""``pulumi-lora status`` on a CR being deleted: what a failed destroy left, which pods still
serve it, and what lets it go (issue 31). Judged the other way round from a live CR: a pod that
serves the adapter is the problem, one that does not is as it should be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pulumi_lora._commands._operator import _status_table
from pulumi_lora._models import LLMKUBE_FINALIZER, UNLOAD_FINALIZER
from pulumi_lora._ops._status import AdapterVerdict, ServedState, StatusReport, adapter_line


@dataclass(frozen=True)
class Pod:
    pod: str
    ready: bool = True
    loaded: bool = False
    path: str | None = None
    error: str = ""


def cr(*finalizers: str, deleting: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "models", "name": "sql", "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T12:00:00Z"
    return {
        "metadata": meta,
        "spec": {"name": "sql", "path": "/adapters/sql", "inferenceServiceRef": {"name": "llama"}},
    }


SERVING = Pod("llama-a", loaded=True, path="/adapters/sql")
UNLOADED = Pod("llama-b")


def test_a_held_cr_names_the_pods_that_still_serve_it_and_what_lets_it_go() -> None:
    line = adapter_line(cr(UNLOAD_FINALIZER), [SERVING, UNLOADED, Pod("llama-c", ready=False)])
    assert line.verdict is AdapterVerdict.DELETING
    assert [p.state for p in line.pods] == [
        ServedState.STILL_SERVED,
        ServedState.UNLOADED,
        ServedState.NOT_READY,
    ]
    assert line.error == (
        f"being deleted, held ({UNLOAD_FINALIZER}) while Ready pods still serve it: llama-a; "
        "once they answer, `pulumi destroy` again or `pulumi-lora finish-delete models/sql`"
    )
    pods = line.to_json()["pods"]
    assert [(p["state"], p["loaded"]) for p in pods] == [
        ("still-served", True),
        ("unloaded", False),
        ("not-ready", False),
    ]
    report = StatusReport((line,))
    assert report.exit_code == 1 and report.counts()["deleting"] == 1
    text = _status_table(report, where="models")
    rows = text.splitlines()
    assert "llama-a" in rows[1] and "yes (deleting)" in rows[1] and "still serves it" in rows[1]
    assert "llama-b" in rows[2] and "no (unloaded)" in rows[2]
    assert "1 LoRAAdapter(s): 0 ok, 0 drift, 0 error, 1 deleting" in text
    assert f"Being deleted:\n  models/sql: {line.error}" in text


def test_a_held_cr_no_pod_serves_any_more_says_finish_delete_lets_it_go() -> None:
    line = adapter_line(cr(UNLOAD_FINALIZER), [UNLOADED])
    assert line.verdict is AdapterVerdict.DELETING
    assert line.error == (
        f"being deleted, held ({UNLOAD_FINALIZER}); no Ready pod serves it any more: "
        "`pulumi-lora finish-delete models/sql` lets it go"
    )


def test_a_cr_on_its_way_out_without_pulumi_loras_finalizer_is_just_being_deleted() -> None:
    line = adapter_line(cr(LLMKUBE_FINALIZER), [SERVING])
    assert (line.verdict, line.error) == (AdapterVerdict.DELETING, "being deleted")
    # An unreachable pod stays an unknown, whatever the CR's state.
    down = adapter_line(cr(UNLOAD_FINALIZER), [Pod("llama-a", error="timed out")])
    assert down.pods[0].state is ServedState.UNREACHABLE


def test_a_live_cr_reads_as_before_and_the_summary_line_is_unchanged() -> None:
    line = adapter_line(cr(deleting=False), [SERVING])
    assert line.verdict is AdapterVerdict.OK
    text = _status_table(StatusReport((line,)), where="models")
    assert text.endswith("1 LoRAAdapter(s): 1 ok, 0 drift, 0 error")
