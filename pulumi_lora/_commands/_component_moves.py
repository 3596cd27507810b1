"""``pulumi-lora component-moves``: print the commands that move a stack made by 0.2's component.

The plan is ``_pulumi._migration``'s; this command writes the import file, prints the lines and
runs nothing (docs/migration.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from pulumi_lora._commands._options import COMMAND_SETTINGS
from pulumi_lora._pulumi._migration import commands, plan


@click.command("component-moves", context_settings=COMMAND_SETTINGS)
@click.option(
    "--import-file",
    default="lora-imports.json",
    show_default=True,
    type=click.Path(dir_okay=False, writable=True),
    help="Where to write the file `pulumi import --file` reads.",
)
@click.argument("export", type=click.File("r"), default="-")
def moves_command(import_file: str, export: Any) -> None:
    """Print the commands that move a stack made by 0.2's LoRAAdapter component (YAML,
    TypeScript) to the custom resource, from `pulumi stack export` (a file, or stdin).

    Runs nothing: `pulumi stack export | pulumi-lora component-moves`, read the lines, run
    them in the project's folder. Nothing is loaded, unloaded or written to the cluster.
    """
    try:
        exported = json.load(export)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"not the JSON of `pulumi stack export`: {exc}") from exc
    moves = plan(exported)
    if not moves.adapters:
        click.echo("nothing to move: no LoRAAdapter component with its dynamic child in this state")
        return
    if moves.blockers:
        raise click.ClickException(
            "these resources have a LoRAAdapter component as their parent; give them another "
            "parent first (the component leaves the state):\n  " + "\n  ".join(moves.blockers)
        )
    Path(import_file).write_text(json.dumps(moves.imports, indent=2) + "\n", encoding="utf-8")
    click.echo(f"# {moves.adapters} LoRAAdapter component(s) to move; {import_file} written.")
    click.echo("# Run in the project's folder, with this release's provider/ in place:")
    for line in commands(moves, import_file):
        click.echo(line)
