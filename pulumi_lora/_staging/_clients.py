"""The three source clients: each fetches a request's files into a directory, and translates its
library's failures into the staging errors in this one place.

* ``hf://``: ``huggingface_hub`` (``hf_hub_download`` per file at the revision, into the
  directory; the file list from ``HfApi.list_repo_tree`` when none is declared). The endpoint is
  ``HF_ENDPOINT``, the token ``HF_TOKEN``, both read from the environment given, nothing else
  (never the token file under ``HF_HOME``).
* ``s3://``: ``boto3`` with the endpoint given, else ``AWS_ENDPOINT_URL``; credentials only from
  ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` (unsigned requests
  without them), so no shared file, profile or instance metadata is ever consulted.
* ``https://``: ``httpx2``, files relative to the base URL; no credentials.

Every transfer is bounded by `_transfer` (bytes, the deadline, no https → http); a name a
listing returns that is not a plain relative path is refused (`SourceRefused`), not skipped. The
libraries are imported when their scheme is used: the ``staging`` extra brings them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlsplit

import httpx2

from pulumi_lora._staging._errors import (
    SourceFileMissing,
    SourceRefused,
    SourceUnauthorized,
    SourceUnreachable,
    StagingError,
)
from pulumi_lora._staging._source import (
    HfSource,
    HttpsSource,
    S3Source,
    StagingRequest,
    check_file_name,
)
from pulumi_lora._staging._transfer import (
    Progress,
    active,
    bound_client,
    pumped,
    refuse_long_waits,
    waited,
)
from pulumi_lora._staging._verify import BLOCK

__all__ = ["EXTRA_MISSING", "fetch_files"]

EXTRA_MISSING = "staging from {scheme}:// needs {module}: pip install 'pulumi-lora[staging]'"

_TIMEOUT = httpx2.Timeout(60.0, connect=10.0)
"""Each wait for a connection or a chunk; the whole fetch has the deadline of `_transfer`."""


def fetch_files(
    request: StagingRequest, into: Path, env: Mapping[str, str], progress: Progress
) -> dict[str, str]:
    """Fetch the request's files into ``into``, within ``progress``'s limits. Returns the
    digests the source itself vouches for (the Hub's sha256 of LFS files), to be checked with
    the pinned ones."""
    source = request.source
    if isinstance(source, HfSource):
        return _fetch_hf(source, request.files, into, env, progress)
    if isinstance(source, S3Source):
        _fetch_s3(source, request.files, into, env, progress)
        return {}
    _fetch_https(source, request.files, into, progress)
    return {}


def write_chunks(chunks: Iterable[bytes], path: Path, progress: Progress) -> None:
    """Write ``chunks`` to ``path`` (its folders made), each counted (and bounded) before it is
    written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        for chunk in chunks:
            progress.add(len(chunk))
            stream.write(chunk)


def _listed(where: str, name: str) -> str:
    """A file name a source listed, if it is a plain relative path; else `SourceRefused`."""
    try:
        return check_file_name(name)
    except ValueError:
        raise SourceRefused(
            f"{where}: the source lists {name!r}, not a plain relative file path (an empty, "
            "'.' or '..' part, or a leading '/'): remove it from the source, or declare the "
            "files to stage (--digest, --file)",
            file=name,
        ) from None


def _hidden(path: str) -> bool:
    return any(part.startswith(".") for part in path.split("/"))


# --- Hugging Face ---------------------------------------------------------------------------


def _fetch_hf(
    source: HfSource,
    files: tuple[str, ...],
    into: Path,
    env: Mapping[str, str],
    progress: Progress,
) -> dict[str, str]:
    try:
        import huggingface_hub  # noqa: PLC0415 - the staging extra, only for hf://
        from huggingface_hub import constants  # noqa: PLC0415
    except ModuleNotFoundError:
        raise StagingError(EXTRA_MISSING.format(scheme="hf", module="huggingface_hub")) from None
    endpoint = env.get("HF_ENDPOINT") or None
    token: str | bool = env.get("HF_TOKEN") or False
    # Every byte over HTTP, through a client bounded by the transfer: a Xet transfer (Rust, its
    # own sockets) would bypass the deadline.
    constants.HF_HUB_DISABLE_XET = True
    _install_client_factory(huggingface_hub)
    https_only = urlsplit(endpoint or constants.ENDPOINT).scheme == "https"
    vouched: dict[str, str] = {}
    declared: dict[str, int] = {}
    names = list(files)
    with active(progress, https_only=https_only), _hf_errors(source, progress):
        if not names:
            api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
            tree = api.list_repo_tree(source.repo_id, revision=source.revision, recursive=True)
            for entry in tree:
                if not isinstance(entry, huggingface_hub.hf_api.RepoFile) or _hidden(entry.path):
                    continue
                names.append(_listed(source.uri, entry.path))
                declared[entry.path] = entry.size
                if entry.lfs is not None:
                    vouched[entry.path] = entry.lfs.sha256
            progress.declare_all(declared.values(), source.uri)
        bar = _progress_bar(progress)
        for name in sorted(names):
            progress.start(name, declared.get(name))
            huggingface_hub.hf_hub_download(
                source.repo_id,
                name,
                revision=source.revision,
                local_dir=into,
                cache_dir=into / ".cache" / "hub",
                token=token,
                endpoint=endpoint,
                tqdm_class=bar,
            )
            progress.done()
    return vouched


_FACTORY_LOCK = threading.Lock()
_factory_installed = False


def _install_client_factory(huggingface_hub: Any) -> None:
    """Make ``huggingface_hub``'s one shared session ours (`_hf_client`), once per process:
    ``set_client_factory`` closes the session in use, which broke the downloads of the other
    stagings a stager server runs at once (``ReadError``). One bounded session serves them all;
    each thread's requests are bounded by its own transfer (`active`)."""
    global _factory_installed  # noqa: PLW0603 - huggingface_hub's session is process-wide too
    with _FACTORY_LOCK:
        if not _factory_installed:
            huggingface_hub.set_client_factory(_hf_client)
            _factory_installed = True


def _hf_client() -> Any:
    """``huggingface_hub``'s own client, bounded by the active transfer (`bound_client`), and
    failing at once when the Hub asks to wait past the deadline (``Retry-After``)."""
    from huggingface_hub.utils._http import default_client_factory  # noqa: PLC0415

    client = bound_client(default_client_factory())
    client.event_hooks["response"].append(refuse_long_waits)
    return client


def _progress_bar(progress: Progress) -> Any:
    """A tqdm class for ``huggingface_hub`` that draws nothing and counts into ``progress``
    (the size it is made with is the file's declared size)."""
    from huggingface_hub.utils.tqdm import tqdm  # noqa: PLC0415

    class CountingBar(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call] # tqdm is untyped
            total = kwargs.get("total")
            progress.declare(int(total) if total is not None else None)

        def update(self, n: float | None = 1) -> bool | None:
            progress.add(int(n or 0))
            return None

    return CountingBar


@contextmanager
def _hf_errors(source: HfSource, progress: Progress) -> Iterator[None]:
    """``huggingface_hub``'s failures as staging errors, naming the file being fetched."""
    try:
        yield
    except StagingError:
        raise
    except Exception as exc:
        mapped = _hf_error(exc, source, progress.file)
        if mapped is None:
            raise
        raise mapped from None


def _hf_error(exc: Exception, source: HfSource, file: str | None) -> StagingError | None:
    """The staging error for one of ``huggingface_hub``'s failures; ``None`` for any other."""
    from huggingface_hub import errors as hf  # noqa: PLC0415

    where = source.uri + (f": {file}" if file else "")
    status = _status(exc)
    if isinstance(exc, hf.GatedRepoError | hf.DisabledRepoError):
        return SourceUnauthorized(
            f"{where}: HTTP {status}: the repository is gated or disabled for this token", file=file
        )
    if isinstance(exc, hf.RepositoryNotFoundError):
        if status in {401, 403}:
            return SourceUnauthorized(
                f"{where}: HTTP {status}: the repository is private, or does not exist", file=file
            )
        return SourceFileMissing(f"{where}: no such repository", file=file)
    if isinstance(exc, hf.RevisionNotFoundError):
        return SourceFileMissing(
            f"{source.uri}: no revision {source.revision!r} in the repository", file=file
        )
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return SourceFileMissing(f"{where}: no such file at this revision", file=file)
    if isinstance(exc, hf.HfHubHTTPError):
        return _by_status(where, status, file)
    if isinstance(exc, httpx2.TooManyRedirects):
        return SourceUnreachable(f"{where}: too many redirects", file=file)
    if isinstance(exc, hf.LocalEntryNotFoundError | httpx2.RequestError):
        return SourceUnreachable(
            f"{where}: no usable answer from the Hub endpoint ({type(exc).__name__})", file=file
        )
    if isinstance(exc, OSError) and exc.errno is None and "Consistency check failed" in str(exc):
        return SourceUnreachable(
            f"{where}: the transfer ended with another size than announced", file=file
        )
    return None


def _status(exc: Any) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _by_status(where: str, status: int | None, file: str | None) -> StagingError:
    if status in {401, 403}:
        return SourceUnauthorized(f"{where}: HTTP {status}", file=file)
    if status == 404:
        return SourceFileMissing(f"{where}: HTTP 404", file=file)
    return SourceUnreachable(f"{where}: HTTP {status}", file=file)


# --- S3 -------------------------------------------------------------------------------------


def _fetch_s3(
    source: S3Source,
    files: tuple[str, ...],
    into: Path,
    env: Mapping[str, str],
    progress: Progress,
) -> None:
    try:
        import boto3  # noqa: PLC0415 - the staging extra, only for s3://
        from botocore import UNSIGNED  # noqa: PLC0415
        from botocore.config import Config  # noqa: PLC0415
    except ModuleNotFoundError:
        raise StagingError(EXTRA_MISSING.format(scheme="s3", module="boto3")) from None
    key_id, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    signed = bool(key_id and secret)
    config = Config(
        signature_version=None if signed else UNSIGNED,
        connect_timeout=10,
        read_timeout=60,
        retries={"mode": "standard", "max_attempts": 3},
    )
    client = boto3.client(
        "s3",
        endpoint_url=source.endpoint or env.get("AWS_ENDPOINT_URL") or None,
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        aws_access_key_id=key_id if signed else None,
        aws_secret_access_key=secret if signed else None,
        aws_session_token=(env.get("AWS_SESSION_TOKEN") or None) if signed else None,
        config=config,
    )
    with _s3_errors(source, progress):
        if files:
            names = list(files)
        else:
            listed = waited(partial(_list_s3, client, source), progress)
            progress.declare_all(listed.values(), source.uri)
            names = sorted(listed)
        for name in names:
            progress.start(name)
            with closing(pumped(partial(_s3_object, client, source, name), progress)) as items:
                size = next(items)
                progress.declare(size if isinstance(size, int) and size >= 0 else None)
                write_chunks(cast(Iterator[bytes], items), into / name, progress)
            progress.done()


def _s3_object(client: Any, source: S3Source, name: str) -> Iterator[int | bytes]:
    """One object: its declared size (``ContentLength``, -1 if none), then its bytes. Runs in
    the pump's thread, which owns the body (closing it from another would wait for its read)."""
    answer = client.get_object(Bucket=source.bucket, Key=source.prefix + name)
    body = answer["Body"]
    try:
        length = answer.get("ContentLength")
        yield int(length) if length is not None else -1
        yield from body.iter_chunks(BLOCK)
    finally:
        body.close()


def _list_s3(client: Any, source: S3Source) -> dict[str, int]:
    """Every object under the prefix (but folder markers and hidden names): name → size."""
    listed: dict[str, int] = {}
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=source.bucket, Prefix=source.prefix
    )
    for page in pages:
        for entry in page.get("Contents", []):
            relative = str(entry["Key"])[len(source.prefix) :]
            if relative and not relative.endswith("/") and not _hidden(relative):
                listed[_listed(source.uri, relative)] = int(entry.get("Size", 0))
    if not listed:
        raise SourceFileMissing(f"{source.uri}: no object under the prefix")
    return listed


