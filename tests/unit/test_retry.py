"""What a busy apiserver sheds (429, 503) is sent again after its Retry-After, within a bound;
every other answer reaches the caller at once (``pulumi_lora._http._retry``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import httpx2
import pytest
import yaml
from lightkube import ApiError, AsyncClient, Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import ConfigMap

from pulumi_lora._http._retry import (
    PROXY_POLICY,
    AsyncRetryingTransport,
    RetryingTransport,
    RetryPolicy,
    retry_apiserver_answers,
)
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._kube._source import KubeSource, make_client
from pulumi_lora._lifecycle._pool import ClientPool
from pulumi_lora._settings import ClientTimeouts

SHED = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429}
QUICK = RetryPolicy(attempts=10, default_wait=0.0, max_wait=0.0, budget=1.0)


def shedding(first: int, status: int = 429) -> tuple[Callable[..., httpx2.Response], list[bytes]]:
    """A handler answering ``status`` to the first ``first`` requests, then 200; the bodies."""
    bodies: list[bytes] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        bodies.append(request.read())
        if len(bodies) <= first:
            return httpx2.Response(
                status, json={**SHED, "code": status}, headers={"Retry-After": "0"}
            )
        return httpx2.Response(200, json={"kind": "ConfigMap", "metadata": {"name": "c"}})

    return handle, bodies


@pytest.mark.parametrize(
    ("status", "retries", "retry_after", "waited", "want"),
    [
        (429, 0, "1", 0.0, 1.0),
        (503, 3, None, 2.0, 1.0),  # no Retry-After: the default wait
        (429, 0, "120", 0.0, 10.0),  # capped per wait
        (429, 0, "Wed, 21 Oct 2026 07:28:00 GMT", 0.0, 1.0),  # an HTTP date: the default
        (429, 0, "nan", 0.0, 1.0),  # nothing a sleep can take
        (429, 0, "-5", 0.0, 0.0),
        (429, 10, "1", 0.0, -1),  # out of attempts
        (429, 2, "5", 28.0, -1),  # past the budget of waiting
        (403, 0, "1", 0.0, -1),  # a refusal is not shedding
        (500, 0, "1", 0.0, -1),
        (504, 0, None, 0.0, -1),  # may have been applied: the caller decides
    ],
)
def test_the_policy(
    status: int, retries: int, retry_after: str | None, waited: float, want: float
) -> None:
    assert RetryPolicy().delay(status, retry_after, retries, waited) == want


def test_a_shed_write_is_sent_again_with_its_body() -> None:
    handle, bodies = shedding(first=2)
    http = httpx2.Client(transport=RetryingTransport(httpx2.MockTransport(handle), QUICK))
    answer = http.post("http://apiserver/api/v1/namespaces/n/configmaps", content=b'{"a": 1}')
    assert answer.status_code == 200
    assert bodies == [b'{"a": 1}'] * 3


def test_the_last_answer_past_the_bound_reaches_the_caller_and_says_so() -> None:
    handle, bodies = shedding(first=100)
    policy = RetryPolicy(attempts=3, default_wait=0.0, max_wait=0.0, budget=1.0)
    client = Client(config=_config(), field_manager="t")
    retry_apiserver_answers(client, policy)
    _mock(client, handle)
    with pytest.raises(ApiError) as shed:
        client.get(ConfigMap, "c", namespace="n")
    assert len(bodies) == 4
    error = k8s.cluster_error("reading ConfigMap n/c", shed.value)
    assert "HTTP 429" in str(error) and "(the last of 4 answers over 0 s)" in str(error), error
    assert error.retryable


def test_a_refusal_is_not_retried() -> None:
    handle, bodies = shedding(first=5, status=403)
    http = httpx2.Client(transport=RetryingTransport(httpx2.MockTransport(handle), QUICK))
    assert http.get("http://apiserver/api").status_code == 403
    assert len(bodies) == 1


def test_lightkube_clients_retry_sync_and_async() -> None:
    handle, bodies = shedding(first=1, status=503)
    client = Client(config=_config(), field_manager="t")
    retry_apiserver_answers(client, QUICK)
    _mock(client, handle)
    assert client.get(ConfigMap, "c", namespace="n").metadata.name == "c"
    assert len(bodies) == 2

    async def get() -> str:
        handle, seen = shedding(first=2)
        aclient = AsyncClient(config=_config(), field_manager="t")
        retry_apiserver_answers(aclient, QUICK)
        _mock(aclient, handle, asynchronous=True)
        got = await aclient.get(ConfigMap, "c", namespace="n")
        assert len(seen) == 3
        return str(got.metadata.name)

    assert asyncio.run(get()) == "c"


def test_wrapping_twice_wraps_once() -> None:
    client = Client(config=_config(), field_manager="t")
    retry_apiserver_answers(retry_apiserver_answers(client))
    transport = client._client._client._transport  # type: ignore[attr-defined]
    assert isinstance(transport, RetryingTransport)
    assert not isinstance(transport._inner, RetryingTransport)


def test_the_providers_clients_retry() -> None:
    """Every client the provider and the CLI build (``make_client``) sends shed requests again."""
    source = KubeSource(kubeconfig=_KUBECONFIG)
    transport = make_client(source)._client._client._transport  # type: ignore[attr-defined]
    assert isinstance(transport, RetryingTransport)


def _mock(client: Client | AsyncClient, handle: Callable[..., httpx2.Response], **kw: bool) -> None:
    """Put ``handle`` under the retrying transport, where the network would be."""
    http = client._client._client  # type: ignore[union-attr]
    mock = httpx2.MockTransport(handle)
    wrapper = http._transport
    assert isinstance(
        wrapper, AsyncRetryingTransport if kw.get("asynchronous") else RetryingTransport
    )
    wrapper._inner = mock


_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://apiserver"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: n}}]
current-context: x
"""


def _config() -> KubeConfig:
    return KubeConfig.from_dict(yaml.safe_load(_KUBECONFIG))


def test_through_the_pod_proxy_only_a_shed_request_is_sent_again() -> None:
    """A 429 there is the apiserver's shedding; a 503 is the pod's (SGLang starting) or the
    proxy's failing to reach it, which the SGLang client judges itself."""
    quick = replace(PROXY_POLICY, default_wait=0.0, max_wait=0.0)
    for status, sends in ((429, 2), (503, 1)):
        handle, bodies = shedding(first=1, status=status)
        http = httpx2.Client(transport=RetryingTransport(httpx2.MockTransport(handle), quick))
        http.post("http://apiserver/api/v1/namespaces/n/pods/p:30000/proxy/load_lora_adapter")
        assert len(bodies) == sends, status


def test_the_proxy_transports_sglang_clients_retry() -> None:
    access = ClientTimeouts()
    client = ClientPool().sglang(
        "https://apiserver/api/v1/namespaces/n/pods/p:30000/proxy",
        api_key=None,
        headers={},
        timeouts=access,
        label="pod p (via apiserver proxy)",
        tls=None,
        retry=PROXY_POLICY,
    )
    transport = client._http._transport
    assert isinstance(transport, RetryingTransport) and transport._policy is PROXY_POLICY
