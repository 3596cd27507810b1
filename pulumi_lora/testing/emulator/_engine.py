"""The state machine made safe for a threaded server, and the launch that builds it.

Loads and unloads (explicit, implicit reloads and evictions) are serialized by one lock taken in
arrival order, as SGLang's ``lora_update_lock`` (an ``asyncio.Lock``, whose waiters are woken
first come, first served); every other request only takes the short state lock, so
``/v1/models`` and inference stay concurrent with a slow load. Waiting for an adapter's in-flight
requests uses a condition on the state lock, so an unload answers only after they finish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial

from pulumi_lora.testing.emulator._adapters import normalize_target_modules, read_adapter
from pulumi_lora.testing.emulator._config import EmulatorConfig
from pulumi_lora.testing.emulator._state import (
    AdapterReadError,
    AdapterRef,
    AdapterSpec,
    InferenceError,
    LoraPolicy,
    LoraState,
    Reload,
    UpdateResult,
)

__all__ = ["EmulatorLaunchError", "Engine", "Sleep", "build_engine"]

Sleep = Callable[[float], object]
"""Waits some seconds (returns early when the server stops)."""


class EmulatorLaunchError(RuntimeError):
    """The server cannot start: a ``--lora-paths`` adapter is unreadable or refused."""


class FifoLock:
    """A lock granted in the order it was asked for (``threading.Lock`` promises no order)."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._issued = 0  # tickets handed out
        self._serving = 0  # the ticket that holds the lock

    def __enter__(self) -> None:
        with self._turns:
            ticket = self._issued
            self._issued += 1
            self._turns.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc: object) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()

    def locked(self) -> bool:
        """Whether someone holds it."""
        with self._turns:
            return self._serving != self._issued

    def asked(self) -> int:
        """How many have asked for it, ever: each holder and waiter counts from its arrival."""
        with self._turns:
            return self._issued


class Engine:
    """One server's LoRA state behind its locks; every method may be called from any thread."""

    def __init__(self, state: LoraState, read: Callable[[str], AdapterSpec], sleep: Sleep) -> None:
        self._state = state
        self._read = read
        self._sleep = sleep
        self._update_lock = FifoLock()
        self._changed = threading.Condition()

    def load(
        self, name: str, path: str, pinned: bool, delay: float = 0.0, *, launching: bool = False
    ) -> UpdateResult:
        """``/load_lora_adapter``: ``delay`` is the time spent reading weights, serialized.

        ``launching``: a ``--lora-paths`` adapter (see ``LoraState.load``).
        """
        with self._update_lock:
            self._sleep(delay)
            with self._changed:
                outcome = self._state.load(name, path, pinned, self._read, launching=launching)
            for lora_id in outcome.draining:
                self._finish_unload(lora_id)
            return outcome.result

    def unload(self, name: str, delay: float = 0.0) -> UpdateResult:
        """``/unload_lora_adapter``: unregister now, answer once in-flight requests are done."""
        with self._update_lock:
            self._sleep(delay)
            with self._changed:
                started = self._state.begin_unload(name)
            if isinstance(started, UpdateResult):
                return started
            return self._finish_unload(started)

    def infer(self, names: Sequence[str | None], delay: float = 0.0) -> frozenset[str]:
        """Run one request on these adapters (``None``: base) for ``delay`` seconds; the names
        among them whose weights are not all finite (their logits are NaN).

        Reloads implicitly the named adapters that were unloaded or evicted; raises
        ``InferenceError`` for a name that cannot be used.
        """
        with self._changed:
            reloads = self._state.plan_inference(names)
        if reloads:
            self._reload(reloads)
        with self._changed:
            lora_ids = self._state.acquire(names)
            broken = self._state.non_finite(names)
        try:
            self._sleep(delay)
        finally:
            with self._changed:
                self._state.release(lora_ids)
                self._changed.notify_all()
        return broken

    def registered(self) -> list[AdapterRef]:
        """The adapters ``/v1/models`` lists, least recently used first."""
        with self._changed:
            return self._state.registered()

    def snapshot(self) -> dict[str, object]:
        """The state for ``GET /_emulator/state``."""
        with self._changed:
            return {
                "updating": self._update_lock.locked(),
                "update_requests": self._update_lock.asked(),
                "adapters": [self._ref_json(ref) for ref in self._state.registered()],
                "draining": [self._ref_json(ref) for ref in self._state.draining()],
                "ever_loaded": self._state.ever_loaded(),
                "inferences": self._state.inferences(),
            }

    def _ref_json(self, ref: AdapterRef) -> dict[str, object]:
        return {
            "name": ref.name,
            "path": ref.path,
            "pinned": ref.pinned,
            "in_flight": self._state.in_flight(ref.lora_id),
        }

    def _reload(self, reloads: Sequence[Reload]) -> None:
        """Load again, as SGLang does before running a request, adapters it names."""
        with self._update_lock:
            for item in reloads:
                with self._changed:
                    if self._state.is_registered(item.name):
                        continue
                    outcome = self._state.load(item.name, item.path, item.pinned, self._read)
                for lora_id in outcome.draining:
                    self._finish_unload(lora_id)
                if not outcome.result.success:
                    raise InferenceError(
                        f"Failed to implicitly load LoRA adapter {item.name}: "
                        f"{outcome.result.error_message}"
                    )

    def _finish_unload(self, lora_id: str) -> UpdateResult:
        """Wait until nothing runs on ``lora_id``, then drop its weights."""
        with self._changed:
            self._changed.wait_for(lambda: self._state.in_flight(lora_id) == 0)
            return self._state.finish_unload(lora_id)


def build_engine(config: EmulatorConfig, sleep: Sleep) -> Engine:
    """The engine of a launch: the pool sized as SGLang sizes it, startup adapters loaded."""
    read = partial(read_adapter, fs_root=config.fs_root, mounts=config.mounts)
    startup_specs = [
        _read_startup(read, adapter.name, adapter.path) for adapter in config.lora_paths
    ]
    engine = Engine(LoraState(_policy(config, startup_specs)), read, sleep)
    for adapter in config.lora_paths:
        result = engine.load(adapter.name, adapter.path, adapter.pinned, launching=True)
        if not result.success:
            raise EmulatorLaunchError(
                f"Failed to load LoRA adapter {adapter.name}: {result.error_message}"
            )
    return engine


def _read_startup(read: Callable[[str], AdapterSpec], name: str, path: str) -> AdapterSpec:
    try:
        return read(path)
    except AdapterReadError as exc:
        raise EmulatorLaunchError(f"Failed to load LoRA adapter {name}: {exc}") from exc


def _policy(config: EmulatorConfig, startup: Sequence[AdapterSpec]) -> LoraPolicy:
    """The memory pool: flags where given, else inferred from the startup adapters."""
    modules = config.pool_target_modules
    if modules:
        pool_modules = normalize_target_modules(modules)
    else:
        pool_modules = frozenset().union(*(spec.target_modules for spec in startup))
    return LoraPolicy(
        enabled=config.lora_enabled,
        max_lora_rank=config.max_lora_rank or max((spec.rank for spec in startup), default=0),
        target_modules=pool_modules,
        max_loras_per_batch=config.max_loras_per_batch,
        max_loaded_loras=config.max_loaded_loras,
        dp_size=config.dp_size,
    )
