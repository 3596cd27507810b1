"""The ``pulumi-lora`` command (also ``python -m pulumi_lora``), built on click.

Subcommands import their machinery lazily so ``pulumi-lora --help`` stays fast and a missing
optional dependency only affects the subcommand that needs it.
"""

from __future__ import annotations

import importlib
import os
import signal
from typing import Any

import click

from pulumi_lora._commands._options import COMMAND_SETTINGS
from pulumi_lora._version import __version__


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when named (or listed by ``--help``).

    ``pulumi-lora resync`` in the loop's image imports the loop and nothing else: not the
    testbed, not the Pulumi SDK's engine glue, and nothing that needs a writable file system.
    """

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy  # command name -> "module:attribute"

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._lazy.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attribute = target.split(":")
        try:
            command = getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as exc:
            if not _rig_missing(exc):
                raise
            return _needs_rig(cmd_name)
        if not isinstance(command, click.Command):  # pragma: no cover - a wiring mistake
            raise TypeError(f"{target} is not a click command")
        return command


_SUBCOMMANDS = {
    "testbed": "pulumi_lora.testing.testbed._cli:testbed_group",
    "status": "pulumi_lora._commands._operator:status_command",
    "doctor": "pulumi_lora._commands._operator:doctor_command",
    "coexistence-policy": "pulumi_lora._commands._operator:policy_command",
    "readiness-gate": "pulumi_lora._commands._operator:gate_command",
    "rbac": "pulumi_lora._commands._operator:rbac_command",
    "finish-delete": "pulumi_lora._commands._finish_delete:finish_delete_command",
    "component-moves": "pulumi_lora._commands._component_moves:moves_command",
    "resync": "pulumi_lora._commands._resync:resync_command",
    "stage": "pulumi_lora._commands._stage:stage_command",
    "stage-serve": "pulumi_lora._commands._stage:stage_serve_command",
    "unstage": "pulumi_lora._commands._stage:unstage_command",
    "verify-staged": "pulumi_lora._commands._stage:verify_command",
}


RIG = "pulumi-lora-testing"
"""The distribution that holds ``pulumi_lora.testing`` (emulator, testbed, chaos): apart from
the user's wheel, so a Pulumi program's environment carries only the product."""


def _rig_missing(exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` says the test rig is not installed (and not some other missing module)."""
    return (exc.name or "").startswith("pulumi_lora.testing")


def _needs_rig(name: str) -> click.Command:
    """A stand-in for a subcommand of the test rig when ``pulumi-lora-testing`` is absent:
    listed by ``--help``, and one line naming what to install when run."""

    @click.command(
        name,
        help=f"(needs {RIG}: pip install {RIG})",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )
    def missing() -> None:
        raise click.ClickException(f"pulumi-lora {name} needs the test rig: pip install {RIG}")

    return missing


@click.group(
    cls=LazyGroup,
    lazy=_SUBCOMMANDS,
    context_settings=COMMAND_SETTINGS,
)
@click.version_option(__version__, prog_name="pulumi-lora")
def cli() -> None:
    """LoRA adapters on SGLang in Kubernetes, as Pulumi infrastructure."""


@cli.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.pass_context
def emulate(ctx: click.Context) -> None:
    """Run the SGLang emulator; takes SGLang's launch flags (``emulate --help`` lists them)."""
    try:
        from pulumi_lora.testing.emulator import main as emulator_main
    except ModuleNotFoundError as exc:
        if not _rig_missing(exc):
            raise
        raise click.ClickException(
            f"pulumi-lora emulate needs the test rig: pip install {RIG}"
        ) from None
    ctx.exit(emulator_main(list(ctx.args)))


def main() -> None:
    """Console-script entry point."""
    _die_on_sigterm_as_pid_one()
    cli()


def _die_on_sigterm_as_pid_one() -> None:
    """As a container's first process, end on SIGTERM as any other process would.

    The kernel drops a signal sent to a PID namespace's init that has no handler for it, so a
    ``pulumi-lora resync`` told to stop while still importing (a pod deleted right after it was
    replaced, a rollout) would sit out the whole grace period until the kubelet's SIGKILL. The
    loop installs its own graceful handler once it runs; until then there is nothing to drain.
    (A SIGTERM during the interpreter's own start, before this line, is still dropped.)
    """
    if os.getpid() == 1:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
