"""Pure: the chaos run's record, its recovery figures and the printed report.

A fault counts as recovered at the first monitor sample, after the fault's action finished, in
which what it hit is healed again: the pod it hit (or the pod that replaced it) Ready and
serving exactly what the CRs declare, or, for steps on the whole system (apiserver restart,
scaling, Pulumi runs), every replica so. A fault that overlaps another on the same pod shares
its recovery, so a time is "until healed again", never less.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ChaosReport", "FaultRecord", "Sample", "Span", "recovery_times"]


@dataclass(slots=True)
class FaultRecord:
    """One step as it ran: when, on what, how it went, and when the service was whole again."""

    action: str
    target: str
    started: float  # seconds since the fault phase began
    done: float
    outcome: str = "ok"  # "ok", or what went wrong doing it (a failed `pulumi up`, say)
    recovered: float | None = None  # seconds from ``started`` to whole again; None: never

    @property
    def is_pulumi(self) -> bool:
        """Whether this step was a Pulumi operation rather than a fault."""
        return self.action.startswith("pulumi-")


#: One monitor sample: when, whether the whole service was healed, and which pods were.
Sample = tuple[float, bool, frozenset[str]]
#: One step's span: started, done, and the pod that must heal (None: the whole service).
Span = tuple[float, float, str | None]


def recovery_times(spans: Sequence[Span], samples: Sequence[Sample]) -> list[float | None]:
    """For each span, seconds from its start to the first sample after it in which it healed.

    A step on one pod has healed when that pod (a replaced pod's successor) is Ready and serves
    exactly what the CRs declare, or the whole service is healed (the pod may be gone by then);
    any other step when the whole service is healed.
    """
    result: list[float | None] = []
    for started, done, pod in spans:
        first = next(
            (
                at
                for at, whole, healed in samples
                if at >= done and (whole or (pod is not None and pod in healed))
            ),
            None,
        )
        result.append(None if first is None else round(first - started, 3))
    return result


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class ChaosReport:
    """Everything a run measured; ``ok`` when no invariant was violated."""

    seed: int
    duration: float
    adapters: int
    replicas: int
    bound: float  # seconds the loop has to heal the service after the last fault
    faults: list[FaultRecord] = field(default_factory=list)
    healed_after_last: float | None = None  # seconds from the last fault to whole and matching
    final_up: str = "not run"
    violations: list[str] = field(default_factory=list)
    loop_exits: list[int] = field(default_factory=list)  # exit codes of loop processes replaced
    phases: dict[str, float] = field(default_factory=dict)  # phase → seconds

    @property
    def ok(self) -> bool:
        """Whether every invariant held."""
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``--json``)."""
        data = asdict(self)
        data["ok"] = self.ok
        return data

    def render(self) -> str:
        """The printed report: faults and recoveries per kind, Pulumi runs, invariants."""
        lines = [
            f"chaos run: seed {self.seed}, {self.duration:g} s of faults, "
            f"{self.adapters} adapters x {self.replicas} pods",
            "",
            f"{'action':<20}{'count':>6}{'recovered':>11}{'p50 s':>8}{'worst s':>9}",
        ]
        kinds = Counter(f.action for f in self.faults)
        for action in sorted(kinds):
            records = [f for f in self.faults if f.action == action]
            times = [f.recovered for f in records if f.recovered is not None]
            p50 = f"{_percentile(times, 0.5):.2f}" if times else "-"
            worst = f"{max(times):.2f}" if times else "-"
            lines.append(f"{action:<20}{len(records):>6}{len(times):>11}{p50:>8}{worst:>9}")
        faults = [f for f in self.faults if not f.is_pulumi]
        healed = [f.recovered for f in faults if f.recovered is not None]
        lines += [
            "",
            f"faults injected: {len(faults)}; recovered: {len(healed)}; "
            f"worst time to recover: {max(healed):.2f} s"
            if healed
            else "faults injected: 0",
        ]
        failed_ops = [f for f in self.faults if f.is_pulumi and f.outcome != "ok"]
        ops = sum(1 for f in self.faults if f.is_pulumi)
        lines.append(
            f"pulumi operations during faults: {ops}, failed (expected): {len(failed_ops)}"
        )
        lines.extend(f"  {f.action} at {f.started:.1f} s: {f.outcome}" for f in failed_ops)
        if self.healed_after_last is not None:
            lines.append(
                f"healed by the loop after the last fault: {self.healed_after_last:.2f} s "
                f"(bound {self.bound:g} s)"
            )
        lines.append(f"final pulumi up / refresh / preview: {self.final_up}")
        if self.loop_exits:
            lines.append(f"re-sync loop restarted after exits: {self.loop_exits}")
        if self.phases:
            lines.append("phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items()))
        if self.violations:
            lines += ["", f"INVARIANT VIOLATIONS ({len(self.violations)}):"]
            lines.extend(f"  - {v}" for v in self.violations)
        else:
            lines += ["", "invariants: all held"]
        return "\n".join(lines)
