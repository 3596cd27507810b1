"""The emulator's settings: SGLang's launch flags that matter for runtime LoRA, plus its own.

``EmulatorConfig`` refuses the flag combinations SGLang 0.5.15 refuses at launch (its
``check_lora_server_args``), with SGLang's texts, so a configuration that starts here starts there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pulumi_lora._staging._verify import ALL_TARGET_MODULES, SUPPORTED_TARGET_MODULES
from pulumi_lora.testing.emulator._faults import Fault

__all__ = ["EmulatorConfig", "EmulatorConfigError", "StartupAdapter"]

DEFAULT_MODEL_PATH = "emulator/base-model"
DEFAULT_CONTEXT_LENGTH = 131072


class EmulatorConfigError(ValueError):
    """A flag combination SGLang refuses at launch."""


@dataclass(frozen=True)
class StartupAdapter:
    """One ``--lora-paths`` item: loaded at launch, and listed in ``/server_info``."""

    name: str
    path: str
    pinned: bool = False


@dataclass(frozen=True, kw_only=True)
class EmulatorConfig:
    """Every flag of one emulated SGLang server; defaults are SGLang's unless noted."""

    host: str = "127.0.0.1"
    """``--host``: the address to listen on."""
    port: int = 0
    """``--port``; 0 (the default here, not SGLang's 30000) picks a free port."""
    model_path: str = DEFAULT_MODEL_PATH
    """``--model-path``: only a name here, no weights are read."""
    served_model_name: str | None = None
    """``--served-model-name``: the base model's id in ``/v1/models``; default the model path."""
    enable_lora: bool = False
    """``--enable-lora``; a non-empty ``lora_paths`` enables LoRA too."""
    lora_paths: tuple[StartupAdapter, ...] = ()
    """``--lora-paths``: adapters loaded at launch."""
    max_lora_rank: int | None = None
    """``--max-lora-rank``; default the largest rank of ``lora_paths``."""
    lora_target_modules: tuple[str, ...] | None = None
    """``--lora-target-modules`` (or ``("all",)``); default the modules of ``lora_paths``."""
    max_loras_per_batch: int = 8
    """``--max-loras-per-batch``: at most this minus one adapters can be pinned."""
    max_loaded_loras: int | None = None
    """``--max-loaded-loras``: beyond it a load evicts the least recently used unpinned adapter."""
    api_key: str | None = field(default=None, repr=False)
    """``--api-key``: required as a bearer token on every route but ``/health*``, ``/metrics*``."""
    admin_api_key: str | None = field(default=None, repr=False)
    """``--admin-api-key``: when set, the only key the load and unload routes accept."""
    random_seed: int | None = None
    """``--random-seed``; default a new random seed per launch (shown in ``/server_info``)."""
    dp_size: int = 1
    """``--dp-size``: above 1, runtime loads and unloads fail with a 500, as in SGLang."""
    context_length: int = DEFAULT_CONTEXT_LENGTH
    """``--context-length``: the base model's ``max_model_len`` in ``/v1/models``."""
    fs_root: Path | None = None
    """Emulator only (``--emulator-fs-root``): adapter paths resolve under this directory."""
    mounts: tuple[tuple[str, Path], ...] = ()
    """Emulator only (``--emulator-mount``): (container path, host directory) of the volumes the
    pod mounts; an adapter path under one resolves there, not under ``fs_root``."""
    startup_delay: float = 0.0
    """Emulator only (``--emulator-startup-delay``): seconds ``/health*`` answer 503 at start."""
    latency: Mapping[str, float] = field(default_factory=dict)
    """Emulator only (``--emulator-latency``): seconds added per route (``*``: all others)."""
    faults: tuple[Fault, ...] = ()
    """Emulator only (``--emulator-fault``): faults armed at start."""
    admin: bool = False
    """Emulator only (``--emulator-admin``): serve the ``/_emulator/`` admin API."""

    def __post_init__(self) -> None:
        _check_basics(self)
        if self.lora_enabled:
            _check_lora(self)

    @property
    def lora_enabled(self) -> bool:
        """Whether the server has LoRA at all (SGLang: ``--enable-lora`` or ``--lora-paths``)."""
        return self.enable_lora or bool(self.lora_paths)

    @property
    def pool_target_modules(self) -> tuple[str, ...] | None:
        """``lora_target_modules`` with ``all`` expanded, as SGLang stores it."""
        if ALL_TARGET_MODULES in (self.lora_target_modules or ()):
            return SUPPORTED_TARGET_MODULES
        return self.lora_target_modules

    @property
    def model_name(self) -> str:
        """The base model's served name."""
        return self.served_model_name or self.model_path


def _check_basics(config: EmulatorConfig) -> None:
    if not 0 <= config.port <= 65535:
        raise EmulatorConfigError(f"port must be within 0..65535, not {config.port}")
    if config.dp_size < 1:
        raise EmulatorConfigError("dp_size must be positive.")
    if config.startup_delay < 0 or any(seconds < 0 for seconds in config.latency.values()):
        raise EmulatorConfigError("startup delay and latencies must not be negative.")


def _check_lora(config: EmulatorConfig) -> None:
    """SGLang's ``check_lora_server_args``, in its order and with its texts."""
    if config.max_loras_per_batch <= 0:
        raise EmulatorConfigError("max_loras_per_batch must be positive.")
    modules = config.lora_target_modules or ()
    unknown = sorted(set(modules) - {*SUPPORTED_TARGET_MODULES, ALL_TARGET_MODULES})
    if unknown:
        raise EmulatorConfigError(
            f"Unsupported --lora-target-modules {unknown}; "
            f"choose from {[*SUPPORTED_TARGET_MODULES, ALL_TARGET_MODULES]}."
        )
    if ALL_TARGET_MODULES in modules and len(set(modules)) != 1:
        raise EmulatorConfigError(
            "If 'all' is specified in --lora-target-modules, it should be the only module "
            "specified."
        )
    if not config.lora_paths and not (config.max_lora_rank and modules):
        raise EmulatorConfigError(
            "When no initial --lora-paths is provided, you need to specify both "
            "--max-lora-rank and --lora-target-modules for LoRA initialization."
        )
    _check_max_loaded(config)


def _check_max_loaded(config: EmulatorConfig) -> None:
    limit = config.max_loaded_loras
    if limit is None:
        return
    if limit < config.max_loras_per_batch:
        raise EmulatorConfigError(
            "max_loaded_loras should be greater than or equal to max_loras_per_batch. "
            f"max_loaded_loras={limit}, max_loras_per_batch={config.max_loras_per_batch}"
        )
    if len(config.lora_paths) > limit:
        raise EmulatorConfigError(
            "The number of LoRA paths should not exceed max_loaded_loras. "
            f"max_loaded_loras={limit}, lora_paths={len(config.lora_paths)}"
        )