_S3_UNAUTHORIZED = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "403", "401"}
)
_S3_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404"})


@contextmanager
def _s3_errors(source: S3Source, progress: Progress) -> Iterator[None]:
    """botocore's failures as staging errors, naming the object being fetched."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    try:
        yield
    except ClientError as exc:
        where = source.uri + (progress.file or "")
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _S3_UNAUTHORIZED:
            raise SourceUnauthorized(f"{where}: {code}", file=progress.file) from None
        if code in _S3_MISSING:
            what = "no such bucket" if code == "NoSuchBucket" else "no such object"
            raise SourceFileMissing(f"{where}: {what} ({code})", file=progress.file) from None
        raise _by_status(f"{where}: {code}", status, progress.file) from None
    except BotoCoreError as exc:
        where = source.uri + (progress.file or "")
        raise SourceUnreachable(
            f"{where}: the S3 endpoint did not answer ({type(exc).__name__})", file=progress.file
        ) from None


# --- HTTPS ----------------------------------------------------------------------------------


def _fetch_https(
    source: HttpsSource, files: tuple[str, ...], into: Path, progress: Progress
) -> None:
    client = bound_client(httpx2.Client(follow_redirects=True, timeout=_TIMEOUT))
    https_only = urlsplit(source.base_url).scheme == "https"
    with client, active(progress, https_only=https_only):
        for name in files:
            progress.start(name)
            url = source.base_url + quote(name)
            try:
                with client.stream("GET", url) as response:
                    if response.status_code != 200:
                        raise _by_status(f"{url}", response.status_code, name)
                    progress.declare(_content_length(response))
                    write_chunks(response.iter_bytes(BLOCK), into / name, progress)
            except httpx2.RequestError as exc:
                raise _https_error(exc, url, name, client.max_redirects) from None
            progress.done()


def _content_length(response: httpx2.Response) -> int | None:
    """The size an answer declares for its body, when it declares one."""
    value = response.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


def _https_error(exc: httpx2.RequestError, url: str, name: str, redirects: int) -> StagingError:
    """httpx2's failures (no connection, a timeout, a redirect loop, an undecodable body)."""
    if isinstance(exc, httpx2.TooManyRedirects):
        return SourceUnreachable(f"{url}: more than {redirects} redirects", file=name)
    if isinstance(exc, httpx2.DecodingError):
        return SourceUnreachable(f"{url}: the answer could not be decoded", file=name)
    return SourceUnreachable(f"{url}: no answer ({type(exc).__name__})", file=name)
