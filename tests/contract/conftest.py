"""Fixtures for the emulator's contract tests: adapter directories and running emulators.

Every emulator runs in process on 127.0.0.1, port 0, with ``--emulator-fs-root`` set to a
temporary directory, so adapters have realistic container paths (``/adapters/<name>``). Tests talk
to it with httpx2 over real sockets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pulumi_lora.testing.emulator import EmulatorConfig, EmulatorServer
from pulumi_lora.testing.peft import safetensors
from tests.contract._emulators import LORA, AdapterFactory, Emulator, StartEmulator, client


@pytest.fixture
def fs_root(tmp_path: Path) -> Path:
    root = tmp_path / "fs"
    root.mkdir()
    return root


WEIGHTS = safetensors({})
"""A weights file (the emulator reads only that one exists; the real server's tests write real
ones, ``test_both_ways.py``)."""


@pytest.fixture
def make_adapter(fs_root: Path) -> AdapterFactory:
    """Create ``/adapters/<name>`` (under the fs root) and return that container path."""

    def make(
        name: str,
        r: int = 8,
        target_modules: Sequence[str] = ("q_proj", "v_proj"),
        *,
        config: bool = True,
    ) -> str:
        directory = fs_root / "adapters" / name
        directory.mkdir(parents=True)
        if config:
            payload = {"r": r, "target_modules": list(target_modules), "lora_alpha": 16}
            (directory / "adapter_config.json").write_text(json.dumps(payload))
        (directory / "adapter_model.safetensors").write_bytes(WEIGHTS)
        return f"/adapters/{name}"

    return make


@pytest.fixture
def start(fs_root: Path) -> Iterator[StartEmulator]:
    """Start an emulator with these ``EmulatorConfig`` fields; all are stopped at teardown."""
    running: list[Emulator] = []

    def start_emulator(**fields: Any) -> Emulator:
        config = replace(EmulatorConfig(fs_root=fs_root, admin=True), **fields)
        server = EmulatorServer(config).start()
        emulator = Emulator(server, client(server.url))
        running.append(emulator)
        return emulator

    yield start_emulator
    for emulator in running:
        emulator.client.close()
        emulator.server.stop()


@pytest.fixture
def lora(start: StartEmulator) -> Emulator:
    """A LoRA server (rank 64, all modules) with no adapters loaded."""
    return start(**LORA)
