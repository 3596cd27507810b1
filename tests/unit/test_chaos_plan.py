"""The chaos run's pure parts: the seeded schedule, the invariants, recovery times, the report."""

from __future__ import annotations

import itertools

import pytest

from pulumi_lora.testing.chaos import Action, ChaosReport, FaultRecord, build_schedule
from pulumi_lora.testing.chaos._invariants import (
    CRView,
    PodView,
    Snapshot,
    StateEntry,
    empty_violations,
    final_violations,
    healed_pods,
    is_whole,
    loop_violations,
)
from pulumi_lora.testing.chaos._report import recovery_times

DECLARED = {"sql": "/adapters/sql", "chat": "/adapters/chat"}


def cr(adapter: str, path: str, *, generation: int = 1, **status: object) -> CRView:
    fields: dict[str, object] = {
        "loaded": True,
        "observed_generation": generation,
        "loaded_path": path,
        **status,
    }
    return CRView(adapter, adapter, path, generation, **fields)  # type: ignore[arg-type]


def snapshot(*pods: PodView, crs: tuple[CRView, ...] | None = None, replicas: int = 2) -> Snapshot:
    default = tuple(cr(name, path) for name, path in DECLARED.items())
    return Snapshot(1.0, replicas, pods, default if crs is None else crs)


def pod(name: str, served: dict[str, str] | None = None, ready: bool = True) -> PodView:
    return PodView(name, ready, dict(DECLARED) if served is None else served)


class TestSchedule:
    def test_the_same_seed_gives_the_same_run_and_another_seed_another(self) -> None:
        assert build_schedule(7, 120) == build_schedule(7, 120)
        assert build_schedule(7, 120) != build_schedule(8, 120)

    def test_steps_are_spaced_within_the_gap_and_inside_the_duration(self) -> None:
        steps = build_schedule(3, 300, gap=(1.0, 3.0))
        times = [s.at for s in steps if s.at < 300]  # a last scale-down may follow the end
        assert times == [s.at for s in steps][: len(times)] and len(steps) - len(times) <= 1
        assert all(1.0 - 1e-3 <= b - a <= 3.0 + 1e-3 for a, b in itertools.pairwise(times))

    def test_one_apiserver_restart_near_the_middle_and_none_when_disabled(self) -> None:
        steps = build_schedule(5, 200)
        restarts = [s for s in steps if s.action is Action.APISERVER_RESTART]
        assert len(restarts) == 1 and 80 <= restarts[0].at <= 84
        assert not any(
            s.action is Action.APISERVER_RESTART
            for s in build_schedule(5, 200, apiserver_restart=False)
        )

    @pytest.mark.parametrize("seed", range(20))
    def test_every_scale_up_is_followed_by_its_scale_down_before_the_next(self, seed: int) -> None:
        extra = 0
        for step in build_schedule(seed, 400):
            if step.action is Action.SCALE_UP:
                assert extra == 0
                extra = 1
            elif step.action is Action.SCALE_DOWN:
                assert extra == 1
                extra = 0
        assert extra == 0

    def test_a_long_run_draws_every_kind_of_fault(self) -> None:
        drawn = {s.action for s in build_schedule(11, 1800)}
        assert drawn == set(Action)

    def test_pulumi_up_steps_say_what_they_change(self) -> None:
        ups = [s for s in build_schedule(2, 600) if s.action is Action.PULUMI_UP]
        assert ups and {s.change for s in ups} <= {"swap", "remove", "add"}

    def test_bad_bounds_are_refused(self) -> None:
        with pytest.raises(ValueError, match="positive"):
            build_schedule(1, 0)
        with pytest.raises(ValueError, match="gap"):
            build_schedule(1, 10, gap=(3.0, 1.0))


