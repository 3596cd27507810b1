"""Kubeconfig users whose credentials expire: exec plugins and the oidc auth-provider.

One thread-safe token cache, re-run before expiry and after a 401, shared by lightkube and the
SGLang proxy client (lightkube's ``ExecAuth`` ignores expiry). Tokens never reach a log.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import subprocess
import threading
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import msgspec
from lightkube import AsyncClient, Client
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User, UserExec

from pulumi_lora._errors import ClusterError

__all__ = [
    "EXEC_API_VERSIONS",
    "PLUGIN_TIMEOUT_SECONDS",
    "Credentials",
    "ExecCredentials",
    "HttpxAuth",
    "LightkubeAuth",
    "OidcCredentials",
    "Token",
    "exec_info",
    "parse_exec_credential",
    "plugin_credentials",
    "refresh_margin",
    "usable",
    "use_credentials",
]

_C = TypeVar("_C", Client, AsyncClient)

#: The ``ExecCredential`` versions kubectl accepts today (v1alpha1 left client-go in 1.24).
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")

#: How long a plugin may run (``aws eks get-token`` takes about a second; a hung one must not
#: hang a ``pulumi up`` for ever).
PLUGIN_TIMEOUT_SECONDS = 60.0

#: At most this long before its expiry a token is replaced (and at most a fifth of its life).
MAX_MARGIN = timedelta(seconds=30)


@dataclass(frozen=True)
class Token:
    """A bearer token, when it was obtained and when it expires (None: not said)."""

    value: str = field(repr=False)
    obtained_at: datetime
    expires_at: datetime | None = None


def refresh_margin(token: Token) -> timedelta:
    """Pure: how long before ``expires_at`` the token is replaced: a fifth of its lifetime,
    at most `MAX_MARGIN`, so a request in flight or a clock a little off never sends it late."""
    if token.expires_at is None:
        return timedelta(0)
    return min(MAX_MARGIN, max(timedelta(0), (token.expires_at - token.obtained_at) / 5))


def usable(token: Token | None, now: datetime) -> bool:
    """Pure: whether ``token`` may still be sent at ``now``."""
    if token is None:
        return False
    return token.expires_at is None or now < token.expires_at - refresh_margin(token)


def exec_info(api_version: str) -> str:
    """Pure: the ``KUBERNETES_EXEC_INFO`` value client-go gives a plugin (never interactive)."""
    spec: dict[str, Any] = {"interactive": False}
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "spec": spec})


def parse_exec_credential(output: bytes, api_version: str, now: datetime) -> Token:
    """Pure: the token and expiry of a plugin's ``ExecCredential`` (``ClusterError`` if unusable).

    The output is never quoted in the error: it holds the token.
    """
    try:
        doc = json.loads(output)
    except ValueError:
        raise ClusterError(_bad_output("is not JSON")) from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ClusterError(_bad_output("is not an ExecCredential"))
    if doc.get("apiVersion") != api_version:
        raise ClusterError(
            _bad_output(f"has apiVersion {doc.get('apiVersion')!r}, the kubeconfig {api_version!r}")
        )
    status = doc.get("status") or {}
    token = status.get("token") if isinstance(status, dict) else None
    if not isinstance(token, str) or not token:
        cert = isinstance(status, dict) and status.get("clientCertificateData")
        raise ClusterError(
            _bad_output(
                "holds a client certificate, not a token; pulumi-lora takes only tokens from "
                "exec plugins"
                if cert
                else "holds no status.token"
            )
        )
    return Token(token, now, _timestamp(status.get("expirationTimestamp")))


def _timestamp(value: object) -> datetime | None:
    if not value:
        return None
    try:
        stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ClusterError(
            _bad_output(f"has an unreadable expirationTimestamp {value!r}")
        ) from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _bad_output(problem: str) -> str:
    return f"the kubeconfig's exec plugin printed output that {problem} (the output is not quoted)"


def run_plugin(argv: Sequence[str], env: Mapping[str, str], hint: str | None) -> bytes:
    """Run a credential plugin and return its stdout (its stderr goes into errors, as kubectl
    shows it; the stdout never does)."""
    try:
        done = subprocess.run(  # the kubeconfig names the command, as for kubectl
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PLUGIN_TIMEOUT_SECONDS,
            check=False,
        )
    except FileNotFoundError:
        raise ClusterError(
            f"the kubeconfig's exec plugin {argv[0]!r} is not installed"
            + (f": {hint}" if hint else "")
        ) from None
    except subprocess.TimeoutExpired:
        raise ClusterError(
            f"the kubeconfig's exec plugin {argv[0]!r} ran longer than "
            f"{PLUGIN_TIMEOUT_SECONDS:.0f} s"
        ) from None
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace").strip()[-500:]
        raise ClusterError(
            f"the kubeconfig's exec plugin {argv[0]!r} exited {done.returncode}"
            + (f": {stderr}" if stderr else "")
        )
    return done.stdout


class Credentials:
    """A token that may expire, shared by every client of one kubeconfig user; thread-safe.

    :meth:`bearer` (threads) and :meth:`abearer` (coroutines) return a token that is `usable`
    now, obtaining a new one when needed. One run of the plugin at a time: every caller that asks
    while it runs waits for that run and gets its token or its failure (the very exception), so
    a hung or failing plugin costs its callers one run, not one each; the next call after a
    failure runs it again. :meth:`rejected` drops a token the apiserver answered 401 to, so the
    next call obtains another.
    """

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._pending: Future[Token] | None = None  # the plugin run under way, if any
        self.obtained = 0  # how many tokens were obtained (tests and the CLI count plugin runs)

    def cached(self) -> str | None:
        """The current token if usable now, without obtaining one (never blocks on a plugin)."""
        token = self._token
        return token.value if token is not None and usable(token, self._clock()) else None

    def bearer(self) -> str:
        """A token usable now (runs the plugin, or waits for its run under way, when the cached
        one is missing or expiring); a failed run's error is raised in every caller it had."""
        joined = self._join()
        if isinstance(joined, str):
            return joined
        run, mine = joined
        if mine:
            self._fill(run)
        return run.result().value

    async def abearer(self) -> str:
        """:meth:`bearer` for a coroutine: the plugin runs in a thread, the waiting does not."""
        joined = self._join()
        if isinstance(joined, str):
            return joined
        run, mine = joined
        if mine:
            await asyncio.to_thread(self._fill, run)
        return (await asyncio.wrap_future(run)).value

    def rejected(self, value: str) -> None:
        """The apiserver refused ``value`` (401): forget it, unless another was obtained since."""
        with self._lock:
            if self._token is not None and self._token.value == value:
                self._token = None

    def _join(self) -> str | tuple[Future[Token], bool]:
        """The usable token, or the run to wait for and whether this caller must make it."""
        with self._lock:
            if self._token is not None and usable(self._token, self._clock()):
                return self._token.value
            if self._pending is not None:
                return self._pending, False
            self._pending = Future()
            self._pending.set_running_or_notify_cancel()  # so a waiter's cancel never cancels it
            return self._pending, True

    def _fill(self, run: Future[Token]) -> None:
        """Run the plugin once and settle ``run`` with its token or its failure."""
        try:
            token = self._obtain(self._clock())
        except BaseException as exc:  # every waiter gets it, then the next call tries again
            with self._lock:
                self._pending = None
            run.set_exception(exc)
            return
        with self._lock:
            self._token, self._pending = token, None
            self.obtained += 1
        run.set_result(token)

    def _obtain(self, now: datetime) -> Token:
        raise NotImplementedError


