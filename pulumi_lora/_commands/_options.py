"""The options several commands share: the cluster's credentials, how to reach pods, the output.

Declared once, so every command names, explains and converts them alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from pulumi_lora._kube._source import KubeSource
from pulumi_lora._models import Transport

F = TypeVar("F", bound=Callable[..., Any])

COMMAND_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
"""Every command takes ``-h`` as well as ``--help``."""


def kube_source(*, checked: bool = True) -> Callable[[F], F]:
    """``--kubeconfig`` and ``--context``, handed to the command as one ``kube: KubeSource``.

    ``checked``: a missing kubeconfig file is a usage error (exit 2) before the command runs;
    unchecked, the command reports it as credentials that do not load, as the loop does.
    """

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_source(
            *args: Any, kubeconfig: str | None, context: str | None, **kwargs: Any
        ) -> Any:
            return command(*args, kube=KubeSource(kubeconfig, context), **kwargs)

        with_context = click.option(
            "--context", help="kubeconfig context (default: its current context)"
        )(with_source)
        with_kubeconfig = click.option(
            "--kubeconfig",
            type=click.Path(exists=checked, dir_okay=False),
            help="kubeconfig file (default: KUBECONFIG, ~/.kube/config, then the in-cluster "
            "account)",
        )(with_context)
        return cast("F", with_kubeconfig)

    return decorate


def transport(help_text: str) -> Callable[[F], F]:
    """``--transport direct|proxy`` (the delegated transport is the loop's, never chosen here),
    handed over as a ``Transport`` or None."""
    return click.option(
        "--transport",
        type=click.Choice([Transport.DIRECT.value, Transport.PROXY.value]),
        default=None,
        callback=lambda _ctx, _param, value: Transport(value) if value else None,
        help=help_text,
    )


output = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json (stable keys, docs/operations.md) for scripts",
)
"""``-o table|json``."""
