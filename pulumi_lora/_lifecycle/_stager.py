"""The provider's side of the stager server (``_staging._serve``): one per claim and credentials.

Only the token's sha256 goes in the Job. A thread holds ``/hold`` open so the server ends with
the process. A server that stops answering is replaced once: every call is idempotent.
"""

from __future__ import annotations

import atexit
import json
import secrets
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeVar

import httpx2
from lightkube import Client

from pulumi_lora._errors import ClusterError, Forbidden, PulumiLoRAError
from pulumi_lora._http._retry import PROXY_POLICY, RetryingTransport
from pulumi_lora._kube import _jobs
from pulumi_lora._kube._source import ProxyAccess
from pulumi_lora._staging._errors import StagingError
from pulumi_lora._staging._plan import FetchSettings, checked_document, job_document, server_job
from pulumi_lora._staging._serve import KEEPALIVE_SECONDS, PORT, TOKEN_HEADER, token_digest
from pulumi_lora._staging._source import StagingRequest

__all__ = ["STAGERS", "Stager", "StagerLost", "Stagers"]

DEADLINE_SECONDS = 3600
"""The stager's ``--deadline`` for one staging's fetch."""
START_SECONDS = 300.0
"""How long the server's pod may take to start (pull the image, mount the claim) before the
staging fails naming what it waits for."""
POLL_FIRST, POLL_GROWTH, POLL_MAX = 0.1, 1.5, 2.0
"""Seconds between two looks at a starting server: 0.1 s, then half as long again each time, up
to 2 s (a pod that starts at once is seen at once; a slow image pull costs the apiserver one
look every 2 s, not ten a second)."""
WAIT = 10.0
"""Seconds one call waits on the server for its staging (verification, removal) to end (then
the progress line, and the next call)."""
READ_TIMEOUT = 60.0
"""Seconds a call's answer may take (the server answers within ``WAIT``)."""
WAITING_FAILURES = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
"""A container waiting for one of these will not start by itself."""

Say = Callable[[str], None]
T = TypeVar("T")


class StagerLost(Exception):  # noqa: N818 - a state, as the project's errors are named
    """The server stopped answering: its pod ended or went away, or its proxy cannot reach it."""


