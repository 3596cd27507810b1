"""Fixtures of the operations tests: pod helpers (the engine comes from
``pulumi_lora.testing.fixtures``)."""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import pytest

from pulumi_lora.testing.testbed import InferenceServiceHandle

Served = Callable[[InferenceServiceHandle], dict[str, dict[str, str]]]
Unload = Callable[[str, str], None]


@pytest.fixture
def served() -> Served:
    """``served(handle)``: every Ready pod's adapters (name → path), from its own /v1/models."""

    def read(handle: InferenceServiceHandle) -> dict[str, dict[str, str]]:
        return handle.served()

    return read


@pytest.fixture
def unload() -> Unload:
    """``unload(pod_url, name)``: unload an adapter behind the provider's back (drift)."""

    def post(url: str, name: str) -> None:
        response = httpx2.post(f"{url}/unload_lora_adapter", json={"lora_name": name}, timeout=10)
        assert response.status_code == 200, response.text

    return post
