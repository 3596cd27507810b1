"""``python -m pulumi_lora.testing.chaos``: one chaos run, its report printed (1: a violation)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from pulumi_lora.testing.chaos._driver import run_chaos
from pulumi_lora.testing.chaos._setup import ChaosOptions

_DEFAULTS = ChaosOptions()


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option(
    "--duration",
    type=click.FloatRange(min=5),
    default=_DEFAULTS.duration,
    help="Seconds of faults.",
)
@click.option(
    "--gap",
    type=(click.FloatRange(min=0.1), click.FloatRange(min=0.1)),
    default=_DEFAULTS.gap,
    help="Seconds between steps: LOW HIGH (uniform).",
)
@click.option(
    "--seed",
    type=int,
    default=_DEFAULTS.seed,
    help="Seed of the fault schedule (same seed, same run).",
)
@click.option(
    "--adapters",
    type=click.IntRange(min=1),
    default=_DEFAULTS.adapters,
    help="LoRAAdapters declared.",
)
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    default=_DEFAULTS.replicas,
    help="Pods of the InferenceService.",
)
@click.option(
    "--bound",
    type=click.FloatRange(min=1),
    default=_DEFAULTS.bound,
    help="Seconds the loop has to heal the service after the last fault.",
)
@click.option("--no-apiserver-restart", is_flag=True, help="Skip the apiserver restart.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep logs, state and the testbed's files here  [default: a temporary dir]",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the report as JSON to this file.",
)
def main(
    *,
    duration: float,
    gap: tuple[float, float],
    seed: int,
    adapters: int,
    replicas: int,
    bound: float,
    no_apiserver_restart: bool,
    workdir: Path | None,
    json_path: Path | None,
) -> None:
    """Run one chaos scenario on a private testbed and print what it measured."""
    options = ChaosOptions(
        duration=duration,
        gap=gap,
        seed=seed,
        adapters=adapters,
        replicas=replicas,
        bound=bound,
        apiserver_restart=not no_apiserver_restart,
        workdir=workdir,
    )
    report = run_chaos(options, say=lambda line: click.echo(line, err=True))
    click.echo(report.render())
    if json_path is not None:
        json_path.write_text(json.dumps(report.as_dict(), indent=2), encoding="utf-8")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
