"""The staging branch of pulumi-lora's exception tree.

::

    PulumiLoRAError
    └── StagingError                 an adapter's weights could not be staged
        ├── SourceRefused            the declaration itself: a malformed source, digest or file
        │   │                        name, or a mutable reference without digests
        │   └── MutableSourceRefused
        ├── SourceUnauthorized       the source said 401/403: the credentials are missing or wrong
        ├── SourceFileMissing        the source has no such repository, revision, bucket or file
        ├── SourceUnreachable        retryable: no usable answer from the source
        ├── DigestMismatch           a staged file is not what the digests pin (or is extra)
        ├── AdapterConfigInvalid     ``adapter_config.json`` missing, unreadable, or not LoRA
        ├── AdapterIncompatible      rank or target modules beyond the server's LoRA flags
        ├── VolumeFull               ENOSPC while writing the volume
        └── VolumeUnusable           the destination root cannot be written or renamed into

Every message names the file (or the cause) and says what to do. Messages are built from the
source as declared (which holds no credential: userinfo and query strings are refused) and from
file names, never from request headers or environment values.
"""

# ruff: noqa: N818 - the names say what happened, as in pulumi_lora._errors

from __future__ import annotations

from typing import ClassVar

from pulumi_lora._errors import PulumiLoRAError

__all__ = [
    "AdapterConfigInvalid",
    "AdapterIncompatible",
    "DigestMismatch",
    "MutableSourceRefused",
    "SourceFileMissing",
    "SourceRefused",
    "SourceUnauthorized",
    "SourceUnreachable",
    "StagingError",
    "VolumeFull",
    "VolumeUnusable",
]


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
        "(--digest FILE=SHA256); or accept changing content explicitly with allow_mutable"
    )


class SourceUnauthorized(StagingError):
    """The source answered 401 or 403."""

    reason = "SourceUnauthorized"
    advice = (
        "give the stager credentials through the Job's Secret environment (HF_TOKEN for hf://; "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for s3://), with read access to it"
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
