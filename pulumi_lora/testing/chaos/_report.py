"""Pure: the chaos run's record, its recovery figures and the printed report.

A fault counts as recovered at the first monitor sample, after the fault's action finished,
in which the service was whole again (every replica Ready, each serving exactly what the CRs
declare). Overlapping faults share that moment, so a recovery time is "until the service was
whole again", never less.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ChaosReport", "FaultRecord", "recovery_times"]


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


def recovery_times(
    spans: Sequence[tuple[float, float]], samples: Sequence[tuple[float, bool]]
) -> list[float | None]:
    """For each (started, done) span, seconds from start to the first whole sample after done."""
    result: list[float | None] = []
    for started, done in spans:
        first = next((at for at, whole in samples if at >= done and whole), None)
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
