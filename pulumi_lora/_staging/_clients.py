"""The three source clients (``hf://``, ``s3://``, ``https://``): files fetched via `write_chunks`.

S3 requests are signed with what botocore's own providers find in the environment given (static
keys, web identity as EKS IRSA sets it, container credentials as EKS Pod Identity sets them),
never a profile, a shared file or instance metadata (the node's role); unsigned only for a bucket
the user marked public. A listed name that is not a plain relative path is refused, not skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlsplit

import httpx2

from pulumi_lora._staging._errors import (
    SourceFileMissing,
    SourceUnauthorized,
    SourceUnreachable,
    StagingError,
)
from pulumi_lora._staging._hub import fetch_hub
from pulumi_lora._staging._s3auth import (
    S3CredentialsMissing,
    credential_chain,
    credential_errors,
)
from pulumi_lora._staging._source import (
    HfSource,
    HttpsSource,
    S3Source,
    StagingRequest,
)
from pulumi_lora._staging._transfer import (
    Progress,
    active,
    bound_client,
    pumped,
    waited,
)
from pulumi_lora._staging._verify import BLOCK, FileFacts
from pulumi_lora._staging._write import (
    EXTRA_MISSING,
    TIMEOUT,
    Fetched,
    by_status,
    hidden,
    listed,
    tls_context,
    write_chunks,
)

__all__ = ["Fetched", "fetch_files"]


def fetch_files(
    request: StagingRequest, into: Path, env: Mapping[str, str], progress: Progress
) -> Fetched:
    """Fetch the request's files into ``into``, within ``progress``'s limits: each file's facts
    (size, sha256, computed as it was written) and the digests the source itself vouches for
    (the Hub's sha256 of LFS files), to be checked with the pinned ones."""
    source = request.source
    if isinstance(source, HfSource):
        return fetch_hub(source, request.files, into, env, progress)
    if isinstance(source, S3Source):
        return Fetched(files=_fetch_s3(source, request.files, into, env, progress), vouched={})
    return Fetched(files=_fetch_https(source, request.files, into, progress), vouched={})


# --- S3 -------------------------------------------------------------------------------------


def _fetch_s3(
    source: S3Source,
    files: tuple[str, ...],
    into: Path,
    env: Mapping[str, str],
    progress: Progress,
) -> dict[str, FileFacts]:
    client = _s3_client(source, env, progress)
    written: dict[str, FileFacts] = {}
    with _s3_errors(source, progress):
        if files:
            names = list(files)
        else:
            sizes = waited(partial(_list_s3, client, source), progress)
            progress.declare_all(sizes.values(), source.uri)
            names = sorted(sizes)
        for name in names:
            progress.start(name)
            with closing(pumped(partial(_s3_object, client, source, name), progress)) as items:
                size = next(items)
                progress.declare(size if isinstance(size, int) and size >= 0 else None)
                chunks = cast(Iterator[bytes], items)
                written[name] = write_chunks(chunks, into / name, progress)
            progress.done()
    return written


def _s3_client(source: S3Source, env: Mapping[str, str], progress: Progress) -> Any:
    """An S3 client for ``source``: unsigned for a bucket marked public, else signing with the
    credentials botocore's providers resolve from ``env`` (resolved now, within the deadline,
    so a web identity STS refuses fails before any file, saying how to give credentials)."""
    try:
        import boto3  # noqa: PLC0415 - the staging extra, only for s3://
        from botocore import UNSIGNED  # noqa: PLC0415
        from botocore.config import Config  # noqa: PLC0415
        from botocore.session import Session  # noqa: PLC0415
    except ModuleNotFoundError:
        raise StagingError(EXTRA_MISSING.format(scheme="s3", module="boto3")) from None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    session = Session()
    if not source.public:
        session.register_component("credential_provider", credential_chain(session, env, region))
        with credential_errors(source):
            waited(partial(_credentials, session, source), progress)
    config = Config(
        signature_version=UNSIGNED if source.public else None,
        connect_timeout=10,
        read_timeout=60,
        retries={"mode": "standard", "max_attempts": 3},
    )
    return boto3.Session(botocore_session=session).client(
        "s3",
        endpoint_url=source.endpoint or env.get("AWS_ENDPOINT_URL") or None,
        region_name=region,
        config=config,
    )


def _credentials(session: Any, source: S3Source) -> None:
    """Resolve the session's credentials once (the client reuses them): refreshable ones (web
    identity, container) are fetched now; none found is `S3CredentialsMissing`."""
    credentials = session.get_credentials()
    if credentials is None:
        raise S3CredentialsMissing(
            f"{source.uri}: no AWS credentials in the stager's environment (no "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, web identity or container "
            "credentials), and the bucket is not marked public"
        )
    credentials.get_frozen_credentials()


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
    found: dict[str, int] = {}
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=source.bucket, Prefix=source.prefix
    )
    for page in pages:
        for entry in page.get("Contents", []):
            relative = str(entry["Key"])[len(source.prefix) :]
            if relative and not relative.endswith("/") and not hidden(relative):
                found[listed(source.uri, relative)] = int(entry.get("Size", 0))
    if not found:
        raise SourceFileMissing(f"{source.uri}: no object under the prefix")
    return found


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
        raise by_status(f"{where}: {code}", status, progress.file) from None
    except BotoCoreError as exc:
        where = source.uri + (progress.file or "")
        raise SourceUnreachable(
            f"{where}: the S3 endpoint did not answer ({type(exc).__name__})", file=progress.file
        ) from None


# --- HTTPS ----------------------------------------------------------------------------------


def _fetch_https(
    source: HttpsSource, files: tuple[str, ...], into: Path, progress: Progress
) -> dict[str, FileFacts]:
    client = bound_client(
        httpx2.Client(follow_redirects=True, timeout=TIMEOUT, verify=tls_context())
    )
    https_only = urlsplit(source.base_url).scheme == "https"
    written: dict[str, FileFacts] = {}
    with client, active(progress, https_only=https_only):
        for name in files:
            progress.start(name)
            url = source.base_url + quote(name)
            try:
                with client.stream("GET", url) as response:
                    if response.status_code != 200:
                        raise by_status(f"{url}", response.status_code, name)
                    progress.declare(_content_length(response))
                    written[name] = write_chunks(response.iter_bytes(), into / name, progress)
            except httpx2.RequestError as exc:
                raise _https_error(exc, url, name, client.max_redirects) from None
            progress.done()
    return written


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
