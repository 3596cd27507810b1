"""Send again what a busy apiserver sheds: 429 and 503 answers, after their ``Retry-After``.

Neither did anything, so any request, a write included, may be resent. Under lightkube's clients,
and (429 only) the SGLang clients that use the pod proxy.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "PROXY_POLICY",
    "RETRIED_STATUSES",
    "AsyncRetryingTransport",
    "RetryPolicy",
    "RetryingTransport",
    "retried",
    "retry_apiserver_answers",
]

#: Answers that say the apiserver did not act on the request and will be able to later.
RETRIED_STATUSES = frozenset({429, 503})

#: The header lightkube's errors can read to say how long a request was retried for.
RETRIES_HEADER = "x-pulumi-lora-retries"


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep sending a request the apiserver sheds."""

    attempts: int = 10
    """Retries after the first send (client-go's default ``maxRetries``)."""
    default_wait: float = 1.0
    """Seconds to wait when the answer names none (APF names 1 s)."""
    max_wait: float = 10.0
    """The longest single wait, in seconds, whatever ``Retry-After`` asks."""
    budget: float = 30.0
    """Seconds of waiting per request in all; past it the last answer is the caller's."""
    statuses: frozenset[int] = RETRIED_STATUSES
    """The answers sent again (through the pod proxy, 429 only: a 503 there is the pod's)."""

    def delay(self, status: int, retry_after: str | None, retries: int, waited: float) -> float:
        """Pure: seconds to wait before sending again, or -1 to hand the answer to the caller.

        ``retries`` is how many times the request was already sent again, ``waited`` how long
        it has waited in all. A ``Retry-After`` of seconds is honoured up to ``max_wait``; an
        HTTP date, or none, waits ``default_wait``.
        """
        if status not in self.statuses or retries >= self.attempts:
            return -1
        wait = _seconds(retry_after, self.default_wait)
        wait = min(max(wait, 0.0), self.max_wait)
        if waited + wait > self.budget:
            return -1
        return wait


def _seconds(value: str | None, default: float) -> float:
    try:
        seconds = float(value) if value is not None else default
    except ValueError:  # an HTTP date: rare from an apiserver, and never worth a long wait
        return default
    return seconds if math.isfinite(seconds) else default


DEFAULT_POLICY = RetryPolicy()

#: Through the apiserver's pod proxy (``pods/NAME:PORT/proxy``): what API Priority and Fairness
#: sheds is sent again; a 503 comes from the pod (SGLang starting) or the proxy failing to reach
#: it, which the SGLang client judges itself.
PROXY_POLICY = RetryPolicy(statuses=frozenset({429}))

_C = TypeVar("_C")


class RetryingTransport:
    """A blocking httpx2-style transport that sends a shed request again (see the module).

    Duck-typed over ``inner`` (an httpx2 ``BaseTransport``): lightkube and the SGLang clients
    both build on httpx2. A request's body is bytes (lightkube's always are), so
    it can be sent again as it is.
    """

    def __init__(self, inner: Any, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self._inner = inner
        self._policy = policy

    def handle_request(self, request: Any) -> Any:
        retries, waited = 0, 0.0
        while True:
            response = self._inner.handle_request(request)
            wait = self._policy.delay(
                response.status_code, response.headers.get("retry-after"), retries, waited
            )
            if wait < 0:
                return _noted(response, retries, waited)
            response.close()
            time.sleep(wait)
            retries, waited = retries + 1, waited + wait

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> RetryingTransport:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:  # the pool (`_http._send.hold_writes`) and the rest
        return getattr(self._inner, name)


class AsyncRetryingTransport:
    """`RetryingTransport` for asyncio clients (the loop's watches and writes)."""

    def __init__(self, inner: Any, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        self._inner = inner
        self._policy = policy

    async def handle_async_request(self, request: Any) -> Any:
        retries, waited = 0, 0.0
        while True:
            response = await self._inner.handle_async_request(request)
            wait = self._policy.delay(
                response.status_code, response.headers.get("retry-after"), retries, waited
            )
            if wait < 0:
                return _noted(response, retries, waited)
            await response.aclose()
            await asyncio.sleep(wait)
            retries, waited = retries + 1, waited + wait

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> AsyncRetryingTransport:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _noted(response: Any, retries: int, waited: float) -> Any:
    """``response``, saying in a header how often it was sent again (for error messages)."""
    if retries:
        response.headers[RETRIES_HEADER] = f"{retries} {waited:g}"
    return response


def retry_apiserver_answers(client: _C, policy: RetryPolicy = DEFAULT_POLICY) -> _C:
    """``client`` (lightkube's, sync or async), sending again what the apiserver sheds.

    httpx2 offers no argument for wrapping the transport it builds (nor those it mounts for
    proxies from the environment); they are wrapped after, once.
    """
    generic: Any = getattr(client, "_client")  # noqa: B009 lightkube's generic client
    http = generic._client
    http._transport = _wrapped(http._transport, policy)
    http._mounts = {k: v and _wrapped(v, policy) for k, v in http._mounts.items()}
    return client


def _wrapped(inner: Any, policy: RetryPolicy) -> Any:
    if isinstance(inner, (RetryingTransport, AsyncRetryingTransport)):
        return inner
    if hasattr(inner, "handle_async_request"):
        return AsyncRetryingTransport(inner, policy)
    return RetryingTransport(inner, policy)


def retried(exc: Exception) -> str:
    """How often the answer in ``exc`` (an HTTP status error) was retried, as words for its
    message ("" when it was not)."""
    response = getattr(exc, "response", None)
    value = response.headers.get(RETRIES_HEADER) if response is not None else None
    if not value:
        return ""
    count, waited = value.split(" ", 1)
    return f" (the last of {int(count) + 1} answers over {waited} s)"
