"""The process-wide client pool, shared by every operation of a provider process.

One Kubernetes client per kubeconfig source, one SGLang client per pod.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping
from typing import Any

import httpx2
from lightkube import Client

from pulumi_lora._http._retry import RetryingTransport, RetryPolicy
from pulumi_lora._kube._source import KubeSource, ProxyAccess, make_client, proxy_access
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import SGLangClient, deadline_transport


class ClientPool:
    """Process-wide clients, shared by every operation and thread of one provider process.

    A TLS context costs tens of milliseconds to build and a connection a round trip; a request
    costs a millisecond. The engine runs many resources through one provider process, so
    clients (and their keep-alive connections) are built once per server and kept. httpx2 and
    lightkube clients are thread-safe; the dict is guarded by a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kube: dict[KubeSource, Client] = {}
        self._proxy: dict[KubeSource, ProxyAccess] = {}
        self._sglang: dict[tuple[object, ...], SGLangClient] = {}
        self._default_tls: ssl.SSLContext | None = None

    def kube(self, source: KubeSource) -> Client:
        """The lightkube client for ``source``."""
        with self._lock:
            if source not in self._kube:
                self._kube[source] = make_client(source)
            return self._kube[source]

    def proxy(self, source: KubeSource) -> ProxyAccess:
        """Access through the apiserver's pod proxy for ``source``."""
        with self._lock:
            if source not in self._proxy:
                self._proxy[source] = proxy_access(source)
            return self._proxy[source]

    def sglang(
        self,
        url: str,
        *,
        api_key: str | None,
        headers: Mapping[str, str],
        timeouts: ClientTimeouts,
        label: str,
        tls: ssl.SSLContext | None,
        auth: httpx2.Auth | None = None,
        retry: RetryPolicy | None = None,
    ) -> SGLangClient:
        """The SGLang client for one server and credential (the key is only a dict key here).

        ``tls`` is the context to verify the server with (the cluster CA for the pod proxy);
        None means the system's default trust store, built once per process. ``auth`` carries a
        kubeconfig credential plugin's renewed tokens to the apiserver's pod proxy; ``retry``
        says which of its answers to send again (``_http._retry.PROXY_POLICY``).
        """
        key = (
            url,
            api_key,
            tuple(sorted(headers.items())),
            timeouts,
            label,
            id(tls),
            id(auth),
            retry,
        )
        with self._lock:
            client = self._sglang.get(key)
            if client is None:
                client = SGLangClient(
                    url,
                    api_key=api_key,
                    extra_headers=headers,
                    timeouts=timeouts,
                    label=label,
                    transport=_retrying(deadline_transport(verify=self._tls(url, tls)), retry),
                    auth=auth,
                )
                self._sglang[key] = client
            return client

    def _tls(self, url: str, tls: ssl.SSLContext | None) -> ssl.SSLContext | bool:
        """What verifies ``url``'s server: ``tls``, else the system's trust store (loading it
        costs tens of milliseconds, once per process). A plain ``http://`` pod never does TLS (the
        client follows no redirect), so it gets no trust store at all."""
        if tls is not None:
            return tls
        if not url.startswith("https://"):
            return False
        self._default_tls = self._default_tls or ssl.create_default_context()
        return self._default_tls


def _retrying(transport: httpx2.HTTPTransport, retry: RetryPolicy | None) -> Any:
    return transport if retry is None else RetryingTransport(transport, retry)


POOL = ClientPool()
