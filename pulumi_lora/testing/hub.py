"""A played Hugging Face Hub on loopback, for staging tests: the calls the stager (plain GETs,
``_staging._hub``) and ``huggingface_hub`` (2.x) make to download files at a revision, answered
as the Hub answers them.

Reach it with ``HF_ENDPOINT=hub.endpoint``. It serves, for the repositories published on it:

* ``GET /api/models/{repo}/revision/{rev}``: ``{"id", "sha", "siblings", "private"}``
  (``HfApi.repo_info``, called by ``snapshot_download`` for a branch or tag);
* ``GET /api/models/{repo}/tree/{rev}?recursive=…``: the file list with ``oid``, ``size`` and,
  for LFS files, ``lfs.oid`` (sha256) and ``lfs.size`` (``HfApi.list_repo_tree``), in pages of
  ``tree_page`` entries (1000, as the Hub's), each but the last naming the next in a
  ``Link: <…&cursor=…>; rel="next"`` header;
* ``HEAD|GET /{repo}/resolve/{rev}/{file}``: a regular file answers 200 with ``X-Repo-Commit``,
  ``ETag`` (its git blob id) and its bytes; an LFS file answers 302 to the "CDN"
  (``http://localhost:{port}/cdn/{sha256}``: another origin than ``HF_ENDPOINT``'s
  ``127.0.0.1``, so the client drops ``Authorization`` as it does for the Hub's CDN) with
  ``X-Linked-Etag`` (the sha256), ``X-Linked-Size`` and ``X-Repo-Commit``;
* ``GET /cdn/{sha256}``: the bytes, honouring ``Range: bytes=N-`` (the client's resume).

A private repository answers 401 (``X-Error-Code: RepoNotFound``) without a token it accepts,
as the Hub does; an unknown revision 404 ``RevisionNotFound``, an unknown file 404
``EntryNotFound``. Every request is recorded (method, path, whether it carried a token) so a
test can assert what was, or was not, fetched.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import SplitResult, parse_qs, unquote, urlencode, urlsplit

__all__ = ["HubRepo", "HubRequest", "PlayedHub"]

_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<what>revision|tree)/(?P<rev>[^/?]+)")
_CDN = re.compile(r"^/cdn/(?P<sha>[0-9a-f]{64})$")
_RANGE = re.compile(r"^bytes=(?P<start>\d+)-$")


def git_blob_id(content: bytes) -> str:
    """Git's object id of a blob (what the Hub's ETag is for a regular file)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


@dataclass
class HubRepo:
    """One repository at one commit."""

    commit: str
    files: dict[str, bytes]
    lfs: frozenset[str] = frozenset()
    """The files stored in LFS (redirected to the CDN, listed with their sha256)."""
    private: bool = False
    branches: dict[str, str] = field(default_factory=dict)
    """Branch or tag → commit (``main`` always names ``commit``)."""
    sha256s: dict[str, str] = field(default_factory=dict)
    """File → sha256 of its bytes (computed once, at publication)."""
    blob_ids: dict[str, str] = field(default_factory=dict)
    """File → its git blob id, the ``ETag`` (computed once, at publication: the Hub does not hash
    a file per request, and a benchmark must not pay for it)."""


@dataclass(frozen=True)
class HubRequest:
    """One request the hub saw."""

    method: str
    path: str
    authorized: bool
    """Whether it carried an ``Authorization`` header."""


