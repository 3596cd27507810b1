"""Where an adapter's weights live, as values: parsing, the pinning rule, the content key. Pure.

A request is pinned by an ``hf://`` commit or a digest per file; unpinned ones are refused unless
``allow_mutable``. The content key names the staged directory.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Self
from urllib.parse import urlsplit

import msgspec

from pulumi_lora._staging._errors import MutableSourceRefused, SourceRefused

__all__ = [
    "KEY_HEX",
    "PUBLIC_HUB",
    "HfSource",
    "HttpsSource",
    "S3Source",
    "Source",
    "SourceKind",
    "StagingRequest",
    "content_key",
    "declared_request",
    "is_cluster_internal",
    "parse_digest",
    "parse_source",
    "source_endpoint",
]

KEY_HEX = 16
"""Hex characters of a content key (64 bits: as LLMKube's cache key)."""
PUBLIC_HUB = "https://huggingface.co"
"""The public Hub's endpoint (``HF_ENDPOINT``'s default): an hf:// source from it names none."""

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# huggingface_hub's own rule for repo ids (validate_repo_id): one optional namespace, no "--"
# or "..", at most 96 characters.
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_REVISION = re.compile(r"^[\w.][\w./-]{0,254}$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_LOOPBACK_NAMES = frozenset({"localhost"})


class SourceKind(StrEnum):
    """The scheme of a source."""

    HF = "hf"
    S3 = "s3"
    HTTPS = "https"


class _Value(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A value with a JSON form (``kind`` tags a source: ``{"kind": "hf", ...}``)."""


class _SourceValue(_Value, frozen=True, kw_only=True, omit_defaults=True):
    """A source's JSON leaves out what is at its default, so a request that uses no newer
    setting reads the same to a stager of an earlier version."""


class HfSource(_SourceValue, tag_field="kind", tag=SourceKind.HF.value, kw_only=True, frozen=True):
    """A Hugging Face repository at a revision, on the public Hub or a mirror."""

    repo_id: str
    """``org/repo``."""
    revision: str = "main"
    """A 40-hex commit (pinned) or a branch or tag (mutable)."""
    endpoint: str | None = None
    """The Hub it comes from (a mirror, as ``HF_ENDPOINT``); ``None``: the public Hub. Part of
    the content key: a mirror's ``org/repo@commit`` may hold other bytes."""

    @property
    def pinned(self) -> bool:
        """Whether the revision is a commit, whose content never changes."""
        return _COMMIT.fullmatch(self.revision) is not None

    @property
    def uri(self) -> str:
        """The canonical ``hf://`` form."""
        return f"hf://{self.repo_id}@{self.revision}"


class S3Source(_SourceValue, tag_field="kind", tag=SourceKind.S3.value, kw_only=True, frozen=True):
    """Objects under a prefix of an S3-compatible bucket."""

    bucket: str
    prefix: str = ""
    """Empty, or ending in ``/``."""
    endpoint: str | None = None
    """A custom endpoint URL (MinIO and the like); ``None``: the client's default."""
    public: bool = False
    """The user marked the bucket public: fetched without signing, no credential looked for.
    Not part of the content key (how the bytes are asked for, not what they are)."""

    @property
    def pinned(self) -> bool:
        """Never by itself: an object can be overwritten under the same key."""
        return False

    @property
    def uri(self) -> str:
        """The canonical ``s3://`` form."""
        return f"s3://{self.bucket}/{self.prefix}"


class HttpsSource(
    _SourceValue, tag_field="kind", tag=SourceKind.HTTPS.value, kw_only=True, frozen=True
):
    """Files under a base URL (``https``, or ``http`` to a loopback host only)."""

    base_url: str
    """Ending in ``/``; the files are relative to it."""

    @property
    def pinned(self) -> bool:
        """Never by itself: a URL's content can change."""
        return False

    @property
    def uri(self) -> str:
        """The base URL."""
        return self.base_url


Source = HfSource | S3Source | HttpsSource


class StagingRequest(_Value, kw_only=True, frozen=True):
    """What to stage: a source, its files and their pinned digests.

    Its JSON (``to_json``) is what the provider hands the stager's Job, so it stays the same
    across versions; ``from_json`` and the constructor check it alike (``ValueError``)."""

    source: Source
    files: tuple[str, ...] = ()
    """The files to stage, sorted; empty: every file of the source (hf, s3 only)."""
    digests: dict[str, str] = msgspec.field(default_factory=dict)
    """File → lowercase sha256 hex; every key is among ``files``."""
    allow_mutable: bool = False
    """Stage a mutable reference without a digest for every file (the user opted in)."""

    def __post_init__(self) -> None:
        files = tuple(sorted({check_file_name(name) for name in self.files}))
        digests = {
            check_file_name(name): _check_sha256(name, hexa) for name, hexa in self.digests.items()
        }
        msgspec.structs.force_setattr(self, "files", files)
        msgspec.structs.force_setattr(self, "digests", digests)
        missing = sorted(set(digests) - set(files))
        if missing:
            raise ValueError(f"digests for files not staged: {', '.join(missing)}")
        if isinstance(self.source, HttpsSource) and not files:
            raise ValueError("an https source needs its file list (--file, or --digest per file)")

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """A request from its JSON; raises ``ValueError`` (msgspec's ValidationError)."""
        return msgspec.json.decode(text, type=cls)

    def to_json(self) -> str:
        """The request's JSON (``from_json`` reads it back)."""
        return msgspec.json.encode(self).decode()

    @property
    def pinned(self) -> bool:
        """Whether the content is fixed by the declaration: an hf commit, or a digest for every
        file of an explicit file list."""
        if self.source.pinned:
            return True
        return bool(self.files) and set(self.files) == set(self.digests)

    def unpinned_files(self) -> list[str]:
        """The files without a digest (all of them when the list comes from the source)."""
        return [name for name in self.files if name not in self.digests]


def check_file_name(name: str) -> str:
    """``name`` if it is a safe relative POSIX path inside a staged directory. Pure."""
    path = PurePosixPath(name)
    if (
        not name
        or name != str(path)
        or path.is_absolute()
        or "\\" in name
        or "\0" in name
        or any(part in {"", ".", ".."} or part.startswith(".") for part in path.parts)
    ):
        raise ValueError(
            f"file name {name!r} is not a plain relative path (no '..', no leading '/' or '.')"
        )
    return name


def _check_sha256(name: str, hexa: str) -> str:
    value = hexa.strip().lower()
    if value.startswith("sha256:"):
        value = value[len("sha256:") :]
    if _SHA256.fullmatch(value) is None:
        raise ValueError(f"digest of {name} is not 64 hex characters of sha256: {hexa!r}")
    return value


def parse_digest(text: str) -> tuple[str, str]:
    """``FILE=SHA256`` (as ``--digest`` takes it) → ``(file, sha256)``. Pure."""
    name, sep, hexa = text.rpartition("=")
    if not sep or not name:
        raise SourceRefused(f"--digest {text!r} is not FILE=SHA256")
    try:
        return check_file_name(name), _check_sha256(name, hexa)
    except ValueError as exc:
        raise SourceRefused(str(exc), file=name) from None


def parse_source(
    uri: str,
    *,
    files: Iterable[str] = (),
    digests: Mapping[str, str] | None = None,
    s3_endpoint: str | None = None,
    hf_endpoint: str | None = None,
    s3_public: bool = False,
    allow_mutable: bool = False,
) -> StagingRequest:
    """A validated, pinned (or explicitly unpinned) request from a source URI. Pure.

    ``hf_endpoint``: the Hub mirror of an ``hf://`` source (the public Hub's own URL is the same
    as none); ``s3_public``: an ``s3://`` bucket marked public. Raises ``SourceRefused`` for a
    malformed source, file name, digest or endpoint, or a setting of another scheme, and
    ``MutableSourceRefused`` for a mutable reference without a digest for every file unless
    ``allow_mutable``.
    """
    source = _source(uri, s3_endpoint, hf_endpoint, s3_public=s3_public)
    pinned_digests = dict(digests or {})
    try:
        request = StagingRequest(
            source=source,
            files=(*files, *pinned_digests),
            digests=pinned_digests,
            allow_mutable=allow_mutable,
        )
    except ValueError as exc:
        raise SourceRefused(str(exc)) from None
    if not request.pinned and not allow_mutable:
        raise MutableSourceRefused(_why_mutable(request))
    return request


def _source(
    uri: str, s3_endpoint: str | None, hf_endpoint: str | None, *, s3_public: bool
) -> HfSource | S3Source | HttpsSource:
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise SourceRefused(f"source {uri!r} has no scheme: use hf://, s3:// or https://")
    if s3_endpoint is not None and scheme != "s3":
        raise SourceRefused(f"an S3 endpoint was given for a {scheme}:// source")
    if hf_endpoint is not None and scheme != "hf":
        raise SourceRefused(f"a Hub endpoint was given for a {scheme}:// source")
    if s3_public and scheme != "s3":
        raise SourceRefused(
            f"source_public applies to s3:// sources (a public bucket, fetched without "
            f"signing), not {scheme}://"
        )
    if scheme == "hf":
        hub = _hf(uri, rest)
        if hf_endpoint is None:
            return hub
        return HfSource(repo_id=hub.repo_id, revision=hub.revision, endpoint=_hub(hf_endpoint))
    if scheme == "s3":
        return _s3(uri, rest, s3_endpoint, public=s3_public)
    if scheme in {"https", "http"}:
        return HttpsSource(base_url=_base_url(uri))
    raise SourceRefused(f"source {uri!r}: unknown scheme {scheme}://; use hf://, s3:// or https://")


def _hf(uri: str, rest: str) -> HfSource:
    repo_id, sep, revision = rest.partition("@")
    if repo_id.startswith(("models/", "datasets/", "spaces/")):
        raise SourceRefused(f"source {uri!r}: only model repositories (hf://org/repo) are staged")
    if (
        _REPO_ID.fullmatch(repo_id) is None
        or "--" in repo_id
        or ".." in repo_id
        or len(repo_id) > 96
    ):
        raise SourceRefused(f"source {uri!r}: the repository is not org/repo")
    if sep and _REVISION.fullmatch(revision) is None:
        raise SourceRefused(f"source {uri!r}: {revision!r} is not a commit, branch or tag")
    return HfSource(repo_id=repo_id, revision=revision if sep else "main")


def _s3(uri: str, rest: str, endpoint: str | None, *, public: bool) -> S3Source:
    bucket, _, prefix = rest.partition("/")
    if _BUCKET.fullmatch(bucket) is None:
        raise SourceRefused(f"source {uri!r}: {bucket!r} is not an S3 bucket name")
    if prefix and not prefix.endswith("/"):
        raise SourceRefused(f"source {uri!r}: the prefix must end with '/' (a directory)")
    if "//" in prefix or any(part in {".", ".."} for part in prefix.split("/")):
        raise SourceRefused(f"source {uri!r}: the prefix has an empty, '.' or '..' part")
    if endpoint is not None:
        endpoint = _endpoint(endpoint)
    return S3Source(bucket=bucket, prefix=prefix, endpoint=endpoint, public=public)


def _endpoint(url: str) -> str:
    _plain_url(
        url,
        "S3 endpoint",
        "the S3 endpoint carries credentials or a query: give credentials through "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead",
    )
    return url.rstrip("/")


def _hub(url: str) -> str | None:
    """A Hub endpoint as the content key names it: scheme and host lowercased, no trailing
    ``/``; ``None`` for the public Hub (``https://huggingface.co``), so its declarations keep the
    keys they had before endpoints were part of them, with ``source_endpoint`` or without."""
    _plain_url(
        url,
        "Hub endpoint",
        "the Hub endpoint carries credentials or a query: give HF_TOKEN through "
        "source_secret_name instead",
    )
    parts = urlsplit(url.rstrip("/"))
    normal = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path}"
    return None if normal in {PUBLIC_HUB, PUBLIC_HUB + ":443"} else normal


def _plain_url(url: str, name: str, with_credentials: str) -> str:
    """The host of ``url``, an http(s) URL with no userinfo, query or fragment (they would put
    credentials where they are kept or logged); else ``SourceRefused``. Pure."""
    parts = urlsplit(url)
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        raise SourceRefused(f"{name} {url!r} is not an http(s) URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise SourceRefused(with_credentials)
    return parts.hostname


def _base_url(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.username or parts.password or parts.query or parts.fragment:
        raise SourceRefused(
            f"source {parts.scheme}://{parts.hostname}/…: a URL with credentials, a query or a "
            "fragment would put secrets in the state; use a plain URL"
        )
    if not parts.hostname:
        raise SourceRefused(f"source {uri!r} has no host")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise SourceRefused(f"source {uri!r}: use https:// (plain http only to a loopback host)")
    if not parts.path.endswith("/"):
        raise SourceRefused(f"source {uri!r}: the base URL must end with '/' (a directory)")
    return uri


def declared_request(values: Mapping[str, Any]) -> tuple[StagingRequest, str | None]:
    """The staging request a staged adapter's inputs declare (``source``, ``digests``,
    ``allow_mutable``, ``source_endpoint``, ``source_public``), and its Hub endpoint (``None``:
    the public Hub, or not an hf:// source; the request's source names it too). Raises
    ``SourceRefused`` as the stager would. Pure."""
    source = str(values["source"])
    endpoint = values.get("source_endpoint")
    if endpoint is not None:
        endpoint = source_endpoint(str(endpoint), source)
    s3 = source.startswith("s3://")
    request = parse_source(
        source,
        digests=values.get("digests") or {},
        s3_endpoint=endpoint if s3 else None,
        hf_endpoint=None if s3 else endpoint,
        s3_public=bool(values.get("source_public")),
        allow_mutable=bool(values.get("allow_mutable")),
    )
    hub = request.source.endpoint if isinstance(request.source, HfSource) else None
    return request, hub


def source_endpoint(url: str, source: str) -> str:
    """The endpoint a resource's ``source_endpoint`` names, checked: the Hub (``HF_ENDPOINT``,
    a private mirror) for an ``hf://`` source, the S3-compatible server for an ``s3://`` one;
    ``https``, or plain ``http`` only to a loopback or cluster-internal host (the credentials and
    the weights cross it). Raises ``SourceRefused`` saying which rule. Pure."""
    scheme = source.partition("://")[0]
    if scheme not in {"hf", "s3"}:
        raise SourceRefused(
            f"source_endpoint applies to hf:// (the Hub or a mirror) and s3:// sources, "
            f"not {scheme}://"
        )
    host = _plain_url(
        url,
        "source_endpoint",
        "source_endpoint carries credentials or a query, which would land in the state: "
        "give credentials through source_secret_name",
    )
    if urlsplit(url).scheme == "http" and not is_cluster_internal(host):
        raise SourceRefused(
            f"source_endpoint {url!r}: use https:// (plain http only to a loopback or "
            "cluster-internal host, such as minio.storage.svc)"
        )
    return url.rstrip("/")


def is_cluster_internal(host: str) -> bool:
    """Whether ``host`` is this machine or a name only a cluster resolves: a Service
    (``NAME.NAMESPACE.svc[.cluster.local]``) or a single label. Pure."""
    name = host.lower().rstrip(".")
    if is_loopback(name):
        return True
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return "." not in name or name.endswith((".svc", ".cluster.local"))
    return False


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8, ``::1``). Pure."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _why_mutable(request: StagingRequest) -> str:
    source = request.source
    if isinstance(source, HfSource):
        what = f"{source.uri} names a branch or tag, not a commit"
    elif isinstance(source, S3Source):
        what = f"{source.uri} is an S3 prefix, whose objects can be overwritten"
    else:
        what = f"{source.uri} is a URL, whose content can change"
    unpinned = request.unpinned_files()
    if not request.files:
        return f"{what}, and no file has a digest"
    return f"{what}, and {len(unpinned)} file(s) have no digest ({', '.join(unpinned[:5])})"


def content_key(request: StagingRequest) -> str:
    """The staged directory's name for this content: 16 hex of a canonical JSON's sha256. Pure.

    The same source, revision, endpoint (the Hub mirror or the S3 server), files and digests
    always give the same key; any of them changing gives another. ``allow_mutable`` and an S3
    source's ``public`` are not part of it (they change what is accepted or how the bytes are
    asked for, not what the content is). The public Hub names no endpoint: its keys are those
    of before endpoints counted.
    """
    return hashlib.sha256(canonical_json(request).encode()).hexdigest()[:KEY_HEX]


def canonical_json(request: StagingRequest) -> str:
    """The JSON the content key hashes: sorted keys, no spaces. Pure."""
    source: dict[str, Any] = {"uri": request.source.uri}
    if isinstance(request.source, HfSource):
        source["revision"] = request.source.revision
    if isinstance(request.source, HfSource | S3Source) and request.source.endpoint is not None:
        source["endpoint"] = request.source.endpoint
    document = {
        "source": source,
        "files": list(request.files),
        "digests": dict(sorted(request.digests.items())),
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"))
