"""Where cluster credentials come from: the kubeconfig, its credential plugins, the clients.

Loads a kubeconfig as pulumi-kubernetes does, shares one credential plugin per user and process,
and builds what reaches the apiserver: lightkube clients and the pod proxy's TLS and auth.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client, KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._errors import ClusterError
from pulumi_lora._http._retry import retry_apiserver_answers
from pulumi_lora._http._send import hold_writes
from pulumi_lora._kube._auth import Credentials, HttpxAuth, plugin_credentials, use_credentials
from pulumi_lora._kube._kubeconfigs import load_merged

#: Field manager for the CR's spec and annotations (server-side apply).
SPEC_MANAGER = "pulumi-lora"


@dataclass(frozen=True)
class KubeSource:
    """Where cluster credentials come from, in pulumi-kubernetes' order of precedence.

    ``kubeconfig`` is either the content of a kubeconfig (secret config or input) or a path to
    one; ``context`` picks a context. When neither is set: ``KUBECONFIG`` (its files merged as
    kubectl merges them), then ``~/.kube/config``, then the in-cluster service account.
    """

    kubeconfig: str | None = None
    context: str | None = None

    def for_resource(self, kubeconfig: str | None, context: str | None) -> KubeSource:
        """A resource's source: its own ``kubeconfig`` and ``context`` where set, else these."""
        return KubeSource(kubeconfig or self.kubeconfig, context or self.context)

    def __repr__(self) -> str:  # the content of a kubeconfig holds credentials: never shown
        shown = None if self.kubeconfig is None else "set"
        return f"KubeSource(kubeconfig={shown}, context={self.context!r})"

    def load(self) -> SingleConfig:
        """Resolve to one cluster + user (raises ``ClusterError`` with a readable reason)."""
        try:
            if self.kubeconfig and _looks_like_content(self.kubeconfig):
                config = KubeConfig.from_dict(yaml.safe_load(self.kubeconfig))
            elif self.kubeconfig:
                config = KubeConfig.from_file(Path(self.kubeconfig).expanduser())
            elif os.environ.get("KUBECONFIG"):  # every file it lists, merged as kubectl does
                merged, first = load_merged(os.environ["KUBECONFIG"])
                config = KubeConfig.from_dict(merged, fname=first)
            else:
                config = KubeConfig.from_env()
            single = config.get(context_name=self.context)
        except Exception as exc:  # lightkube raises several unrelated types here
            where = "the given kubeconfig" if self.kubeconfig else "KUBECONFIG/~/.kube/config"
            content = bool(self.kubeconfig and _looks_like_content(self.kubeconfig))
            error = ClusterError(
                f"cannot load cluster credentials from {where}"
                + (f" (context {self.context!r})" if self.context else "")
                + f": {_content_error(exc) if content else f'{type(exc).__name__}: {exc}'}"
            )
            if content:
                # Not chained: a YAML error quotes the text around where it stopped, which may
                # be a token, and the engine is sent the whole formatted chain.
                raise error from None
            raise error from exc
        if single is None:
            raise ClusterError("the kubeconfig names no current context; set pulumi-lora:context")
        return single


