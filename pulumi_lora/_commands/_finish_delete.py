"""``pulumi-lora finish-delete``: finish a deletion that a failed ``pulumi destroy`` left.

Releases a CR held by pulumi-lora's finalizer without Pulumi (docs/protocol.md rule 4). Thin:
the work is ``_lifecycle.finish_delete``.
"""

from __future__ import annotations

import click

from pulumi_lora._commands._options import COMMAND_SETTINGS, kube_source, transport
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig, finish_delete
from pulumi_lora._models import Transport

__all__ = ["finish_delete_command"]


@click.command("finish-delete", context_settings=COMMAND_SETTINGS)
@click.argument("adapter", metavar="NAMESPACE/NAME")
@kube_source()
@transport("how to reach the pods (default: the transport the CR records)")
@click.option(
    "--force",
    is_flag=True,
    help="let the CR go without unloading (its pods may still serve the adapter): for a "
    "namespace being deleted whose pods are already gone",
)
def finish_delete_command(
    adapter: str, kube: KubeSource, transport: Transport | None, force: bool
) -> None:
    """Unload the adapter of a LoRAAdapter whose deletion a failed `pulumi destroy` left from
    every Ready pod, then let the CR go (exit 1 when a pod still refuses)."""
    config = ProviderConfig(kube=kube)
    try:
        click.echo(finish_delete(adapter, config, transport, force=force))
    except PulumiLoRAError as exc:
        raise click.ClickException(str(exc)) from exc
