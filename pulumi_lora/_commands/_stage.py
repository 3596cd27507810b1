"""``pulumi-lora stage``, ``stage-serve``, ``unstage`` and ``verify-staged``: the stager's commands.

A failure exits non-zero with a JSON message, never a traceback; the termination message always
fits Kubernetes' 4096 bytes (`termination_message`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from pulumi_lora._commands._options import COMMAND_SETTINGS
from pulumi_lora._staging._errors import as_staging_error
from pulumi_lora._staging._serve import PORT
from pulumi_lora._staging._source import StagingRequest, parse_digest, parse_source
from pulumi_lora._staging._transfer import DEFAULT_DEADLINE, TransferLimits
from pulumi_lora._staging._verify import ServerLimits

__all__ = [
    "TERMINATION_LOG",
    "stage_command",
    "stage_serve_command",
    "unstage_command",
    "verify_command",
]

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
    """``document`` as one JSON document within Kubernetes' 4096 bytes. Pure.

    Kubernetes keeps the *last* 4096 bytes of a longer message, which would not parse: the text
    is never cut. The per-file facts become a count first; then every string value longer than
    a common bound (a long error, a file name) is shortened in the middle to it, marked with
    ``…``, the bound the largest that fits.
    """
    text = _json(document)
    if len(text) <= TERMINATION_LIMIT:
        return text
    if isinstance(document.get("files"), dict):
        document = {**document, "files": len(document["files"]), "filesTruncated": True}
        text = _json(document)
        if len(text) <= TERMINATION_LIMIT:
            return text

    def bounded(limit: int) -> dict[str, Any]:
        return {
            key: _shorten(value, limit)
            if isinstance(value, str) and len(_json(value)) > limit
            else value
            for key, value in document.items()
        }

    low, high = 0, TERMINATION_LIMIT  # the bound on each string's JSON: ``low`` fits, if any
    while low < high:
        middle = (low + high + 1) // 2
        if len(_json(bounded(middle))) <= TERMINATION_LIMIT:
            low = middle
        else:
            high = middle - 1
    text = _json(bounded(low))
    if len(text) > TERMINATION_LIMIT:  # keys and numbers alone do not fit
        return _json({"error": "the termination message did not fit", "reason": "TooLong"})
    return text


def _json(value: Any) -> str:
    """Compact JSON, ASCII only (so its length in characters is its length in bytes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def _shorten(text: str, budget: int) -> str:
    """``text`` cut in the middle (its start says what failed, its end what to do), ``…``
    marking the cut, to the longest that encodes in at most ``budget`` bytes of JSON. Pure."""

    def cut(keep: int) -> str:
        head = keep - keep // 3
        return text[:head] + "…" + text[len(text) - (keep - head) :]

    low, high = 0, len(text) - 1  # characters kept: ``low`` always fits (or nothing does)
    while low < high:
        middle = (low + high + 1) // 2
        if len(_json(cut(middle))) <= budget:
            low = middle
        else:
            high = middle - 1
    return cut(low) if len(_json(cut(low))) <= budget else ""


def _terminate(document: dict[str, Any], path: Path) -> None:
    """Write the termination message when the file exists (as it does in a pod); a log that
    cannot be written is said on stderr, not raised over the failure being reported."""
    if not path.exists():
        return
    try:
        path.write_text(termination_message(document), encoding="utf-8")
    except OSError as exc:
        _emit("termination_log_unwritable", path=str(path), error=exc.strerror)


_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_FACTORS = {
    None: 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}


class _Bytes(click.ParamType[int]):
    """A byte count: an integer, or a Kubernetes-style quantity (``500Mi``, ``16Gi``, ``2G``)."""

    name = "BYTES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = _QUANTITY.fullmatch(str(value).strip())
        if match is None or int(match[1]) == 0:
            self.fail(f"{value!r} is not a positive byte count (e.g. 500Mi, 16Gi)", param, ctx)
        return int(match[1]) * _FACTORS[match[2]]


class _StageCommand(click.Command):
    """The command, whose usage errors (an unknown option, a bad value) reach the termination
    log too: the provider reads only that (an image older than the options it is given, say)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        given = list(args)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            document = {"error": exc.format_message(), "reason": "InvalidArguments", "file": None}
            _terminate(document, _termination_log_in(given))
            raise


def _termination_log_in(args: Sequence[str]) -> Path:
    """The ``--termination-log`` among raw arguments (the default when absent). Pure."""
    for index, arg in enumerate(args):
        if arg.startswith("--termination-log="):
            return Path(arg.partition("=")[2])
        if arg == "--termination-log" and index + 1 < len(args):
            return Path(args[index + 1])
    return TERMINATION_LOG


_TERMINATION_LOG = click.option(
    "--termination-log",
    type=click.Path(path_type=Path, dir_okay=False),
    default=TERMINATION_LOG,
    hidden=True,
)
"""Where the command writes its termination message (a pod's; hidden: tests point it away)."""


def _decorated(
    function: Callable[..., None], options: Sequence[Callable[[Callable[..., None]], Any]]
) -> Callable[..., None]:
    """``function`` with ``options`` applied, the first one outermost (as written above it)."""
    for option in reversed(options):
        function = option(function)
    return function


def _fetch_options(function: Callable[..., None]) -> Callable[..., None]:
    """The options ``stage`` and ``stage-serve`` share: where, how much, how long, what the
    server accepts, and the termination log."""
    return _decorated(
        function,
        (
            click.option(
                "--root",
                type=click.Path(path_type=Path, file_okay=False),
                default=Path("/adapters"),
                help="The volume's mount: an adapter lands at ROOT/<content key>.",
            ),
            click.option(
                "--max-bytes",
                type=_Bytes(),
                default="16Gi",
                help="At most this many bytes fetched over an adapter's files (500Mi, 16Gi, …).",
            ),
            click.option(
                "--deadline",
                type=click.FloatRange(min=0, min_open=True, max=7 * 86400),
                default=DEFAULT_DEADLINE,
                metavar="SECONDS",
                help="A fetch ends within this many seconds.",
            ),
            click.option(
                "--max-lora-rank", type=click.IntRange(min=1), help="The server's --max-lora-rank."
            ),
            click.option(
                "--lora-target-modules",
                multiple=True,
                metavar="NAME",
                help="The server's --lora-target-modules (repeat, or one space-separated value).",
            ),
            _TERMINATION_LOG,
        ),
    )


def _server_limits(max_lora_rank: int | None, lora_target_modules: Sequence[str]) -> ServerLimits:
    modules = tuple(name for value in lora_target_modules for name in value.split())
    return ServerLimits(max_lora_rank=max_lora_rank, target_modules=modules or None)


_SETTINGS = {**COMMAND_SETTINGS, "show_default": True}


@click.command("stage", cls=_StageCommand, context_settings=_SETTINGS)
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
@click.option("--s3-endpoint", metavar="URL", help="A custom S3 endpoint (MinIO and the like).")
@click.option(
    "--s3-public",
    is_flag=True,
    help="The s3:// bucket is public: fetch without signing (else credentials are required).",
)
@click.option(
    "--allow-mutable",
    is_flag=True,
    help="Stage a branch, a tag or an unpinned URL without a digest for every file.",
)
@_fetch_options
def stage_command(  # noqa: PLR0917 - one parameter per option, as click passes them
    source: str,
    digests: Sequence[str],
    files: Sequence[str],
    s3_endpoint: str | None,
    s3_public: bool,
    allow_mutable: bool,
    root: Path,
    max_bytes: int,
    deadline: float,
    max_lora_rank: int | None,
    lora_target_modules: Sequence[str],
    termination_log: Path,
) -> None:
    """Stage an adapter's files at ROOT/<content key>: fetched, verified, renamed into place."""
    limits = _server_limits(max_lora_rank, lora_target_modules)
    try:
        from pulumi_lora._staging._fetch import stage  # noqa: PLC0415 - the extra's libraries

        pinned = dict(parse_digest(text) for text in digests)
        request = parse_source(
            source,
            files=files,
            digests=pinned,
            s3_endpoint=s3_endpoint,
            # the Hub mirror the fetch uses (HF_ENDPOINT) is part of the content key
            hf_endpoint=os.environ.get("HF_ENDPOINT") if source.startswith("hf://") else None,
            s3_public=s3_public,
            allow_mutable=allow_mutable,
        )
        transfer = TransferLimits(max_bytes=max_bytes, deadline=deadline)
        document = stage(request, root, limits=limits, transfer=transfer, log=_emit).document()
    except Exception as exc:  # every failure, a staging error or not, reaches the log
        error = as_staging_error(exc)
        _terminate(
            {"error": str(error), "reason": error.reason, "file": error.file}, termination_log
        )
        raise click.ClickException(str(error)) from None
    click.echo(json.dumps(document, separators=(",", ":")))
    _terminate(document, termination_log)


@click.command("stage-serve", cls=_StageCommand, context_settings=_SETTINGS)
@click.option(
    "--token-sha256",
    required=True,
    metavar="HEX",
    help="The sha256 of the token every call but /healthz must carry (the provider's).",
)
@click.option("--port", type=click.IntRange(1, 65535), default=PORT, help="Where to listen.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=2.0,
    metavar="SECONDS",
    help="End this long after the provider's last held connection dropped, nothing running.",
)
@click.option(
    "--start-grace",
    type=click.FloatRange(min=0),
    default=120.0,
    metavar="SECONDS",
    help="End this long after starting when no provider ever held a connection.",
)
@_fetch_options
def stage_serve_command(  # noqa: PLR0917 - one parameter per option, as click passes them
    token_sha256: str,
    port: int,
    grace: float,
    start_grace: float,
    root: Path,
    max_bytes: int,
    deadline: float,
    max_lora_rank: int | None,
    lora_target_modules: Sequence[str],
    termination_log: Path,
) -> None:
    """Serve stagings, verifications and removals on ROOT to the provider that started this
    server (its stager Job), while it holds a connection (docs/staging.md)."""
    limits = _server_limits(max_lora_rank, lora_target_modules)
    served = {"stagings": 0}

    def run() -> dict[str, Any]:
        from pulumi_lora._staging._claim import (  # noqa: PLC0415
            STALE_MARGIN,
            collect,
            unstage,
            verify_keys,
        )
        from pulumi_lora._staging._fetch import stage  # noqa: PLC0415 - the extra's libraries
        from pulumi_lora._staging._serve import Work, serve  # noqa: PLC0415

        def staged(request: StagingRequest, seconds: float) -> dict[str, Any]:
            served["stagings"] += 1
            transfer = TransferLimits(max_bytes=max_bytes, deadline=seconds)
            return stage(request, root, limits=limits, transfer=transfer, log=_emit).document()

        stale = deadline + STALE_MARGIN  # a temporary directory past it is no live staging
        work = Work(
            stage=staged,
            verify=lambda keys: {"keys": verify_keys(root, keys)},
            unstage=lambda keys: dict(unstage(root, keys, stale=stale)),
            deadline=deadline,
            collect=lambda named, released, grace: dict(
                collect(root, named, grace=grace, stale=stale, released=released)
            ),
        )
        serve(
            work,
            token_sha256,
            port=port,
            grace=grace,
            start_grace=start_grace,
            say=lambda text: _emit("stage_serve", message=text),
        )
        return served

    _report(run, termination_log)


def _claim_command(name: str) -> Callable[[Callable[..., None]], click.Command]:
    """The options every command on a claim's staged directories takes: the content keys, the
    volume's ``--root`` and the termination log."""

    def decorate(function: Callable[..., None]) -> click.Command:
        function = _decorated(
            function,
            (
                click.argument("keys", nargs=-1, required=True),
                click.option(
                    "--root",
                    type=click.Path(path_type=Path, file_okay=False),
                    default=Path("/adapters"),
                    help="The volume's mount, where ROOT/<content key> was staged.",
                ),
                _TERMINATION_LOG,
            ),
        )
        return click.command(name, context_settings=_SETTINGS)(function)

    return decorate


def _report(make: Callable[[], dict[str, Any]], termination_log: Path) -> dict[str, Any]:
    """``make()``'s document on stdout and in the termination log; any failure reaches the log
    as ``{"error", "reason"}`` (as for ``stage``) and exits 1."""
    try:
        document = make()
    except Exception as exc:
        error = as_staging_error(exc)
        _terminate({"error": str(error), "reason": error.reason, "file": None}, termination_log)
        raise click.ClickException(str(error)) from None
    click.echo(json.dumps(document, separators=(",", ":")))
    _terminate(document, termination_log)
    return document


@_claim_command("unstage")
def unstage_command(keys: Sequence[str], root: Path, termination_log: Path) -> None:
    """Remove staged directories ROOT/KEY that nothing names any more (the provider's cleanup
    Job runs this once no CR and no pod names them)."""
    from pulumi_lora._staging._claim import unstage  # noqa: PLC0415 - one command's module

    document = _report(lambda: dict(unstage(root, keys)), termination_log)
    _emit("unstaged", **document)


@_claim_command("verify-staged")
def verify_command(keys: Sequence[str], root: Path, termination_log: Path) -> None:
    """Check staged directories ROOT/KEY against the manifests the stager recorded, fetching
    nothing: {"keys": {KEY: "verified" | "missing" | what is wrong}} (a refresh's Job)."""
    from pulumi_lora._staging._claim import verify_keys  # noqa: PLC0415 - one command's module

    _report(lambda: {"keys": verify_keys(root, keys)}, termination_log)
