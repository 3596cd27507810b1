"""The three source clients: each fetches a request's files into a directory, and translates its
library's failures into the staging errors in this one place.

* ``hf://``: ``huggingface_hub`` (``hf_hub_download`` per file at the revision, into the
  directory; the file list from ``HfApi.list_repo_tree`` when none is declared). The endpoint is
  ``HF_ENDPOINT``, the token ``HF_TOKEN``, both read from the environment given, nothing else
  (never the token file under ``HF_HOME``).
* ``s3://``: ``boto3`` with the endpoint given, else ``AWS_ENDPOINT_URL``; credentials only from
  ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN`` (unsigned requests
  without them), so no shared file, profile or instance metadata is ever consulted.
* ``https://``: ``httpx``, files relative to the base URL; no credentials.

The libraries are imported when their scheme is used: the ``staging`` extra brings them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from pulumi_lora._staging._errors import (
    SourceFileMissing,
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
from pulumi_lora._staging._verify import BLOCK

__all__ = ["EXTRA_MISSING", "Progress", "fetch_files"]

EXTRA_MISSING = "staging from {scheme}:// needs {module}: pip install 'pulumi-lora[staging]'"

_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class Progress:
    """Counts the bytes fetched and logs each file's start, every ``step`` bytes, and its end.

    The reports follow the bytes, not the clock: a 1 GiB file logs 64 lines at the default step
    whatever the network's speed.
    """

    def __init__(self, log: Callable[..., None], step: int = 16 << 20) -> None:
        self._log = log
        self._step = step
        self.file: str | None = None
        """The file being fetched (errors name it)."""
        self.file_bytes = 0
        self.total_bytes = 0
        self._next = step

    def start(self, file: str) -> None:
        """A file starts."""
        self.file, self.file_bytes, self._next = file, 0, self._step
        self._log("fetch_file", file=file)

    def add(self, count: int) -> None:
        """``count`` more bytes of the current file arrived (negative: a client restarted)."""
        self.file_bytes += count
        self.total_bytes += count
        if self.file_bytes >= self._next:
            self._log("fetch_progress", file=self.file, bytes=self.file_bytes)
            self._next = (self.file_bytes // self._step + 1) * self._step

    def done(self) -> None:
        """The current file is complete."""
        self._log("fetched_file", file=self.file, bytes=self.file_bytes)


def fetch_files(
    request: StagingRequest, into: Path, env: Mapping[str, str], progress: Progress
) -> dict[str, str]:
    """Fetch the request's files into ``into``. Returns the digests the source itself vouches for
    (the Hub's sha256 of LFS files), to be checked with the pinned ones."""
    source = request.source
    if isinstance(source, HfSource):
        return _fetch_hf(source, request.files, into, env, progress)
    if isinstance(source, S3Source):
        _fetch_s3(source, request.files, into, env, progress)
        return {}
    _fetch_https(source, request.files, into, progress)
    return {}


def write_chunks(chunks: Iterable[bytes], path: Path, progress: Progress) -> None:
    """Write ``chunks`` to ``path`` (its folders made), counting them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        for chunk in chunks:
            stream.write(chunk)
            progress.add(len(chunk))


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
    except ModuleNotFoundError:
        raise StagingError(EXTRA_MISSING.format(scheme="hf", module="huggingface_hub")) from None
    endpoint = env.get("HF_ENDPOINT") or None
    token: str | bool = env.get("HF_TOKEN") or False
    vouched: dict[str, str] = {}
    names = list(files)
    with _hf_errors(source, progress):
        if not names:
            api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
            tree = api.list_repo_tree(source.repo_id, revision=source.revision, recursive=True)
            for entry in tree:
                if not isinstance(entry, huggingface_hub.hf_api.RepoFile) or _hidden(entry.path):
                    continue
                names.append(check_file_name(entry.path))
                if entry.lfs is not None:
                    vouched[entry.path] = entry.lfs.sha256
        bar = _progress_bar(progress)
        for name in sorted(names):
            progress.start(name)
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


def _hidden(path: str) -> bool:
    return any(part.startswith(".") for part in path.split("/"))


def _progress_bar(progress: Progress) -> Any:
    """A tqdm class for ``huggingface_hub`` that draws nothing and counts into ``progress``."""
    from huggingface_hub.utils.tqdm import tqdm  # noqa: PLC0415

    class CountingBar(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call] # tqdm is untyped

        def update(self, n: float | None = 1) -> bool | None:
            progress.add(int(n or 0))
            return None

    return CountingBar


@contextmanager
def _hf_errors(source: HfSource, progress: Progress) -> Iterator[None]:
    """``huggingface_hub``'s failures as staging errors, naming the file being fetched."""
    try:
        yield
    except Exception as exc:
        mapped = _hf_error(exc, source, progress.file)
        if mapped is None:
            raise
        raise mapped from None


def _hf_error(exc: Exception, source: HfSource, file: str | None) -> StagingError | None:
    """The staging error for one of ``huggingface_hub``'s failures; ``None`` for any other."""
    import httpx2  # noqa: PLC0415 - huggingface_hub's own HTTP client
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
    if isinstance(exc, hf.LocalEntryNotFoundError | httpx2.TransportError):
        return SourceUnreachable(
            f"{where}: the Hub endpoint did not answer ({type(exc).__name__})", file=file
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
        names = list(files) or _list_s3(client, source)
        for name in names:
            progress.start(name)
            answer = client.get_object(Bucket=source.bucket, Key=source.prefix + name)
            body = answer["Body"]
            try:
                write_chunks(body.iter_chunks(BLOCK), into / name, progress)
            finally:
                body.close()
            progress.done()


def _list_s3(client: Any, source: S3Source) -> list[str]:
    names = []
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=source.bucket, Prefix=source.prefix
    )
    for page in pages:
        for entry in page.get("Contents", []):
            relative = str(entry["Key"])[len(source.prefix) :]
            if relative and not relative.endswith("/") and not _hidden(relative):
                names.append(check_file_name(relative))
    if not names:
        raise SourceFileMissing(f"{source.uri}: no object under the prefix")
    return sorted(names)


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
    with httpx.Client(follow_redirects=True, timeout=_TIMEOUT) as client:
        for name in files:
            progress.start(name)
            url = source.base_url + quote(name)
            try:
                with client.stream("GET", url) as response:
                    if response.status_code != 200:
                        raise _by_status(f"{url}", response.status_code, name)
                    write_chunks(response.iter_bytes(BLOCK), into / name, progress)
            except httpx.TransportError as exc:
                raise SourceUnreachable(
                    f"{url}: no answer ({type(exc).__name__})", file=name
                ) from None
            progress.done()
