"""The chaos run CI can afford: 40 s of faults on 20 adapters x 4 pods, every invariant checked,
and no process of the run left behind.

Real etcd, kube-apiserver (restarted once), kubectl and Pulumi engine; the re-sync loop as a
process under its least-privilege ServiceAccount; emulated SGLang pods. The longer run is
``python -m pulumi_lora.testing.chaos --duration 1800`` (docs/reliability.md). This one is the
default run's seeded schedule compressed from 60 s to 40 s (``--duration 40 --gap 0.667 2``): the
same faults, closer together.
"""

from __future__ import annotations

import json
from pathlib import Path

from pulumi_lora.testing.chaos import Action, ChaosOptions, run_chaos


def test_faults_restarts_and_pulumi_runs_lose_nothing_and_leave_nothing(
    testbed_binaries: object, tmp_path: Path
) -> None:
    lines: list[str] = []
    options = ChaosOptions(seed=1, duration=40.0, gap=(2 / 3, 2.0), workdir=tmp_path)
    report = run_chaos(options, say=lines.append)
    (tmp_path / "report.json").write_text(json.dumps(report.as_dict(), indent=2))
    print(report.render())  # shown with -s, and on failure
    assert report.ok, report.render() + "\n" + "\n".join(lines[-40:])
    faults = [f for f in report.faults if not f.is_pulumi]
    kinds = {f.action for f in faults}
    assert Action.APISERVER_RESTART.value in kinds and len(faults) >= 20
    assert {Action.RESTART_POD.value, Action.REPLACE_POD.value} & kinds
    assert [f for f in faults if f.recovered is None] == []  # each one healed, and was timed
    assert report.healed_after_last is not None and report.healed_after_last <= report.bound
    assert report.final_up == "ok (up, refresh, no changes)" and report.loop_exits == []
    # The run stopped every process it started (etcd, apiserver, pods, the loop). Checked on
    # this run rather than a run of its own: a chaos run's set-up and final checks cost a minute.
    assert processes_mentioning(str(tmp_path)) == []


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found
