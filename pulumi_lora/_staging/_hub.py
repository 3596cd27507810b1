"""hf://: a Hub repository's files at a revision, each over one plain streaming GET (httpx2).

The endpoint is the source's (the mirror its content key names), else ``HF_ENDPOINT``, else the
public Hub. ``HF_TOKEN`` comes only from the environment given and goes to the endpoint's origin
only. Retries (at most `ATTEMPTS`) stay within the deadline.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard
from urllib.parse import quote, urlsplit

import httpx2

from pulumi_lora._staging._errors import (
    DigestMismatch,
    SourceFileMissing,
    SourceUnauthorized,
    SourceUnreachable,
    StagingError,
)
from pulumi_lora._staging._source import PUBLIC_HUB, HfSource
from pulumi_lora._staging._transfer import Progress, active, bound_client, refuse_long_waits
from pulumi_lora._staging._verify import FileFacts
from pulumi_lora._staging._write import (
    TIMEOUT,
    Fetched,
    by_status,
    hidden,
    listed,
    tls_context,
    write_chunks,
)

__all__ = [
    "ATTEMPTS",
    "DEFAULT_ENDPOINT",
    "Announced",
    "TreeFile",
    "announced_by",
    "fetch_hub",
    "hub_error",
    "hubs_sha256",
    "linked_sha256",
    "parse_tree_page",
    "retry_wait",
]

DEFAULT_ENDPOINT = PUBLIC_HUB
ATTEMPTS = 3
"""Requests for one answer, in all, when the Hub answers a rate limit or a server error."""
_RETRIED = frozenset({408, 429, 500, 502, 503, 504})
_BACKOFF_CAP = 8.0
_PAGE_BYTES = 16 << 20
"""At most this much of one page of the file list is read (a 1000-entry page is ~200 kB)."""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_HEADERS = {"Accept-Encoding": "identity"}
"""The bytes as stored: the sizes announced are the sizes written, nothing to decode."""


@dataclass(frozen=True)
class TreeFile:
    """One file of the Hub's listing."""

    path: str
    size: int
    sha256: str | None
    """The Hub's sha256 of an LFS file (``lfs.oid``); ``None`` for a file stored in git."""


@dataclass(frozen=True)
class Announced:
    """What the answers to one resolve GET say of the file."""

    sha256: str | None
    """The Hub's sha256 (``X-Linked-Etag``), when it is one."""
    sizes: frozenset[int]
    """Every size announced (``X-Linked-Size``, the final body's ``Content-Length``)."""


