"""An emulated SGLang 0.5.15 server: its runtime-LoRA HTTP contract, without a model or a GPU.

A real HTTP server (``http.server``, HTTP/1.1 keep-alive) that answers every route of the
SGLang LoRA contract (``pulumi_lora._sglang._protocol``) status code for status code: loads in
SGLang's check order, LRU eviction, pinning, implicit reload on inference, held-back unloads,
``/v1/models``, start-up 503s, API and admin keys. Adapter directories are read for real
(``adapter_config.json``); ``--emulator-fs-root DIR`` resolves container paths such as
``/adapters/sql`` under ``DIR``, like a volume mount. State lives in memory only.

Faults are armed by flag (``--emulator-fault SPEC``, ``--emulator-latency ROUTE=SECONDS``,
``--emulator-startup-delay S``; ``Fault`` documents the SPEC syntax), in process
(``EmulatorServer.inject``), or with ``--emulator-admin`` through ``/_emulator/faults`` and
``/_emulator/state``.

In process::

    config = EmulatorConfig(enable_lora=True, max_lora_rank=64, lora_target_modules=("all",))
    with EmulatorServer(config) as server:  # port 0: a free port
        httpx2.post(f"{server.url}/load_lora_adapter", json={...})

As a process: ``python -m pulumi_lora.testing.emulator --port 30000 --enable-lora ...`` with
SGLang's flags (unknown ones are ignored); SIGTERM stops it with status 0.
"""

from pulumi_lora.testing.emulator._args import parse_args
from pulumi_lora.testing.emulator._config import (
    EmulatorConfig,
    EmulatorConfigError,
    StartupAdapter,
)
from pulumi_lora.testing.emulator._engine import EmulatorLaunchError
from pulumi_lora.testing.emulator._faults import Fault
from pulumi_lora.testing.emulator._main import main
from pulumi_lora.testing.emulator._server import EmulatorServer

__all__ = [
    "EmulatorConfig",
    "EmulatorConfigError",
    "EmulatorLaunchError",
    "EmulatorServer",
    "Fault",
    "StartupAdapter",
    "main",
    "parse_args",
]