class ExecCredentials(Credentials):
    """Tokens from a kubeconfig exec plugin (``client.authentication.k8s.io/v1beta1`` or ``/v1``).

    ``run`` runs the plugin (tests pass a fake); ``base`` is the kubeconfig's folder, for
    relative commands.
    """

    def __init__(
        self,
        plugin: UserExec,
        *,
        base: Path | None = None,
        run: Callable[[Sequence[str], Mapping[str, str], str | None], bytes] = run_plugin,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if plugin.apiVersion not in EXEC_API_VERSIONS:
            raise ClusterError(
                f"the kubeconfig's exec plugin {plugin.command!r} uses apiVersion "
                f"{plugin.apiVersion!r}; supported: {', '.join(EXEC_API_VERSIONS)}"
            )
        super().__init__(clock)
        self._plugin = plugin
        self._base = base
        self._run = run

    @property
    def command(self) -> str:
        """The plugin's command, as the kubeconfig names it."""
        return self._plugin.command

    def _obtain(self, now: datetime) -> Token:
        plugin = self._plugin
        command = plugin.command
        if "/" in command and not Path(command).is_absolute() and self._base is not None:
            command = str(self._base / command)
        env = dict(os.environ)
        env.update((var.name, var.value) for var in plugin.env or ())
        env["KUBERNETES_EXEC_INFO"] = exec_info(plugin.apiVersion)
        output = self._run([command, *(plugin.args or ())], env, plugin.installHint)
        return parse_exec_credential(output, plugin.apiVersion, now)


class OidcCredentials(Credentials):
    """The ``oidc`` auth-provider's ``id-token``, used until the expiry its JWT states.

    Refreshing it needs the identity provider's token endpoint and a client secret, which
    kubectl does and rewrites the kubeconfig with; pulumi-lora does not, and says so once the
    token expired (kubelogin, an exec plugin, refreshes by itself).
    """

    def __init__(
        self, config: Mapping[str, Any], clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        super().__init__(clock)
        self._id_token = str(config.get("id-token") or "")
        if not self._id_token:
            raise ClusterError(_OIDC_ADVICE.format(problem="holds no id-token"))

    def _obtain(self, now: datetime) -> Token:
        token = Token(self._id_token, now, _jwt_expiry(self._id_token))
        if not usable(token, now):
            raise ClusterError(_OIDC_ADVICE.format(problem="holds an id-token that has expired"))
        return token


_OIDC_ADVICE = (
    "the kubeconfig's oidc auth-provider {problem}; run a kubectl command to refresh it, or "
    "use kubelogin (an exec plugin: kubectl oidc-login), which refreshes by itself"
)


def _jwt_expiry(token: str) -> datetime | None:
    """Pure: the ``exp`` claim of a JWT, or None when it has none (never raises)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return datetime.fromtimestamp(float(claims["exp"]), UTC)
    except (IndexError, ValueError, KeyError, TypeError, binascii.Error):
        return None


def plugin_credentials(config: SingleConfig) -> tuple[SingleConfig, Credentials | None]:
    """Split ``config``'s user into a plugin-free config (for lightkube to build its client
    with: TLS, server, certificates) and the :class:`Credentials` its plugin gives, if any.

    The auth-providers kubectl dropped in 1.26 (gcp, azure) are refused with what replaced them.
    """
    user = config.user
    if user is None or not (user.exec or user.auth_provider):
        return config, None
    stripped: User = msgspec.structs.replace(user, exec=None, auth_provider=None)
    plain = config._replace(user=stripped)
    if user.exec is not None:
        base = config.fname.parent if config.fname is not None else None
        return plain, ExecCredentials(user.exec, base=base)
    provider = dict(user.auth_provider or {})
    name = provider.get("name")
    if name == "oidc":
        return plain, OidcCredentials(provider.get("config") or {})
    replacement = {"gcp": "gke-gcloud-auth-plugin", "azure": "kubelogin"}.get(str(name))
    raise ClusterError(
        f"context {config.context_name!r} authenticates with the auth-provider {name!r}, which "
        "kubectl dropped in 1.26"
        + (f"; install {replacement}, which writes an exec-plugin user" if replacement else "")
        + " (exec plugins and oidc are supported)"
    )


def _sync_flow(credentials: Credentials, request: Any) -> Generator[Any, Any, None]:
    bearer = credentials.bearer()
    request.headers["Authorization"] = f"Bearer {bearer}"
    response = yield request
    if response.status_code == 401:
        credentials.rejected(bearer)
        request.headers["Authorization"] = f"Bearer {credentials.bearer()}"
        yield request


async def _async_flow(credentials: Credentials, request: Any) -> AsyncGenerator[Any, Any]:
    bearer = await credentials.abearer()
    request.headers["Authorization"] = f"Bearer {bearer}"
    response = yield request
    if response.status_code == 401:
        credentials.rejected(bearer)
        bearer = await credentials.abearer()
        request.headers["Authorization"] = f"Bearer {bearer}"
        yield request


class HttpxAuth(httpx2.Auth):
    """:class:`Credentials` as an ``httpx2`` auth flow (the SGLang client, ``proxy`` transport).

    A 401 drops the token and sends the request once more with a new one: the apiserver
    refused it before it reached the pod, so a load is never sent twice to SGLang.
    """

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def sync_auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        return _sync_flow(self.credentials, request)

    def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        return _async_flow(self.credentials, request)


class LightkubeAuth(httpx2.Auth):
    """:class:`Credentials` as an ``httpx2`` auth flow (lightkube's client), as `HttpxAuth`."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def sync_auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        return _sync_flow(self.credentials, request)

    def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        return _async_flow(self.credentials, request)


def use_credentials(client: _C, credentials: Credentials | None) -> _C:
    """``client`` (built from the plugin-free config), authenticating with ``credentials``."""
    if credentials is not None:
        generic: Any = client._client  # lightkube's generic client: its httpx2 client is _client
        generic._client.auth = LightkubeAuth(credentials)
    return client
