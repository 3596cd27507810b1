"""The loop's watch framing: events split on newline bytes only, never on the other characters
``str.splitlines`` treats as line breaks (a CR may hold them; the apiserver sends U+0085 raw)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from pulumi_lora._resync._kube import event_lines
from pulumi_lora.testing.fixtures import run_async

ODD = "a\x85b\u2028c\u2029d\x1ce\x0bf\x0cg\rh"


async def chunked(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def lines(data: bytes, size: int) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [line async for line in event_lines(chunked(data, size))]

    return run_async(collect())


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_events_split_on_newline_bytes_only(size: int) -> None:
    events = [
        {"type": "ADDED", "object": {"metadata": {"annotations": {"x": ODD}}}},
        {"type": "MODIFIED", "object": {"metadata": {"name": "é" * 300}}},
        {"type": "DELETED", "object": {"metadata": {"annotations": {"h": "h" * 5000}}}},
    ]
    # As the apiserver frames them: one JSON document per line, U+0085 raw (Go escapes only
    # U+2028/U+2029 and control characters; raw here too, to be sure).
    data = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)
    assert b"\xc2\x85" in data
    assert [json.loads(line) for line in lines(data, size)] == events


def test_a_last_event_without_newline_and_blank_lines() -> None:
    assert lines(b'\n{"a": 1}\n\n  \n{"b": 2}', 3) == [b'{"a": 1}', b'{"b": 2}']