def _content_error(exc: Exception) -> str:
    """What went wrong with a kubeconfig given as content, without quoting any of it."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return (
            f"{type(exc).__name__}: {exc.problem} at line {mark.line + 1}, column "
            f"{mark.column + 1} (the content is not quoted: it holds credentials)"
        )
    return f"{type(exc).__name__} (not a valid kubeconfig; the content is not quoted)"


def _looks_like_content(value: str) -> bool:
    return "\n" in value or value.lstrip().startswith(("apiVersion", "{"))


def make_client(source: KubeSource) -> Client:
    """A lightkube client for ``source`` (TLS verified as the kubeconfig says: on by default),
    authenticating as its user does: token, client certificate, or a credential plugin whose
    tokens are renewed before they expire (``_auth``); what a busy apiserver sheds (429,
    503) is sent again after its ``Retry-After`` (``_retry``)."""
    config, credentials = resolve(source)
    client = Client(config=config, field_manager=SPEC_MANAGER)
    return retry_apiserver_answers(held_writes(use_credentials(client, credentials)))


_CREDENTIALS: dict[tuple[KubeSource, str], Credentials] = {}
_CREDENTIALS_LOCK = threading.Lock()


def resolve(source: KubeSource) -> tuple[SingleConfig, Credentials | None]:
    """``source``'s config without its credential plugin, and the plugin's `Credentials`.

    Every client of one source and plugin in this process (lightkube's, the pod proxy's)
    shares one `Credentials`, so a plugin runs once per token, not once per client.
    """
    loaded = source.load()
    config, credentials = plugin_credentials(loaded)
    if credentials is None or loaded.user is None:
        return config, None
    key = (source, repr((loaded.user.exec, loaded.user.auth_provider)))
    with _CREDENTIALS_LOCK:
        return config, _CREDENTIALS.setdefault(key, credentials)


def held_writes(client: Client) -> Client:
    """``client``, its requests sent in one write each (`pulumi_lora._http._send`): half the TLS
    records and system calls of a status write or an Event."""
    generic: Any = client._client  # lightkube's GenericSyncClient: its httpx2 client is _client
    hold_writes(generic._client)
    return client


@dataclass(frozen=True)
class ProxyAccess:
    """What an HTTP client needs to reach pods through the apiserver's proxy subresource."""

    server: str
    headers: Mapping[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None
    auth: HttpxAuth | None = None  # a credential plugin's tokens, renewed as they expire

    def pod_url(self, pod: PodEndpoint) -> str:
        """Base URL of one pod's SGLang through the proxy."""
        return self.url(pod.namespace, pod.name, pod.port)

    def url(self, namespace: str, pod: str, port: int) -> str:
        """Base URL of port ``port`` of pod ``namespace/pod`` through the proxy."""
        return f"{self.server.rstrip('/')}/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy"


def proxy_access(source: KubeSource) -> ProxyAccess:
    """Build proxy access from the kubeconfig: token, client certificate or credential plugin
    (exec, as EKS, GKE and AKS write; oidc), and the cluster's CA.

    A plugin's tokens come from the `Credentials` the lightkube client of ``source`` shares
    (``resolve``), renewed before their expiry and after a 401, as ``HttpxAuth``.
    """
    config, credentials = resolve(source)
    cluster, user = config.cluster, config.user
    headers: dict[str, str] = {}
    if user is not None and getattr(user, "token", None):
        headers["Authorization"] = f"Bearer {user.token}"
    ctx = ssl.create_default_context()
    if getattr(cluster, "insecure", False):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ca_file = getattr(cluster, "certificate_auth", None)
    ca_data = getattr(cluster, "certificate_auth_data", None)
    if ca_file:
        ctx.load_verify_locations(cafile=str(config.abs_file(ca_file)))
    elif ca_data:
        ctx.load_verify_locations(cadata=base64.b64decode(ca_data).decode())
    if user is not None:
        with _client_cert_files(user) as cert:
            if cert:
                ctx.load_cert_chain(*cert)
    auth = HttpxAuth(credentials) if credentials is not None else None
    return ProxyAccess(server=str(cluster.server), headers=headers, ssl_context=ctx, auth=auth)


@contextmanager
def _client_cert_files(user: Any) -> Iterator[tuple[str, str] | None]:
    cert_file, key_file = getattr(user, "client_cert", None), getattr(user, "client_key", None)
    cert_data = getattr(user, "client_cert_data", None)
    key_data = getattr(user, "client_key_data", None)
    if cert_file and key_file:
        yield str(cert_file), str(key_file)
        return
    if not (cert_data and key_data):
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        cert_path.write_bytes(base64.b64decode(cert_data))
        key_path.write_bytes(base64.b64decode(key_data))
        key_path.chmod(0o600)
        yield str(cert_path), str(key_path)
