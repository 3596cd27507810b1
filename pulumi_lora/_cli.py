"""The ``pulumi-lora`` command (also ``python -m pulumi_lora``), built on click.

Subcommands import their machinery lazily so ``pulumi-lora --help`` stays fast and a missing
optional dependency only affects the subcommand that needs it.
"""

from __future__ import annotations

import click

from pulumi_lora._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    from pulumi_lora.testing.emulator import main as emulator_main

    ctx.exit(emulator_main(list(ctx.args)))


def _mount_testbed() -> None:
    from pulumi_lora.testing.testbed._cli import testbed_group

    cli.add_command(testbed_group, "testbed")


def _mount_ops() -> None:
    from pulumi_lora._ops_cli import doctor_command, policy_command, status_command

    cli.add_command(status_command, "status")
    cli.add_command(doctor_command, "doctor")
    cli.add_command(policy_command, "coexistence-policy")


def _mount_moves() -> None:
    from pulumi_lora._moves import moves_command

    cli.add_command(moves_command, "component-moves")


def _mount_resync() -> None:
    from pulumi_lora._resync._cli import resync_command

    cli.add_command(resync_command, "resync")


_mount_testbed()
_mount_ops()
_mount_moves()
_mount_resync()


def main() -> None:
    """Console-script entry point."""
    cli()
