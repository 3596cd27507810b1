"""Shared by the contract tests: the running-emulator handle and the fixtures' types."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx2

from pulumi_lora.testing.emulator import EmulatorServer

LORA = {"enable_lora": True, "max_lora_rank": 64, "lora_target_modules": ("all",)}
"""The flags of a LoRA server without startup adapters."""


@dataclass
class Emulator:
    """A running emulator and a kept-alive client for it."""

    server: EmulatorServer
    client: httpx2.Client

    def load(self, name: str, path: str, pinned: bool = False, **extra: Any) -> httpx2.Response:
        body = {"lora_name": name, "lora_path": path, "pinned": pinned, **extra}
        return self.client.post("/load_lora_adapter", json=body)

    def unload(self, name: str) -> httpx2.Response:
        return self.client.post("/unload_lora_adapter", json={"lora_name": name})

    def models(self) -> dict[str, str]:
        """Adapter name → root, from ``/v1/models`` (the entries with a parent)."""
        response = self.client.get("/v1/models")
        assert response.status_code == 200
        return {m["id"]: m["root"] for m in response.json()["data"] if m["parent"] is not None}

    def generate(
        self, lora_path: str | Sequence[str | None] | None, text: Any = "hi"
    ) -> httpx2.Response:
        lora = list(lora_path) if isinstance(lora_path, (list, tuple)) else lora_path
        return self.client.post("/generate", json={"text": text, "lora_path": lora})

    def chat(self, model: str) -> httpx2.Response:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        return self.client.post("/v1/chat/completions", json=body)

    def state(self) -> dict[str, Any]:
        response = self.client.get("/_emulator/state")
        assert response.status_code == 200
        return dict(response.json())


AdapterFactory = Callable[..., str]
"""``make_adapter(name, r=8, target_modules=(...), *, config=True)`` → its container path."""
StartEmulator = Callable[..., "Emulator"]
"""``start(**EmulatorConfig fields)`` → a running ``Emulator``."""


def client(url: str, **options: Any) -> httpx2.Client:
    """A plain-HTTP client for 127.0.0.1: no TLS context to build, no proxy from the environment."""
    return httpx2.Client(base_url=url, verify=False, trust_env=False, timeout=5.0, **options)


def wait_until(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    """Poll ``condition`` every few milliseconds; fail the test if it stays false."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)