class PlayedHub:
    """The played Hub: ``start()``, publish repositories, point ``HF_ENDPOINT`` at ``endpoint``."""

    def __init__(
        self,
        tokens: frozenset[str] = frozenset(),
        tree_page: int = 1000,
        rate: float | None = None,
    ) -> None:
        self.tokens = tokens
        """Tokens that may read private repositories."""
        self.tree_page = tree_page
        """Entries in one page of a file list."""
        self.rate = rate
        """Bytes per second each answer's body is sent at, at most (``None``: as fast as the
        machine goes): a link to a real Hub, where the network, not the CPU, sets the pace."""
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[HubRequest] = []
        self._lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on (127.0.0.1)."""
        assert self._server is not None, "start() the hub first"
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """The value for ``HF_ENDPOINT``."""
        return f"http://127.0.0.1:{self.port}"

    def publish(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        *,
        lfs: frozenset[str] = frozenset(),
        private: bool = False,
        commit: str | None = None,
        branches: Mapping[str, str] | None = None,
    ) -> str:
        """Publish ``repo_id`` with ``files`` at a commit (derived from the content unless
        given); returns the commit."""
        if commit is None:
            digest = hashlib.sha1(usedforsecurity=False)
            for name in sorted(files):
                digest.update(name.encode() + b"\0" + files[name])
            commit = digest.hexdigest()
        sha256s = {name: hashlib.sha256(content).hexdigest() for name, content in files.items()}
        blob_ids = {name: git_blob_id(content) for name, content in files.items()}
        with self._lock:
            self.repos[repo_id] = HubRepo(
                commit=commit,
                files=dict(files),
                lfs=lfs,
                private=private,
                branches={"main": commit, **(branches or {})},
                sha256s=sha256s,
                blob_ids=blob_ids,
            )
            self._blobs.update({sha256s[name]: files[name] for name in lfs})
        return commit

    def file_requests(self) -> list[HubRequest]:
        """The requests that fetched a file's bytes (GET on resolve or on the CDN)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method == "GET" and ("/resolve/" in r.path or r.path.startswith("/cdn/"))
            ]

    def start(self) -> PlayedHub:
        """Listen on 127.0.0.1 (a free port) in a daemon thread."""
        hub = self

        class Handler(_Handler):
            played = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> PlayedHub:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- answers, as plain values -------------------------------------------------------------

    def _record(self, method: str, path: str, authorization: str | None) -> None:
        with self._lock:
            self.requests.append(HubRequest(method, path, authorization is not None))

    def _repo(self, repo_id: str, authorization: str | None) -> HubRepo | None:
        with self._lock:
            repo = self.repos.get(repo_id)
        if repo is None or (repo.private and not self._authorized(authorization)):
            return None
        return repo

    def _authorized(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and token in self.tokens

    def answer(self, method: str, target: str, headers: Mapping[str, str]) -> _Answer:
        """The answer to one request. Pure but for reading the published repositories."""
        authorization = headers.get("authorization")
        self._record(method, target, authorization)
        path = unquote(urlsplit(target).path)
        if (match := _CDN.match(path)) is not None:
            return self._cdn(match["sha"], headers.get("range"))
        match = _API.match(path) or _RESOLVE.match(path)
        if match is None:
            return _Answer(404, {"X-Error-Message": "not a Hub route"})
        repo = self._repo(match["repo"], authorization)
        if repo is None:
            return _Answer(
                401,
                {
                    "X-Error-Code": "RepoNotFound",
                    "X-Error-Message": "Invalid username or password.",
                },
            )
        commit = repo.branches.get(match["rev"], match["rev"])
        if commit != repo.commit:
            return _Answer(404, {"X-Error-Code": "RevisionNotFound"})
        if "what" in match.groupdict():
            return self._api(match["repo"], repo, match["what"], urlsplit(target))
        return self._resolve(repo, match["file"])

    def _api(self, repo_id: str, repo: HubRepo, what: str, target: SplitResult) -> _Answer:
        if what == "revision":
            body: Any = {
                "id": repo_id,
                "sha": repo.commit,
                "private": repo.private,
                "siblings": [{"rfilename": name} for name in sorted(repo.files)],
            }
            return _Answer(200, {"Content-Type": "application/json"}, json.dumps(body).encode())
        query = parse_qs(target.query)
        start = int(query.get("cursor", ["0"])[0])
        names = sorted(repo.files)
        page = names[start : start + self.tree_page]
        headers = {"Content-Type": "application/json"}
        if start + self.tree_page < len(names):
            following = urlencode(
                {**{k: v[0] for k, v in query.items()}, "cursor": start + len(page)}
            )
            headers["Link"] = f'<{self.endpoint}{target.path}?{following}>; rel="next"'
        body = [_tree_entry(name, repo) for name in page]
        return _Answer(200, headers, json.dumps(body).encode())

    def _resolve(self, repo: HubRepo, name: str) -> _Answer:
        content = repo.files.get(name)
        if content is None:
            return _Answer(404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo.commit})
        common = {"X-Repo-Commit": repo.commit}
        if name in repo.lfs:
            sha = repo.sha256s[name]
            return _Answer(
                302,
                {
                    **common,
                    "Location": f"http://localhost:{self.port}/cdn/{sha}",
                    "ETag": f'"{repo.blob_ids[name]}"',
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(content)),
                },
            )
        return _Answer(200, {**common, "ETag": f'"{repo.blob_ids[name]}"'}, content)

    def _cdn(self, sha: str, byte_range: str | None) -> _Answer:
        with self._lock:
            content = self._blobs.get(sha)
        if content is None:
            return _Answer(404)
        match = _RANGE.match(byte_range or "")
        if match is None:
            return _Answer(200, {}, content)
        start = int(match["start"])
        end = len(content) - 1
        headers = {"Content-Range": f"bytes {start}-{end}/{len(content)}"}
        return _Answer(206, headers, content[start:])


def _tree_entry(name: str, repo: HubRepo) -> dict[str, Any]:
    content = repo.files[name]
    entry: dict[str, Any] = {
        "type": "file",
        "path": name,
        "size": len(content),
        "oid": repo.blob_ids[name],
    }
    if name in repo.lfs:
        entry["lfs"] = {
            "oid": repo.sha256s[name],
            "size": len(content),
            "pointerSize": 134,
        }
    return entry


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class _Handler(BaseHTTPRequestHandler):
    played: PlayedHub
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._reply(self.played.answer("GET", self.path, self._headers()), body=True)

    def do_HEAD(self) -> None:
        self._reply(self.played.answer("HEAD", self.path, self._headers()), body=False)

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _reply(self, answer: _Answer, *, body: bool) -> None:
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if body and answer.body:
            view = memoryview(answer.body)
            began, rate = time.monotonic(), self.played.rate
            for start in range(0, len(view), 1 << 20):
                if rate is not None:  # this chunk leaves when the pace allows it
                    time.sleep(max(0.0, began + start / rate - time.monotonic()))
                self.wfile.write(view[start : start + (1 << 20)])

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the requests are recorded instead."""
