"""Drift check for CI: ``pulumi preview --refresh --expect-no-changes`` with the Automation API.

Refreshes a stack from the live cluster (every LoRAAdapter CR and every Ready pod's
``/v1/models``) and previews it; any proposed change means the cluster drifted from the stack
(an adapter unloaded or lost by a restarted pod, a CR edited or deleted out of band). Works
with any stack, not only pulumi-lora ones.

Usage::

    python drift_check.py --stack prod --work-dir infra/              # a project folder
    python drift_check.py --stack prod --work-dir infra/ --program infra/__main__.py

The first form runs the project's program through its language host, as ``pulumi`` does. The
second runs ``program()`` from the given file in this process (an Automation API inline
program: no language host needed); the work dir still provides ``Pulumi.yaml`` and the stack's
config. Backend and secrets come from the usual environment (``PULUMI_BACKEND_URL``,
``PULUMI_CONFIG_PASSPHRASE``, ``PULUMI_ACCESS_TOKEN``, ...).

Exit codes: 0 no drift; 1 drift (the changes are listed); 2 the check could not run.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pulumi import automation as auto

NO_DRIFT, DRIFT, UNUSABLE = 0, 1, 2

#: Step kinds that change nothing (``preview --refresh`` reports refreshes and reads too).
UNCHANGED_OPS = frozenset({"same", "read", "refresh", "discard", "read-discard"})


@dataclass(frozen=True)
class Change:
    """One step the preview proposed: its kind, the resource, and the properties that differ."""

    op: str
    urn: str
    diffs: tuple[str, ...] = ()

    def __str__(self) -> str:
        what = f" ({', '.join(self.diffs)})" if self.diffs else ""
        return f"{self.op:<8} {self.urn}{what}"


@dataclass(frozen=True)
class Result:
    """The outcome of one check: the exit code, the proposed changes, what drifted in words (the
    providers' ``drift:`` diagnostics: pulumi-lora names the pod and what it lacks), and the
    CLI's words."""

    code: int
    changes: tuple[Change, ...] = ()
    detail: str = ""
    words: tuple[str, ...] = ()


def check(stack: auto.Stack) -> Result:
    """Refresh and preview ``stack``, expecting no changes; say what drifted if anything did."""
    changes: list[Change] = []
    words: list[str] = []

    def collect(event: auto.EngineEvent) -> None:
        said = event.diagnostic_event
        if said is not None:
            for line in said.message.splitlines():
                if line.startswith("drift: ") and line.removeprefix("drift: ") not in words:
                    words.append(line.removeprefix("drift: "))
        pre = event.resource_pre_event
        if pre is None or pre.metadata.op.value in UNCHANGED_OPS:
            return
        changes.append(
            Change(pre.metadata.op.value, pre.metadata.urn, tuple(pre.metadata.diffs or ()))
        )

    try:
        stack.preview(refresh=True, expect_no_changes=True, on_event=collect)
    except auto.errors.CommandError as exc:
        if changes:
            return Result(DRIFT, tuple(changes), str(exc), tuple(words))
        return Result(UNUSABLE, (), str(exc))
    if changes:  # a CLI that proposed changes without failing: still drift
        return Result(DRIFT, tuple(changes), words=tuple(words))
    return Result(NO_DRIFT)


def load_program(file: Path) -> Callable[[], None]:
    """``program`` from a Python file (loaded under its own name, so a ``__main__`` guard holds)."""
    spec = importlib.util.spec_from_file_location(f"drift_check_program_{file.parent.name}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"{file} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    program = getattr(module, "program", None)
    if not callable(program):
        raise ValueError(f"{file} defines no program() function")
    return program  # type: ignore[no-any-return]


def open_stack(stack: str, work_dir: Path, program_file: Path | None) -> auto.Stack:
    """Select an existing stack of the project in ``work_dir`` (inline when given a program)."""
    if program_file is None:
        return auto.select_stack(stack, work_dir=str(work_dir))
    project = yaml.safe_load((work_dir / "Pulumi.yaml").read_text(encoding="utf-8"))["name"]
    return auto.select_stack(
        stack,
        project_name=str(project),
        program=load_program(program_file),
        opts=auto.LocalWorkspaceOptions(work_dir=str(work_dir)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, run the check, print the verdict; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, help="the stack to check (e.g. prod, org/prod)")
    parser.add_argument(
        "--work-dir", type=Path, default=Path(), help="the project folder (with Pulumi.yaml)"
    )
    parser.add_argument(
        "--program", type=Path, help="run program() from this file inline (no language host)"
    )
    args = parser.parse_args(argv)
    try:
        stack = open_stack(args.stack, args.work_dir, args.program)
    except (auto.errors.CommandError, OSError, ValueError, KeyError) as exc:
        _say(f"drift check could not open stack {args.stack!r}: {exc}", error=True)
        return UNUSABLE
    result = check(stack)
    if result.code == NO_DRIFT:
        _say(f"no drift: stack {args.stack!r} matches the cluster")
    elif result.code == DRIFT:
        count = len(result.changes)
        _say(f"drift: stack {args.stack!r} differs from the cluster in {count} resource(s)")
        for change in result.changes:
            _say(f"  {change}")
        if result.words:
            _say("what drifted:")
            for line in result.words:
                _say(f"  {line}")
        _say("`pulumi up` heals it")
    else:
        _say(f"drift check failed to run on stack {args.stack!r}:\n{result.detail}", error=True)
    return result.code


def _say(text: str, *, error: bool = False) -> None:
    stream = sys.stderr if error else sys.stdout
    stream.write(text + "\n")
    stream.flush()


if __name__ == "__main__":
    sys.exit(main())
