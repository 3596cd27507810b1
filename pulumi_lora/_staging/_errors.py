"""The staging branch of pulumi-lora's exception tree, under ``StagingError``.

Messages name the file or cause and what to do, never request headers or environment values.
`as_staging_error` is the one place foreign errors become staging errors.
"""

# ruff: noqa: N818 - the names say what happened, as in pulumi_lora._errors

from __future__ import annotations

from typing import ClassVar

from pulumi_lora._errors import PulumiLoRAError

__all__ = [
    "AdapterConfigInvalid",
    "AdapterIncompatible",
    "DigestMismatch",
    "InsecureRedirect",
    "MutableSourceRefused",
    "SourceFileMissing",
    "SourceRefused",
    "SourceTooLarge",
    "SourceTooSlow",
    "SourceUnauthorized",
    "SourceUnreachable",
    "StagingError",
    "VolumeFull",
    "VolumeNotMounted",
    "VolumeUnusable",
    "as_staging_error",
    "reported",
]

FOREIGN_MESSAGE_CHARS = 500
"""At most this much of a foreign exception's own message is quoted."""


class StagingError(PulumiLoRAError):
    """An adapter's weights could not be staged; ``file`` names the file concerned (if one is)."""

    reason = "StagingFailed"
    advice: ClassVar[str] = ""
    """What to do, appended to every message of the class."""

    def __init__(self, message: str, *, file: str | None = None) -> None:
        self.file = file
        self.detail = message
        super().__init__(f"{message}: {self.advice}" if self.advice else message)


class SourceRefused(StagingError):
    """The declared source, digests or file names are refused before anything is fetched."""

    reason = "InvalidSource"


class MutableSourceRefused(SourceRefused):
    """A reference whose content can change (a branch, a tag, an unpinned URL or prefix) was
    declared without a digest for every file."""

    reason = "MutableSource"
    advice = (
        "pin it: an hf:// source at a 40-hex commit, or a sha256 digest for every file "
        "(digests {FILE: SHA256}, or --digest FILE=SHA256); or accept changing content "
        "explicitly with allow_mutable"
    )


class SourceUnauthorized(StagingError):
    """The source answered 401 or 403."""

    reason = "SourceUnauthorized"
    advice = (
        "give the stager credentials with read access to it: a Secret named by "
        "source_secret_name (HF_TOKEN for hf://; AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for "
        "s3://), or for s3:// a ServiceAccount with a workload identity (IRSA, Pod Identity) named "
        "by source_service_account"
    )


class SourceFileMissing(StagingError):
    """The source has no such repository, revision, bucket or file."""

    reason = "SourceFileMissing"
    advice = "check the source, its revision and the file names (--digest, --file)"


class SourceUnreachable(StagingError):
    """No usable answer from the source: connection refused or reset, timeouts, 5xx."""

    retryable = True
    reason = "SourceUnreachable"
    advice = "check the endpoint and the network from the stager's pod; staging again may work"


class SourceTooSlow(SourceUnreachable):
    """The fetch did not end within the overall deadline: a stalled or dripping source."""

    reason = "SourceTooSlow"
    advice = (
        "the source is too slow or stalled: check the network from the stager's pod, or raise "
        "--deadline for a large adapter; the partial download was removed"
    )


class SourceTooLarge(StagingError):
    """The source declares or sends more bytes than the overall limit allows."""

    reason = "SourceTooLarge"
    advice = (
        "check the source (an endless or wrong answer?); raise --max-bytes if the adapter is "
        "really that large; the partial download was removed"
    )


class InsecureRedirect(StagingError):
    """An https source (or Hub endpoint) redirected to plain http, which is never followed."""

    reason = "InsecureRedirect"
    advice = (
        "the source must stay on https: fix its redirect, or declare the final https URL; "
        "nothing was fetched over plain http"
    )


class DigestMismatch(StagingError):
    """A file's sha256 is not the pinned one, or the directory holds a file nothing pins."""

    reason = "DigestMismatch"
    advice = (
        "the source serves other bytes than the digests pin: check the digest and the source's "
        "revision; nothing was put in place"
    )


class AdapterConfigInvalid(StagingError):
    """``adapter_config.json`` is missing, is not JSON, or does not describe a LoRA adapter."""

    reason = "InvalidAdapterConfig"
    advice = (
        "stage a PEFT LoRA adapter directory: adapter_config.json with peft_type LORA, r and "
        "target_modules"
    )


class AdapterIncompatible(StagingError):
    """The adapter's rank or target modules exceed the server's ``--max-lora-rank`` /
    ``--lora-target-modules``."""

    reason = "IncompatibleAdapter"
    advice = (
        "raise --max-lora-rank or widen --lora-target-modules in the InferenceService's "
        "spec.extraArgs, or stage an adapter that fits them"
    )


class VolumeFull(StagingError):
    """The destination volume ran out of space (ENOSPC or EDQUOT)."""

    reason = "VolumeFull"
    advice = (
        "the volume is full: grow the claim, or remove staged directories no adapter uses; "
        "the partial download was removed"
    )


class VolumeUnusable(StagingError):
    """The destination root cannot be created, written or renamed into."""

    reason = "VolumeUnusable"
    advice = "mount the claim writable at the root given to the stager (and as its user)"


class VolumeNotMounted(StagingError):
    """The target's SGLang container mounts no PersistentVolumeClaim to stage into, or several
    and none is named."""

    reason = "VolumeNotMounted"
    advice = (
        "mount one claim in the SGLang container (the InferenceService's extraVolumes and "
        "extraVolumeMounts), or set volume_claim"
    )


def _subclasses(kind: type[StagingError]) -> list[type[StagingError]]:
    found = [kind]
    for sub in kind.__subclasses__():
        found += _subclasses(sub)
    return found


def reported(reason: str, message: str, file: str | None) -> StagingError:
    """The error a stager reported in its termination message (its whole message, advice
    included), as the class whose ``reason`` it names (``StagingError`` for any other). Pure."""
    kind = {k.reason: k for k in reversed(_subclasses(StagingError))}.get(reason, StagingError)
    error = kind.__new__(kind)
    Exception.__init__(error, message)
    error.file, error.detail = file, message
    return error


def as_staging_error(exc: BaseException, *, file: str | None = None) -> StagingError:
    """``exc`` as a staging error: itself if it is one, else a `StagingError` naming its type,
    the file being staged and (the start of) its message. Pure.

    The clients translate their libraries' failures they know; this is where anything else
    (a malformed answer, a library's ``ValueError``, a bug) becomes a message the Job reports.
    """
    if isinstance(exc, StagingError):
        return exc
    where = f" while staging {file}" if file else ""
    text = str(exc)
    if len(text) > FOREIGN_MESSAGE_CHARS:
        text = text[:FOREIGN_MESSAGE_CHARS] + "…"
    detail = f": {text}" if text else ""
    return StagingError(f"unexpected {type(exc).__name__}{where}{detail}", file=file)
