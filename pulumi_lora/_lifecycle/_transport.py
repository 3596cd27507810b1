"""How the provider reaches each pod's SGLang: one client per pod for a transport.

The one place that turns a ``Transport`` into clients, and that refuses a transport that cannot
carry the server's API key (``Transport.carries_key``). The delegated transport reaches no pod
from here: the in-cluster loop does (``_delegated``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._errors import TransportUnavailable
from pulumi_lora._http._retry import PROXY_POLICY
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle._pool import POOL
from pulumi_lora._models import PROXY_STRIPS_KEY, Transport
from pulumi_lora._settings import ClientTimeouts
from pulumi_lora._sglang import SGLangClient


def ensure_reachable(transport: Transport, api_key: str | None) -> None:
    """Fail before anything is made when ``transport`` can't carry the server's API key."""
    if api_key and not transport.carries_key:
        raise TransportUnavailable(
            f"{PROXY_STRIPS_KEY}; use transport 'delegated' (or 'direct' from inside the "
            "cluster network)"
        )


def pod_clients(
    transport: Transport,
    source: KubeSource,
    pods: Sequence[PodEndpoint],
    api_key: str | None,
    timeouts: ClientTimeouts,
) -> dict[str, SGLangClient]:
    """One SGLang client per reachable pod: through the apiserver's pod proxy, or to the pod's
    own address (a pod without an IP gets none)."""
    ensure_reachable(transport, api_key)
    if transport is Transport.PROXY:
        access = POOL.proxy(source)
        return {
            p.name: POOL.sglang(
                access.pod_url(p),
                api_key=None,
                headers=access.headers,
                timeouts=timeouts,
                label=f"pod {p.name} (via apiserver proxy)",
                tls=access.ssl_context,
                auth=access.auth,
                retry=PROXY_POLICY,
            )
            for p in pods
        }
    return {
        p.name: POOL.sglang(
            p.url,
            api_key=api_key,
            headers={},
            timeouts=timeouts,
            label=f"pod {p.name} ({p.url})",
            tls=None,
        )
        for p in pods
        if p.ip
    }
