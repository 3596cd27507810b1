"""The decision core: plans, pod programs, conditions, startup adapters (every branch)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from pulumi_lora._core._conditions import (
    Availability,
    build_conditions,
    is_loaded,
    merge_conditions,
    summarize,
)
from pulumi_lora._core._reconcile import (
    ActionKind,
    Call,
    Desired,
    ListCall,
    LoadCall,
    PodAction,
    PodOutcome,
    PodView,
    Reply,
    ReplyKind,
    SmokeCall,
    UnloadCall,
    extra_arg_value,
    plan,
    pod_program,
    rollback_plan,
    startup_adapters,
    unsettled,
)
from pulumi_lora._models import Condition, ConditionStatus, Policy

SQL = Desired("sql", "/adapters/sql")
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def drive(
    action: PodAction, desired: Desired | None, replies: Callable[[Call], Reply]
) -> tuple[list[Call], PodOutcome]:
    """Run a pod program against a scripted server; return the calls it made and its outcome."""
    program = pod_program(action, desired, "sql")
    calls: list[Call] = []
    try:
        call = next(program)
        while True:
            calls.append(call)
            call = program.send(replies(call))
    except StopIteration as stop:
        return calls, stop.value


def script(*replies: Reply) -> Callable[[Call], Reply]:
    queue = list(replies)
    return lambda _call: queue.pop(0)


LOADED = Reply(ReplyKind.LOADED)
SMOKED = Reply(ReplyKind.SMOKED)
UNLOADED = Reply(ReplyKind.UNLOADED)
FAIL = Reply(ReplyKind.FAILED, reason="LoRANotEnabled", message="LoRA is not enabled")
TIMEOUT = Reply(
    ReplyKind.FAILED, reason="Timeout", message="timed out", retryable=True, unknown=True
)


class TestPlan:
    def test_each_pod_gets_the_action_its_state_needs(self) -> None:
        pods = [
            PodView("keep", ready=True, adapters={"sql": "/adapters/sql"}),
            PodView("load", ready=True, adapters={}),
            PodView("swap", ready=True, adapters={"sql": "/old"}),
            PodView("blind", ready=True, adapters=None),
            PodView("wait", ready=False, adapters=None),
        ]
        kinds = {a.pod: (a.kind, a.seen_path) for a in plan(SQL, pods, "sql")}
        assert kinds == {
            "keep": (ActionKind.KEEP, "/adapters/sql"),
            "load": (ActionKind.LOAD, None),
            "swap": (ActionKind.SWAP, "/old"),
            "blind": (ActionKind.LOAD, None),
            "wait": (ActionKind.WAIT, None),
        }

    def test_delete_unloads_where_served_even_from_pods_not_ready(self) -> None:
        pods = [
            PodView("serving", ready=True, adapters={"sql": "/a"}),
            PodView("absent", ready=True, adapters={"other": "/b"}),
            PodView("unknown", ready=True, adapters=None),
            PodView("dying", ready=False, adapters={"sql": "/a"}),
            PodView("starting", ready=False, adapters=None),
        ]
        kinds = {a.pod: a.kind for a in plan(None, pods, "sql")}
        assert kinds == {
            "serving": ActionKind.UNLOAD,
            "absent": ActionKind.KEEP,
            "unknown": ActionKind.UNLOAD,
            "dying": ActionKind.UNLOAD,
            "starting": ActionKind.WAIT,
        }


class TestPodProgram:
    def test_load(self) -> None:
        calls, out = drive(PodAction("p", ActionKind.LOAD), SQL, script(LOADED, SMOKED))
        assert calls == [LoadCall("sql", "/adapters/sql", False), SmokeCall("sql")]
        assert out == PodOutcome("p", loaded=True, path="/adapters/sql", did_load=True)

    def test_pinned_is_passed_on(self) -> None:
        calls, _ = drive(
            PodAction("p", ActionKind.LOAD),
            Desired("sql", "/x", pinned=True),
            script(LOADED, SMOKED),
        )
        assert calls[0] == LoadCall("sql", "/x", True)

    def test_already_loaded_with_the_same_path_is_success_without_a_second_load(self) -> None:
        calls, out = drive(
            PodAction("p", ActionKind.LOAD),
            SQL,
            script(Reply(ReplyKind.ALREADY_LOADED, path="/adapters/sql")),
        )
        assert len(calls) == 1
        assert out.loaded and not out.did_load and not out.error

    def test_already_loaded_with_another_path_is_a_swap(self) -> None:
        calls, out = drive(
            PodAction("p", ActionKind.LOAD),
            SQL,
            script(Reply(ReplyKind.ALREADY_LOADED, path="/old"), UNLOADED, LOADED, SMOKED),
        )
        assert calls[1:] == [
            UnloadCall("sql"),
            LoadCall("sql", "/adapters/sql", False),
            SmokeCall("sql"),
        ]
        assert out.loaded and out.did_load and out.did_unload

    def test_already_loaded_with_unknown_path_lists_then_decides(self) -> None:
        calls, out = drive(
            PodAction("p", ActionKind.LOAD),
            SQL,
            script(
                Reply(ReplyKind.ALREADY_LOADED),
                Reply(ReplyKind.LISTED, adapters={"sql": "/adapters/sql"}),
            ),
        )
        assert calls[1] == ListCall()
        assert out.loaded and not out.did_load

    def test_already_loaded_unknown_path_and_listing_fails(self) -> None:
        _, out = drive(
            PodAction("p", ActionKind.LOAD), SQL, script(Reply(ReplyKind.ALREADY_LOADED), FAIL)
        )
        assert not out.loaded and out.reason == "LoRANotEnabled"

    def test_load_failure_carries_reason_and_message(self) -> None:
        _, out = drive(
            PodAction("p", ActionKind.LOAD),
            SQL,
            script(Reply(ReplyKind.FAILED, reason="Timeout", message="timed out", retryable=True)),
        )
        assert out == PodOutcome(
            "p", loaded=False, reason="Timeout", error="timed out", retryable=True
        )

    def test_failure_without_reason_defaults_to_load_unsuccessful(self) -> None:
        _, out = drive(
            PodAction("p", ActionKind.LOAD), SQL, script(Reply(ReplyKind.FAILED, message="boom"))
        )
        assert out.reason == "LoadUnsuccessful"

    def test_swap_unloads_then_loads(self) -> None:
        calls, out = drive(
            PodAction("p", ActionKind.SWAP, "/old"), SQL, script(UNLOADED, LOADED, SMOKED)
        )
        assert calls == [
            UnloadCall("sql"),
            LoadCall("sql", "/adapters/sql", False),
            SmokeCall("sql"),
        ]
        assert out.loaded and out.path == "/adapters/sql"

    def test_swap_whose_unload_fails_keeps_the_old_path_recorded(self) -> None:
        _, out = drive(PodAction("p", ActionKind.SWAP, "/old"), SQL, script(FAIL))
        assert out.path == "/old"
        assert "unloading the old path '/old'" in out.error

    def test_swap_whose_unload_fails_is_not_loaded_as_declared(self) -> None:
        # The old path (or, after a timed-out unload, maybe nothing) is no success of the new
        # declaration: the pod must not count towards the readiness policy.
        _, out = drive(PodAction("p", ActionKind.SWAP, "/old"), SQL, script(TIMEOUT))
        assert not out.loaded and out.reason == "Timeout"
        summary = summarize([out, PodOutcome("q", True, "/adapters/sql")])
        assert summary.loaded_pods == 1
        assert not is_loaded(summary, Policy.ALL_READY_PODS)

    def test_a_load_without_an_answer_may_have_loaded(self) -> None:
        _, out = drive(PodAction("p", ActionKind.LOAD), SQL, script(TIMEOUT))
        assert not out.loaded and out.maybe_loaded and out.reason == "Timeout"
        _, out = drive(PodAction("p", ActionKind.SWAP, "/old"), SQL, script(UNLOADED, TIMEOUT))
        assert not out.loaded and out.maybe_loaded

    def test_a_refused_load_did_not_load(self) -> None:
        _, out = drive(PodAction("p", ActionKind.LOAD), SQL, script(FAIL))
        assert not out.maybe_loaded

    def test_swap_whose_load_fails_says_the_old_one_is_gone(self) -> None:
        _, out = drive(PodAction("p", ActionKind.SWAP, "/old"), SQL, script(UNLOADED, FAIL))
        assert not out.loaded and "unloaded '/old', then loading" in out.error

    def test_swap_racing_a_reload_of_the_same_path_is_success(self) -> None:
        _, out = drive(
            PodAction("p", ActionKind.SWAP, "/old"),
            SQL,
            script(UNLOADED, Reply(ReplyKind.ALREADY_LOADED, path="/adapters/sql")),
        )
        assert out.loaded and not out.did_load

    def test_swap_racing_a_reload_of_another_path_is_a_retryable_conflict(self) -> None:
        _, out = drive(
            PodAction("p", ActionKind.SWAP, "/old"),
            SQL,
            script(UNLOADED, Reply(ReplyKind.ALREADY_LOADED, path="/old")),
        )
        assert not out.loaded and out.reason == "SwapConflict" and out.retryable

    @pytest.mark.parametrize("reply", [UNLOADED, Reply(ReplyKind.NOT_LOADED)])
    def test_unload_tolerates_does_not_exist(self, reply: Reply) -> None:
        calls, out = drive(PodAction("p", ActionKind.UNLOAD, "/a"), None, script(reply))
        assert calls == [UnloadCall("sql")]
        assert not out.loaded and not out.error
        assert out.did_unload is (reply.kind is ReplyKind.UNLOADED)

    def test_unload_failure_is_reported(self) -> None:
        _, out = drive(PodAction("p", ActionKind.UNLOAD, "/a"), None, script(FAIL))
        assert out.loaded and out.error

    def test_keep_and_wait_make_no_calls(self) -> None:
        assert drive(PodAction("p", ActionKind.KEEP), SQL, script()) == (
            [],
            PodOutcome("p", loaded=True, path="/adapters/sql"),
        )
        assert drive(PodAction("p", ActionKind.KEEP), None, script()) == (
            [],
            PodOutcome("p", loaded=False),
        )
        assert drive(PodAction("p", ActionKind.WAIT), SQL, script()) == (
            [],
            PodOutcome("p", loaded=False, waiting=True),
        )

    def test_rollback_touches_only_pods_this_run_loaded(self) -> None:
        outcomes = [
            PodOutcome("a", True, "/x", did_load=True),
            PodOutcome("b", True, "/x"),
            PodOutcome("c", False, error="e"),
        ]
        assert rollback_plan(outcomes) == (PodAction("a", ActionKind.UNLOAD, "/x"),)

    def test_rollback_also_unloads_where_a_load_may_have_landed(self) -> None:
        outcomes = [
            PodOutcome("a", True, "/x", did_load=True),
            PodOutcome("b", False, reason="Timeout", error="timed out", maybe_loaded=True),
            PodOutcome("c", False, reason="Timeout", error="no connection"),
        ]
        assert rollback_plan(outcomes) == (
            PodAction("a", ActionKind.UNLOAD, "/x"),
            PodAction("b", ActionKind.UNLOAD, None),
        )

    def test_unsettled_pods_are_unanswered_loads_the_rollback_did_not_find(self) -> None:
        outcomes = [
            PodOutcome("loaded", True, "/x", did_load=True),
            PodOutcome("late", False, reason="Timeout", error="t", maybe_loaded=True),
            PodOutcome("found", False, reason="Timeout", error="t", maybe_loaded=True),
            PodOutcome("failed", False, reason="Timeout", error="t", maybe_loaded=True),
            PodOutcome("dropped", False, reason="InvalidResponse", error="d", maybe_loaded=True),
            PodOutcome("reset", False, reason="ConnectionFailed", error="r", maybe_loaded=True),
            PodOutcome("refused", False, reason="ConnectionFailed", error="r"),
            PodOutcome("dropped-found", False, reason="InvalidResponse", maybe_loaded=True),
        ]
        rolled_back = [
            PodOutcome("loaded", False, did_unload=True),
            PodOutcome("late", False),  # "does not exist": the load has not landed (yet)
            PodOutcome("found", False, did_unload=True),  # it had landed, and is gone now
            PodOutcome("failed", True, reason="Timeout", error="t"),
            # a dropped or reset connection is no proof the server is done: watched like a timeout
            PodOutcome("dropped", False),
            PodOutcome("reset", False),
            PodOutcome("refused", False),  # never sent (no connection): nothing can land
            PodOutcome("dropped-found", False, did_unload=True),
        ]
        assert unsettled(outcomes, rolled_back) == ("late", "failed", "dropped", "reset")
        assert unsettled(outcomes[:1], rolled_back[:1]) == ()


SMOKE_NULL = Reply(
    ReplyKind.FAILED,
    reason="SmokeFailed",
    message="the smoke generation through the adapter failed [p /generate: HTTP 200] SGLang "
    "said: logprob is null (NaN or Inf)",
)


class TestSmoke:
    """After every load, one generation through the adapter: a failed one is a failed load."""

    @pytest.mark.parametrize(
        ("action", "before"),
        [
            (PodAction("p", ActionKind.LOAD), []),
            (PodAction("p", ActionKind.SWAP, "/old"), [UNLOADED]),
        ],
        ids=["load", "swap"],
    )
    def test_a_failed_smoke_unloads_and_fails_in_sglangs_words(
        self, action: PodAction, before: list[Reply]
    ) -> None:
        calls, out = drive(action, SQL, script(*before, LOADED, SMOKE_NULL, UNLOADED))
        assert calls[-3:] == [
            LoadCall("sql", "/adapters/sql", False),
            SmokeCall("sql"),
            UnloadCall("sql"),
        ]
        assert not out.loaded and out.path is None and not out.maybe_loaded
        assert out.reason == "SmokeFailed" and not out.retryable
        assert out.error.startswith("smoke generation after the load: ")
        assert "logprob is null (NaN or Inf)" in out.error
        # Nothing stays loaded: a failed create's rollback has nothing left to unload.
        assert not out.did_load and rollback_plan([out]) == ()
        assert out.did_unload is (action.kind is ActionKind.SWAP)  # the old path is gone
        assert not is_loaded(summarize([out]), Policy.ANY_READY_POD)

    def test_a_smoke_that_could_not_be_unloaded_is_left_for_the_rollback(self) -> None:
        _, out = drive(PodAction("p", ActionKind.LOAD), SQL, script(LOADED, SMOKE_NULL, TIMEOUT))
        assert not out.loaded and out.reason == "SmokeFailed"
        assert "unloading it again failed: timed out" in out.error
        assert out.did_load and rollback_plan([out]) == (PodAction("p", ActionKind.UNLOAD),)

    def test_a_timed_out_smoke_fails_the_load_and_may_pass_later(self) -> None:
        _, out = drive(PodAction("p", ActionKind.LOAD), SQL, script(LOADED, TIMEOUT, UNLOADED))
        assert not out.loaded and out.reason == "SmokeFailed" and out.retryable
        assert out.error == "smoke generation after the load: timed out"

    def test_a_passed_smoke_keeps_the_load(self) -> None:
        _, out = drive(PodAction("p", ActionKind.LOAD), SQL, script(LOADED, SMOKED))
        assert out.loaded and out.did_load and not out.error

    def test_smoke_false_loads_without_a_generation(self) -> None:
        unchecked = Desired("sql", "/adapters/sql", smoke=False)
        calls, out = drive(PodAction("p", ActionKind.LOAD), unchecked, script(LOADED))
        assert calls == [LoadCall("sql", "/adapters/sql", False)]
        assert out.loaded and out.did_load

    def test_what_this_run_did_not_load_is_not_smoked(self) -> None:
        # Loaded already with the declared path (by another writer, who smoked it), or kept.
        calls, out = drive(
            PodAction("p", ActionKind.LOAD),
            SQL,
            script(Reply(ReplyKind.ALREADY_LOADED, path="/adapters/sql")),
        )
        assert calls == [LoadCall("sql", "/adapters/sql", False)] and out.loaded
        assert drive(PodAction("p", ActionKind.KEEP), SQL, script())[0] == []


def outcomes(loaded: int, failed: int = 0, waiting: int = 0) -> list[PodOutcome]:
    return (
        [PodOutcome(f"ok{i}", True, "/x") for i in range(loaded)]
        + [PodOutcome(f"bad{i}", False, reason="Timeout", error="timed out") for i in range(failed)]
        + [PodOutcome(f"w{i}", False, waiting=True) for i in range(waiting)]
    )


class TestPolicyAndConditions:
    def test_policies(self) -> None:
        partial = summarize(outcomes(1, failed=1))
        assert not is_loaded(partial, Policy.ALL_READY_PODS)
        assert is_loaded(partial, Policy.ANY_READY_POD)
        assert is_loaded(summarize(outcomes(2, waiting=1)), Policy.ALL_READY_PODS)
        assert not is_loaded(summarize(outcomes(0, waiting=2)), Policy.ANY_READY_POD)

    def conds(
        self,
        summary_outcomes: list[PodOutcome] | None,
        *,
        ok: bool = True,
        previous: list[Condition] | None = None,
        now: datetime = T0,
    ) -> dict[str, Condition]:
        result = build_conditions(
            availability=Availability(
                ok,
                "InferenceServiceReady" if ok else "RuntimeMismatch",
                "" if ok else 'runtime="vllm", expected sglang',
            ),
            summary=None if summary_outcomes is None else summarize(summary_outcomes),
            policy=Policy.ALL_READY_PODS,
            generation=3,
            previous=previous or [],
            now=now,
        )
        return {c.type: c for c in result}

    def test_all_loaded(self) -> None:
        c = self.conds(outcomes(3))
        assert {k: (v.status, v.reason) for k, v in c.items()} == {
            "Available": (ConditionStatus.TRUE, "InferenceServiceReady"),
            "Loaded": (ConditionStatus.TRUE, "AdapterLoaded"),
            "Error": (ConditionStatus.FALSE, "NoError"),
            "Ready": (ConditionStatus.TRUE, "AdapterReady"),
        }
        assert c["Loaded"].message == "loaded on 3/3 Ready pods"
        assert all(v.observed_generation == 3 for v in c.values())

    def test_partial_failure_names_the_pod(self) -> None:
        c = self.conds(outcomes(2, failed=1, waiting=1))
        assert c["Loaded"].status is ConditionStatus.FALSE
        assert c["Loaded"].reason == "Timeout"
        assert c["Loaded"].message == (
            "loaded on 2/3 Ready pods; 1 pod(s) not Ready; pod bad0: timed out"
        )
        assert (c["Error"].status, c["Error"].reason) == (ConditionStatus.TRUE, "Timeout")
        assert c["Ready"].status is ConditionStatus.FALSE
        assert c["Ready"].message.startswith("Loaded: Timeout")

    def test_no_ready_pods(self) -> None:
        c = self.conds(outcomes(0, waiting=2))
        assert c["Loaded"].reason == "NoReadyPods"

    def test_partially_loaded_without_failures(self) -> None:
        c = build_conditions(
            availability=Availability(True, "InferenceServiceReady"),
            summary=summarize([PodOutcome("a", True, "/x"), PodOutcome("b", False)]),
            policy=Policy.ALL_READY_PODS,
            generation=1,
            previous=[],
            now=T0,
        )
        assert {x.type: x.reason for x in c}["Loaded"] == "PartiallyLoaded"

    def test_unavailable_target(self) -> None:
        c = self.conds(None, ok=False)
        assert c["Available"].status is ConditionStatus.FALSE
        assert c["Available"].message == 'runtime="vllm", expected sglang'
        assert (c["Error"].status, c["Error"].reason) == (ConditionStatus.TRUE, "RuntimeMismatch")
        assert c["Ready"].message.startswith("Available: RuntimeMismatch")

    def test_transition_time_moves_only_when_status_flips(self) -> None:
        first = list(self.conds(outcomes(3)).values())
        later = T0 + timedelta(minutes=5)
        same = self.conds(outcomes(3), previous=first, now=later)
        assert all(c.last_transition_time == T0 for c in same.values())
        flipped = self.conds(outcomes(1, failed=1), previous=first, now=later)
        assert flipped["Loaded"].last_transition_time == later
        assert flipped["Available"].last_transition_time == T0

    def test_merge_keeps_foreign_condition_types(self) -> None:
        foreign = Condition(
            type="example.com/Thing",
            status=ConditionStatus.TRUE,
            reason="X",
            last_transition_time=T0,
        )
        assert merge_conditions([foreign], [])[0] == foreign


class TestInferenceServiceFacts:
    def test_three_lora_paths_formats_and_sglang_config(self) -> None:
        args = [
            "--enable-lora",
            "--lora-paths",
            "/adapters/plain/",
            "named=/adapters/n",
            '{"lora_name": "js", "lora_path": "/adapters/j", "pinned": true}',
            "--max-lora-rank",
            "64",
        ]
        assert startup_adapters(args, [{"name": "cfg", "path": "/adapters/c"}]) == {
            "/adapters/plain/": "/adapters/plain/",
            "named": "/adapters/n",
            "js": "/adapters/j",
            "cfg": "/adapters/c",
        }

    def test_lora_paths_equals_form_and_one_string_of_args(self) -> None:
        assert startup_adapters(["--lora-paths=a=/x"], []) == {"a": "/x"}
        assert startup_adapters(["--enable-lora --lora-paths b=/y --tp 1"], []) == {"b": "/y"}
        assert startup_adapters(["--enable-lora"], []) == {}

    def test_extra_arg_value(self) -> None:
        assert extra_arg_value(["--max-lora-rank", "64"], "--max-lora-rank") == "64"
        assert extra_arg_value(["--max-lora-rank=32"], "--max-lora-rank") == "32"
        assert extra_arg_value(["--enable-lora"], "--max-lora-rank") is None
