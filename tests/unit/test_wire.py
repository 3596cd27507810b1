"""Held writes (``pulumi_lora._http._send``): one write per request, the idle check, and the wiring
into the blocking SGLang client's and lightkube's connection pools."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client, KubeConfig

from pulumi_lora._http import _send
from pulumi_lora._http._send import WRITE_BUFFER, HeldWritesBackend, HeldWritesStream
from pulumi_lora._kube._source import held_writes
from pulumi_lora._sglang import deadline_transport


class Recorded:
    """A blocking stream that records what is done to it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.calls.append(("read", timeout))
        return b"HTTP/1.1 200 OK\r\n"

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.calls.append(("write", buffer))

    def close(self) -> None:
        self.calls.append(("close", None))

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> Recorded:
        self.calls.append(("start_tls", server_hostname))
        return Recorded()

    def get_extra_info(self, info: str) -> Any:
        self.calls.append(("extra", info))
        return True


def test_headers_and_body_leave_in_one_write_at_the_first_read() -> None:
    inner = Recorded()
    stream = HeldWritesStream(inner)
    stream.write(b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\n", 1.0)
    stream.write(b"{}", 1.0)
    stream.write(b"", 1.0)
    assert inner.calls == []
    stream.read(4096, 2.0)
    assert inner.calls == [
        ("write", b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}"),
        ("read", 2.0),
    ]
    stream.read(4096, 2.0)
    assert inner.calls[-1] == ("read", 2.0) and len(inner.calls) == 3  # nothing more held


def test_a_large_body_is_not_held() -> None:
    inner = Recorded()
    stream = HeldWritesStream(inner)
    stream.write(b"h" * 100)
    stream.write(b"b" * WRITE_BUFFER)
    assert inner.calls == [("write", b"h" * 100 + b"b" * WRITE_BUFFER)]


def test_close_drops_what_was_held_and_tls_sends_it_first() -> None:
    inner = Recorded()
    stream = HeldWritesStream(inner)
    stream.write(b"held")
    stream.close()
    assert inner.calls == [("close", None)]
    inner = Recorded()
    stream = HeldWritesStream(inner)
    stream.write(b"CONNECT")
    upgraded = stream.start_tls(object(), "example", 1.0)
    assert inner.calls == [("write", b"CONNECT"), ("start_tls", "example")]
    assert isinstance(upgraded, HeldWritesStream)


def test_the_idle_check_polls_only_a_connection_quiet_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(_send.time, "monotonic", lambda: now[0])
    inner = Recorded()
    stream = HeldWritesStream(inner)
    stream.read(10)
    assert stream.get_extra_info("is_readable") is False  # data just now: no poll
    assert ("extra", "is_readable") not in inner.calls
    now[0] += _send.RECENT + 0.1
    assert stream.get_extra_info("is_readable") is True  # asked the socket
    assert stream.get_extra_info("ssl_object") is True  # everything else passes through
    assert inner.calls[-2:] == [("extra", "is_readable"), ("extra", "ssl_object")]


def test_the_blocking_sglang_client_and_lightkube_hold_writes() -> None:
    """The private wiring both rely on holds in the installed httpx2 and lightkube."""
    pool: Any = deadline_transport()._pool
    assert isinstance(pool._network_backend._inner, HeldWritesBackend)
    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )
    client = held_writes(Client(config=config))
    backend = client._client._client._transport._pool._network_backend  # type: ignore[attr-defined]
    assert isinstance(backend, HeldWritesBackend)
    held_writes(client)  # idempotent
    assert client._client._client._transport._pool._network_backend is backend  # type: ignore[attr-defined]
