"""``pulumi-lora stage``: the command the staging Job runs in the cluster.

It stages one source at ``<root>/<content key>``, prints one JSON result line on stdout and
writes the same JSON to ``/dev/termination-log`` when that file exists (Kubernetes hands it to
whoever reads the Job's pod: the provider). Progress and events are JSON lines on stderr. A
failure exits 1 with the message (on stderr, and in the termination log as ``{"error": ...}``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from pulumi_lora._staging._errors import StagingError
from pulumi_lora._staging._source import parse_digest, parse_source
from pulumi_lora._staging._verify import ServerLimits

__all__ = ["TERMINATION_LOG", "stage_command"]

TERMINATION_LOG = Path("/dev/termination-log")
"""Where Kubernetes reads a container's termination message (``terminationMessagePath``)."""
TERMINATION_LIMIT = 4096
"""Bytes Kubernetes keeps of a termination message."""

_log = logging.getLogger("pulumi_lora.staging")


def _emit(event: str, **fields: Any) -> None:
    line = {"time": round(time.time(), 3), "event": event} | {
        k: v for k, v in fields.items() if v is not None
    }
    click.echo(json.dumps(line, separators=(",", ":")), err=True)


def termination_message(document: dict[str, Any]) -> str:
    """``document`` as JSON within Kubernetes' 4096 bytes: the per-file facts are dropped (the
    file count kept) when they don't fit. Pure."""
    text = json.dumps(document, separators=(",", ":"))
    if len(text.encode()) <= TERMINATION_LIMIT or not isinstance(document.get("files"), dict):
        return text[:TERMINATION_LIMIT]
    return json.dumps(
        {**document, "files": len(document["files"]), "filesTruncated": True},
        separators=(",", ":"),
    )[:TERMINATION_LIMIT]


def _terminate(document: dict[str, Any], path: Path) -> None:
    if path.exists():
        path.write_text(termination_message(document))


@click.command(
    "stage",
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.option(
    "--source",
    required=True,
    help="hf://org/repo@COMMIT, s3://bucket/prefix/ or https://host/path/",
)
@click.option(
    "--digest",
    "digests",
    multiple=True,
    metavar="FILE=SHA256",
    help="A file to stage and its sha256 (repeat per file).",
)
@click.option(
    "--file",
    "files",
    multiple=True,
    metavar="FILE",
    help="A file to stage without a pinned digest (repeat; https:// needs a list).",
)
@click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/adapters"),
    help="The volume's mount: the adapter lands at ROOT/<content key>.",
)
@click.option("--s3-endpoint", metavar="URL", help="A custom S3 endpoint (MinIO and the like).")
@click.option(
    "--allow-mutable",
    is_flag=True,
    help="Stage a branch, a tag or an unpinned URL without a digest for every file.",
)
@click.option("--max-lora-rank", type=click.IntRange(min=1), help="The server's --max-lora-rank.")
@click.option(
    "--lora-target-modules",
    multiple=True,
    metavar="NAME",
    help="The server's --lora-target-modules (repeat, or one space-separated value).",
)
@click.option(
    "--termination-log",
    type=click.Path(path_type=Path, dir_okay=False),
    default=TERMINATION_LOG,
    hidden=True,
)
def stage_command(  # noqa: PLR0917 - one parameter per option, as click passes them
    source: str,
    digests: Sequence[str],
    files: Sequence[str],
    root: Path,
    s3_endpoint: str | None,
    allow_mutable: bool,
    max_lora_rank: int | None,
    lora_target_modules: Sequence[str],
    termination_log: Path,
) -> None:
    """Stage an adapter's files at ROOT/<content key>: fetched, verified, renamed into place."""
    modules = tuple(name for value in lora_target_modules for name in value.split())
    limits = ServerLimits(max_lora_rank=max_lora_rank, target_modules=modules or None)
    try:
        from pulumi_lora._staging._fetch import stage  # noqa: PLC0415 - the extra's libraries

        pinned = dict(parse_digest(text) for text in digests)
        request = parse_source(
            source,
            files=files,
            digests=pinned,
            s3_endpoint=s3_endpoint,
            allow_mutable=allow_mutable,
        )
        result = stage(request, root, limits=limits, log=_emit)
    except StagingError as exc:
        _terminate({"error": str(exc), "reason": exc.reason, "file": exc.file}, termination_log)
        raise click.ClickException(str(exc)) from None
    document = result.document()
    click.echo(json.dumps(document, separators=(",", ":")))
    _terminate(document, termination_log)