class TestInvariants:
    def test_a_healed_service_is_whole_and_has_no_violation(self) -> None:
        snap = snapshot(pod("p1"), pod("p2"))
        assert is_whole(snap) and loop_violations(snap) == []

    def test_missing_wrong_and_undeclared_adapters_are_named(self) -> None:
        snap = snapshot(
            pod("p1", {"sql": "/adapters/other", "stray": "/x"}),
            pod("p2", {"sql": "/adapters/sql", "chat": "/adapters/chat"}),
        )
        assert not is_whole(snap)
        assert loop_violations(snap) == [
            "pod p1: chat is not loaded",
            "pod p1: sql is loaded from /adapters/other, not /adapters/sql",
            "pod p1: stray is loaded but nothing declares it",
        ]

    def test_too_few_ready_pods_and_a_silent_pod_break_it(self) -> None:
        snap = snapshot(pod("p1"), pod("p2", ready=False), replicas=2)
        assert loop_violations(snap) == ["1 Ready pods, 2 replicas declared"]
        silent = snapshot(pod("p1"), PodView("p2", True, None))
        assert loop_violations(silent) == ["pod p2: /v1/models did not answer"]

    def test_status_must_be_loaded_current_and_carry_the_path(self) -> None:
        crs = (
            cr("sql", "/adapters/sql", loaded=False),
            cr("chat", "/adapters/chat", generation=3, observed_generation=2),
        )
        snap = snapshot(pod("p1"), pod("p2"), crs=crs)
        assert is_whole(snap)  # the pods are right; only the status lags
        assert loop_violations(snap) == [
            "CR sql: status does not say Loaded",
            "CR chat: status is for generation 2, spec is generation 3",
        ]

    def test_healed_pods_are_the_ready_ones_serving_exactly_the_crs(self) -> None:
        snap = snapshot(pod("p1"), pod("p2", {"sql": "/adapters/sql"}), pod("p3", ready=False))
        assert healed_pods(snap) == {"p1"}
        assert healed_pods(Snapshot(1.0, 1, (pod("p1"),), None)) == frozenset()

    def test_an_unanswered_apiserver_is_never_whole(self) -> None:
        snap = Snapshot(1.0, 1, (pod("p1"),), None)
        assert not is_whole(snap) and loop_violations(snap) == ["the apiserver did not answer"]

    def test_final_checks_orphans_state_and_program(self) -> None:
        crs = (*(cr(n, p) for n, p in DECLARED.items()), cr("gone", "/adapters/gone"))
        served = {**DECLARED, "gone": "/adapters/gone"}
        snap = snapshot(pod("p1", served), pod("p2", served), crs=crs)
        state = {
            "sql": StateEntry(
                "/adapters/sql", True, {"p1": "/adapters/sql", "p2": "/adapters/sql"}
            ),
            "chat": StateEntry("/adapters/chat", True, {"p1": "/adapters/chat"}),
        }
        assert final_violations(snap, DECLARED, state) == [
            "CR gone: orphaned (the program no longer declares gone)",
            "pod p1: gone is loaded but nothing declares it",
            "pod p2: gone is loaded but nothing declares it",
            "chat: state lists pods ['p1'], Ready pods are ['p1', 'p2']",
        ]

    def test_final_checks_pass_when_everything_agrees(self) -> None:
        state = {
            name: StateEntry(path, True, {"p1": path, "p2": path})
            for name, path in DECLARED.items()
        }
        assert final_violations(snapshot(pod("p1"), pod("p2")), DECLARED, state) == []

    def test_destroy_must_leave_no_cr_and_no_adapter(self) -> None:
        left = snapshot(pod("p1", {"sql": "/adapters/sql"}), crs=(cr("chat", "/adapters/chat"),))
        assert empty_violations(left) == [
            "CR chat: left behind by destroy",
            "pod p1: sql left loaded by destroy",
        ]
        assert empty_violations(snapshot(pod("p1", {}), crs=())) == []


class TestReport:
    def test_recovery_is_the_first_whole_sample_after_the_action_finished(self) -> None:
        samples = [
            (1.0, True, frozenset({"p1", "p2"})),
            (2.0, False, frozenset({"p1"})),
            (3.0, False, frozenset({"p2"})),
            (3.5, True, frozenset({"p1", "p2"})),
            (9.0, True, frozenset({"p1", "p2"})),
        ]
        spans = [(1.5, 2.5, None), (3.6, 4.0, None), (9.5, 9.6, None)]
        assert recovery_times(spans, samples) == [2.0, 5.4, None]
        # a step on one pod heals when that pod does, whatever the others do meanwhile
        assert recovery_times([(1.5, 1.8, "p1"), (1.5, 1.8, "p2")], samples) == [0.5, 1.5]
        assert recovery_times([(1.5, 1.8, "gone")], samples) == [2.0]  # replaced meanwhile
        assert recovery_times([(9.5, 9.6, "p1")], samples) == [None]

    def test_the_report_counts_faults_recoveries_and_violations(self) -> None:
        report = ChaosReport(seed=1, duration=60, adapters=20, replicas=4, bound=60)
        report.faults = [
            FaultRecord("restart-pod", "p1", 1.0, 1.2, recovered=0.5),
            FaultRecord("restart-pod", "p2", 5.0, 5.2, recovered=1.5),
            FaultRecord("load-stall", "p1", 9.0, 9.1, recovered=None),
            FaultRecord("pulumi-up", "swap a01", 12.0, 18.0, outcome="failed: boom"),
        ]
        report.healed_after_last = 0.7
        text = report.render()
        assert "faults injected: 3; recovered: 2; worst time to recover: 1.50 s" in text
        assert "pulumi operations during faults: 1, failed (expected): 1" in text
        assert "pulumi-up at 12.0 s: failed: boom" in text
        assert "invariants: all held" in text and report.ok
        report.violations.append("pod p1: sql is not loaded")
        assert not report.ok and "INVARIANT VIOLATIONS (1):" in report.render()
        assert report.as_dict()["ok"] is False