class Stager:
    """One running server: its Job, its pod, the token, a client through the pod proxy."""

    def __init__(
        self,
        kube: Client,
        access: ProxyAccess,
        namespace: str,
        name: str,
        token: str,
        *,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.pod = ""
        self._token = token
        self._access = access
        self.wait = min(WAIT, read_timeout / 3)
        """Seconds the server may wait before answering: well within the read timeout."""
        verify: Any = access.ssl_context if access.ssl_context is not None else True
        transport: Any = RetryingTransport(httpx2.HTTPTransport(verify=verify), PROXY_POLICY)
        self._http = httpx2.Client(
            headers=dict(access.headers),
            auth=access.auth,
            timeout=httpx2.Timeout(read_timeout, connect=10.0),
            transport=transport,
        )
        self.lost = threading.Event()

    def __repr__(self) -> str:  # never the token
        return f"Stager({self.namespace}/{self.name}, pod={self.pod or '-'})"

    def url(self, path: str) -> str:
        """``path`` on the server, through the apiserver's pod proxy."""
        return self._access.url(self.namespace, self.pod, PORT) + path

    def call(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path``; the server's JSON answer (raises ``StagerLost``)."""
        try:
            answer = self._http.post(self.url(path), json=dict(body), headers=self._headers())
        except httpx2.HTTPError as exc:
            raise StagerLost(f"{type(exc).__name__}: {exc}") from exc
        return self._document(answer)

    def stage(self, request: StagingRequest, *, say: Say, label: str) -> dict[str, Any]:
        """Stage ``request`` and wait for its result document (raises the stager's error)."""
        return self.polled("/stage", json.loads(request.to_json()), say=say, label=label)

    def polled(self, path: str, body: Mapping[str, Any], *, say: Say, label: str) -> dict[str, Any]:
        """POST ``body`` to ``path`` until its call ended; its document (raises the stager's
        error). Each call waits on the server up to ``self.wait`` seconds for the end, so it
        is seen at once, and a long call (a staging, a multi-GB verification, a removal
        waiting for a key's lock) is never taken for a lost server; progress is said between
        two calls. An older server (an image of 0.3.0) answers ``/verify`` and ``/unstage``
        with the document itself."""
        started = time.monotonic()
        asked = f"{path}?wait={self.wait:g}"
        while True:
            answer = self.call(asked, body)
            if "state" not in answer or answer.get("state") == "done":
                return checked_document(answer.get("document", answer) or {})
            ticket = answer.get("ticket", "")
            asked = f"{path}?wait={self.wait:g}&ticket={ticket}"  # this call's end, no later one's
            now = time.monotonic()
            if now - started > DEADLINE_SECONDS + START_SECONDS:
                raise StagingError(f"{label}: not done within {DEADLINE_SECONDS}s")
            say(f"{label}: running for {now - started:.0f}s")

    def start(self, manifest: Mapping[str, Any], *, say: Say, label: str) -> None:
        """Create the Job, wait until its server answers, then hold it (deleted on failure)."""
        _jobs.create_job(self.kube, manifest)
        say(f"{label}: stager Job {self.namespace}/{self.name} started")
        try:
            self._wait_serving()
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self._hold, name=f"hold-{self.name}", daemon=True).start()

    def close(self) -> None:
        """Stop holding and delete the Job (its server ends with it)."""
        self.lost.set()
        try:
            _jobs.delete_job(self.kube, self.namespace, self.name)
        except (PulumiLoRAError, httpx2.HTTPError, OSError):
            return  # it ends by itself once nothing holds it

    def _headers(self) -> dict[str, str]:
        return {TOKEN_HEADER: self._token}

    def _document(self, answer: httpx2.Response) -> dict[str, Any]:
        """The server's JSON, or why there is none: the apiserver's own answers (a ``Status``)
        say the pod is gone or unreachable (``StagerLost``) or the identity may not proxy."""
        try:
            document = answer.json()
        except ValueError:
            document = None
        if answer.status_code == 200 and isinstance(document, dict):
            return document
        if isinstance(document, dict) and document.get("kind") == "Status":
            message = str(document.get("message") or "")
            if answer.status_code == 403:
                raise Forbidden(
                    f"the apiserver refused to proxy to the stager's pod {self.namespace}/"
                    f"{self.pod}: {message} (staging needs create on pods/proxy there)"
                )
            raise StagerLost(f"HTTP {answer.status_code}: {message}")
        if answer.status_code in {502, 503, 504}:
            raise StagerLost(f"HTTP {answer.status_code}: {answer.text[:200]}")
        raise StagingError(
            f"the stager {self.namespace}/{self.name} answered HTTP {answer.status_code}: "
            f"{answer.text[:300]}"
        )

    def _wait_serving(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Until the server's pod answers ``/healthz``; fails naming why it cannot start.
        Looks again after ``poll_delays``: often at first, then every 2 s."""
        started = time.monotonic()
        delays = poll_delays()
        while True:
            pods = _jobs.job_pods(self.kube, self.namespace, self.name)
            pod = pods[-1] if pods else None
            if pod is None:
                job = _jobs.get_job(self.kube, self.namespace, self.name) or {}
                if _failed(job):
                    raise StagingError(
                        f"stager Job {self.namespace}/{self.name} failed: {_failed(job)}"
                    )
            else:
                ended = _terminated(pod)
                if ended is not None:
                    job_document(ended.get("message"), ended.get("exitCode"))  # raises its error
                    raise StagingError(
                        f"stager Job {self.namespace}/{self.name} ended before serving"
                    )
                _check_started(pod, self.namespace, self.name, started)
                status = pod.get("status") or {}
                if status.get("phase") == "Running" and status.get("podIP"):
                    self.pod = str(pod["metadata"]["name"])
                    if self._healthy():
                        return
            if time.monotonic() - started > START_SECONDS:
                raise ClusterError(
                    f"stager Job {self.namespace}/{self.name} did not serve within "
                    f"{START_SECONDS:.0f}s"
                )
            sleep(next(delays))

    def _healthy(self) -> bool:
        try:
            return self._http.get(self.url("/healthz"), timeout=5.0).status_code == 200
        except httpx2.HTTPError:
            return False

    def _hold(self) -> None:
        """Keep ``/hold`` open while the process lives; after five failures in a row the server
        is taken as lost (the next call starts another)."""
        failures = 0
        timeout = httpx2.Timeout(10.0, read=3 * KEEPALIVE_SECONDS)
        while not self.lost.is_set():
            try:
                with self._http.stream(
                    "GET", self.url("/hold"), headers=self._headers(), timeout=timeout
                ) as answer:
                    if answer.status_code == 200:
                        failures = 0
                        for _ in answer.iter_raw():
                            if self.lost.is_set():
                                return
                    else:
                        failures += 1
            except httpx2.HTTPError:
                failures += 1
            if failures >= 5:
                self.lost.set()
                return
            self.lost.wait(0.5)


def poll_delays() -> Iterator[float]:
    """Pure: the waits between two looks at a starting server (``POLL_FIRST`` growing by
    ``POLL_GROWTH`` up to ``POLL_MAX``), endless."""
    delay = POLL_FIRST
    while True:
        yield delay
        delay = min(delay * POLL_GROWTH, POLL_MAX)


def _failed(job: Mapping[str, Any]) -> str:
    """The Job controller's reason once the Job failed, else ``""``."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return str(condition.get("reason") or "Failed")
    return ""


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``terminated`` state of the pod's container once it ended; an evicted pod's too."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    if status.get("phase") == "Failed":
        return {"message": None, "exitCode": None, "reason": status.get("reason")}
    return None


def _check_started(pod: Mapping[str, Any], namespace: str, name: str, started: float) -> None:
    """Fail early when the container cannot start by itself (a missing image, a Secret or
    ServiceAccount that does not exist, a claim never bound), naming why."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in WAITING_FAILURES:
            raise StagingError(
                f"stager Job {namespace}/{name} cannot start: {waiting.get('reason')}: "
                f"{waiting.get('message') or 'no message'} (check pulumi-lora:image, "
                "source_secret_name and source_service_account)"
            )
    if status.get("phase") == "Pending" and time.monotonic() - started > START_SECONDS:
        conditions = status.get("conditions") or ()
        why = "; ".join(str(c.get("message")) for c in conditions if c.get("message"))
        raise ClusterError(
            f"stager Job {namespace}/{name}: its pod did not start within "
            f"{START_SECONDS:.0f}s{': ' + why if why else ''}"
        )


class Stagers:
    """This process's servers, one per claim and credential set (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starting: dict[tuple[Hashable, Hashable], threading.Lock] = {}
        self._servers: dict[tuple[Hashable, Hashable], Stager] = {}

    def run(
        self,
        kube: Client,
        access: Callable[[], ProxyAccess],
        scope: Hashable,
        settings: FetchSettings,
        use: Callable[[Stager], T],
        *,
        say: Say,
        label: str,
        any_credentials: bool = False,
    ) -> T:
        """``use(server)`` on this claim's server for ``settings`` (started when there is none,
        replaced once when it is lost). ``any_credentials``: a call that needs none (verify,
        unstage) takes whichever server of the claim runs, before starting one."""
        key = _key(scope, settings)
        for attempt in (1, 2):
            server = (any_credentials and attempt == 1 and self._running_on(key[0])) or (
                self._server(key, kube, access, settings, say=say, label=label)
            )
            try:
                return use(server)
            except StagerLost as exc:
                self._drop(server)
                if attempt == 2:
                    raise StagingError(
                        f"{label}: the stager {server.namespace}/{server.name} stopped answering "
                        f"({exc}); run `pulumi up` again"
                    ) from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Delete every server of this process (tests; a process that ends normally)."""
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()

    def _server(
        self,
        key: tuple[Hashable, Hashable],
        kube: Client,
        access: Callable[[], ProxyAccess],
        settings: FetchSettings,
        *,
        say: Say,
        label: str,
    ) -> Stager:
        with self._lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:
            with self._lock:
                server = self._servers.get(key)
            if server is not None and not server.lost.is_set():
                return server
            name = f"pulumi-lora-stager-{secrets.token_hex(5)}"
            token = secrets.token_urlsafe(32)
            server = Stager(kube, access(), settings["namespace"], name, token)
            server.start(server_job(name, token_digest(token), **settings), say=say, label=label)
            with self._lock:
                self._servers[key] = server
            return server

    def _running_on(self, claim: Hashable) -> Stager | None:
        """A live server of ``claim`` (the cluster, namespace, claim and image), if any."""
        with self._lock:
            return next(
                (s for k, s in self._servers.items() if k[0] == claim and not s.lost.is_set()),
                None,
            )

    def _drop(self, server: Stager) -> None:
        with self._lock:
            for key in [k for k, s in self._servers.items() if s is server]:
                del self._servers[key]
        server.close()


def _key(scope: Hashable, settings: FetchSettings) -> tuple[Hashable, Hashable]:
    """Pure: the claim a server works on (cluster, namespace, claim, image), and what else
    makes it (credentials, endpoint, the server's flags): one server per pair."""
    claim = (scope, settings["namespace"], settings["mount"], settings["image"])
    made = tuple(sorted((k, _hashable(v)) for k, v in settings.items() if k not in _CLAIM_KEYS))
    return claim, made


_CLAIM_KEYS = frozenset({"namespace", "mount", "image"})


def _hashable(value: Any) -> Hashable:
    return tuple(value) if isinstance(value, list | tuple) else value


STAGERS = Stagers()
"""The process's stager servers (``_stage`` uses them)."""
atexit.register(STAGERS.close)