def fetch_hub(
    source: HfSource,
    files: tuple[str, ...],
    into: Path,
    env: Mapping[str, str],
    progress: Progress,
) -> Fetched:
    """Fetch the request's files (every listed one when none is declared) into ``into``."""
    endpoint = (source.endpoint or env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    hub = _Hub(source, endpoint, env.get("HF_TOKEN") or None)
    client = bound_client(
        httpx2.Client(
            follow_redirects=True, timeout=TIMEOUT, headers=_HEADERS, verify=tls_context()
        )
    )
    client.event_hooks["response"].append(refuse_long_waits)
    written: dict[str, FileFacts] = {}
    vouched: dict[str, str] = {}
    https_only = urlsplit(endpoint).scheme == "https"
    with client, active(progress, https_only=https_only), _hub_errors(source, progress):
        tree = {} if files else _tree(client, hub, progress)
        for name in sorted(files or tree):
            entry = tree.get(name)
            progress.start(name, entry.size if entry is not None else None)
            facts, announced = _download(client, hub, name, into / name, progress)
            sha256 = hubs_sha256(source, name, facts, entry, announced)
            if sha256 is not None:
                vouched[name] = sha256
            written[name] = facts
            progress.done()
    return Fetched(files=written, vouched=vouched)


@dataclass(frozen=True)
class _Hub:
    source: HfSource
    endpoint: str
    token: str | None

    def resolve_url(self, name: str) -> str:
        revision = quote(self.source.revision, safe="")
        return f"{self.endpoint}/{self.source.repo_id}/resolve/{revision}/{quote(name)}"

    def tree_url(self) -> str:
        revision = quote(self.source.revision, safe="")
        return (
            f"{self.endpoint}/api/models/{self.source.repo_id}/tree/{revision}"
            "?recursive=true&expand=false"
        )

    def credentials(self, url: str) -> dict[str, str]:
        """The token, for a request to the endpoint's origin only."""
        if self.token is None or httpx2.URL(url).origin != httpx2.URL(self.endpoint).origin:
            return {}
        return {"Authorization": f"Bearer {self.token}"}


def _tree(client: httpx2.Client, hub: _Hub, progress: Progress) -> dict[str, TreeFile]:
    """Every file the Hub lists at the revision but hidden ones, name → entry; their sizes must
    fit ``--max-bytes`` together."""
    uri = hub.source.uri
    found: dict[str, TreeFile] = {}
    url: str | None = hub.tree_url()
    seen: set[str] = set()
    while url is not None:
        if url in seen:
            raise SourceUnreachable(f"{uri}: the Hub's file list pages loop back")
        seen.add(url)
        with _answer(client, url, hub.credentials(url), progress) as response:
            if response.status_code != 200:
                raise _error_of(response, hub, None)
            document = _json_page(response, uri)
            url = response.links.get("next", {}).get("url")
        for entry in parse_tree_page(document, uri):
            if not hidden(entry.path):
                found[listed(uri, entry.path)] = entry
    progress.declare_all((entry.size for entry in found.values()), uri)
    return found


def _json_page(response: httpx2.Response, uri: str) -> object:
    """One page of the file list, read up to `_PAGE_BYTES`, as JSON."""
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > _PAGE_BYTES:
            raise SourceUnreachable(
                f"{uri}: a page of the Hub's file list is over {_PAGE_BYTES} bytes"
            )
    try:
        return json.loads(bytes(body))
    except ValueError:
        raise SourceUnreachable(f"{uri}: the Hub's file list is not JSON") from None


def parse_tree_page(document: object, uri: str) -> list[TreeFile]:
    """The files of one page of the Hub's tree (folders left out); `SourceUnreachable` for a
    page that is not the Hub's. Pure."""

    def malformed(why: str) -> SourceUnreachable:
        return SourceUnreachable(f"{uri}: the Hub's file list is malformed: {why}")

    if not isinstance(document, list):
        raise malformed("not a JSON list")
    files: list[TreeFile] = []
    for entry in document:
        if not isinstance(entry, dict) or entry.get("type") not in {"file", "directory"}:
            raise malformed(f"an entry is not a file or a directory: {entry!r:.200}")
        if entry["type"] != "file":
            continue
        path, size, lfs = entry.get("path"), entry.get("size"), entry.get("lfs")
        if not isinstance(path, str) or not _is_size(size):
            raise malformed(f"a file entry has no path or size: {entry!r:.200}")
        sha256: str | None = None
        if lfs is not None:
            oid = lfs.get("oid") if isinstance(lfs, dict) else None
            if not isinstance(oid, str) or _SHA256.fullmatch(oid) is None:
                raise malformed(f"{path}: its LFS entry has no sha256")
            sha256 = oid
        files.append(TreeFile(path=path, size=size, sha256=sha256))
    return files


def _is_size(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _download(
    client: httpx2.Client, hub: _Hub, name: str, path: Path, progress: Progress
) -> tuple[FileFacts, Announced]:
    """One file's bytes into ``path``, and what the Hub announced of it."""
    url = hub.resolve_url(name)
    with _answer(client, url, hub.credentials(url), progress) as response:
        if response.status_code != 200:
            raise _error_of(response, hub, name)
        announced = announced_by([*response.history, response])
        progress.declare(max(announced.sizes, default=None))
        try:
            facts = write_chunks(response.iter_bytes(), path, progress)
        except httpx2.RemoteProtocolError:
            if progress.file_bytes < max(announced.sizes, default=0):
                raise _another_size(hub.source, name) from None  # the body ended early
            raise
    return facts, announced


@contextmanager
def _answer(
    client: httpx2.Client, url: str, headers: Mapping[str, str], progress: Progress
) -> Iterator[httpx2.Response]:
    """The streamed answer to ``GET url``; a rate limit or a server error asked again."""
    for attempt in range(1, ATTEMPTS + 1):
        with client.stream("GET", url, headers=headers) as response:
            wait = retry_wait(response.status_code, response.headers.get("retry-after"), attempt)
            if wait is None:
                yield response
                return
        if wait >= progress.time_left():
            raise progress.too_slow()
        time.sleep(wait)
    raise AssertionError("retry_wait never waits after the last attempt")  # pragma: no cover


def retry_wait(status: int, retry_after: str | None, attempt: int) -> float | None:
    """Seconds to wait before asking again after ``status`` at ``attempt`` (from 1), or ``None``:
    take this answer. ``Retry-After`` (seconds) when given, else 1 s, 2 s, … up to 8 s. Pure."""
    if status not in _RETRIED or attempt >= ATTEMPTS:
        return None
    value = (retry_after or "").strip()
    if value.isdigit():
        return float(value)
    return min(float(2 ** (attempt - 1)), _BACKOFF_CAP)


def linked_sha256(value: str | None) -> str | None:
    """The sha256 an ``X-Linked-Etag`` holds (quoted, maybe weak), or ``None`` when it holds
    something else (a git sha1 is no sha256). Pure."""
    if value is None:
        return None
    etag = value.strip().removeprefix("W/").strip('"').lower()
    return etag if _SHA256.fullmatch(etag) else None


def announced_by(responses: Iterable[httpx2.Response]) -> Announced:
    """What the answers to a resolve GET (redirects first, the file's own last) announce: the
    Hub's sha256 and sizes (``X-Linked-*`` of any, ``Content-Length`` of the last). Pure."""
    answers = list(responses)
    sha256: str | None = None
    sizes: set[int] = set()
    for answer in answers:
        sha256 = sha256 or linked_sha256(answer.headers.get("x-linked-etag"))
        linked = answer.headers.get("x-linked-size", "")
        if linked.isdigit():
            sizes.add(int(linked))
    final = answers[-1].headers
    length = final.get("content-length", "")
    if length.isdigit() and final.get("content-encoding", "identity") == "identity":
        sizes.add(int(length))
    return Announced(sha256=sha256, sizes=frozenset(sizes))


def hubs_sha256(
    source: HfSource,
    name: str,
    facts: FileFacts,
    entry: TreeFile | None,
    announced: Announced,
) -> str | None:
    """The sha256 the Hub vouches for, for a file written with ``facts`` (``None``: none).
    `SourceUnreachable` when the size written is not every size announced (its listing
    ``entry``, its download), `DigestMismatch` when the listing and the download disagree. Pure."""
    sizes = announced.sizes | ({entry.size} if entry is not None else set())
    if sizes - {facts.size}:
        raise _another_size(source, name)
    listed_sha = entry.sha256 if entry is not None else None
    linked_sha = announced.sha256
    if listed_sha is not None and linked_sha is not None and listed_sha != linked_sha:
        raise DigestMismatch(
            f"{name}: the Hub lists sha256 {listed_sha}, its download announces {linked_sha}",
            file=name,
        )
    return listed_sha or linked_sha


def _another_size(source: HfSource, name: str) -> SourceUnreachable:
    return SourceUnreachable(
        f"{source.uri}: {name}: the transfer ended with another size than announced", file=name
    )


def _error_of(response: httpx2.Response, hub: _Hub, file: str | None) -> StagingError:
    from_hub = response.url.origin == httpx2.URL(hub.endpoint).origin
    return hub_error(response.status_code, response.headers, hub.source, file, from_hub=from_hub)


def hub_error(
    status: int,
    headers: Mapping[str, str],
    source: HfSource,
    file: str | None,
    *,
    from_hub: bool = True,
) -> StagingError:
    """The staging error for a failed answer, read as ``hf_raise_for_status`` reads the Hub's
    (``X-Error-Code``, ``X-Error-Message``; a 401 from the Hub without a code is a repository
    private or missing, unless the token itself is refused). Pure."""
    where = source.uri + (f": {file}" if file else "")
    code, message = headers.get("x-error-code"), headers.get("x-error-message")
    if code == "GatedRepo" or message == "Access to this resource is disabled.":
        return SourceUnauthorized(
            f"{where}: HTTP {status}: the repository is gated or disabled for this token", file=file
        )
    if code == "RepoNotFound" or (
        from_hub and status == 401 and message != "Invalid credentials in Authorization header"
    ):
        if status in {401, 403}:
            return SourceUnauthorized(
                f"{where}: HTTP {status}: the repository is private, or does not exist", file=file
            )
        return SourceFileMissing(f"{where}: no such repository", file=file)
    if code == "RevisionNotFound":
        return SourceFileMissing(
            f"{source.uri}: no revision {source.revision!r} in the repository", file=file
        )
    if code == "EntryNotFound":
        return SourceFileMissing(f"{where}: no such file at this revision", file=file)
    return by_status(where, status, file)


@contextmanager
def _hub_errors(source: HfSource, progress: Progress) -> Iterator[None]:
    """httpx2's failures (no connection, a timeout, a redirect loop) as staging errors, naming
    the file being fetched."""
    try:
        yield
    except httpx2.TooManyRedirects:
        file = progress.file
        where = source.uri + (f": {file}" if file else "")
        raise SourceUnreachable(f"{where}: too many redirects", file=file) from None
    except httpx2.RequestError as exc:
        file = progress.file
        where = source.uri + (f": {file}" if file else "")
        raise SourceUnreachable(
            f"{where}: no usable answer from the Hub endpoint ({type(exc).__name__})", file=file
        ) from None
