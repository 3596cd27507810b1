"""The command line: SGLang's launch flags (argparse, as SGLang uses) plus ``--emulator-*`` ones.

Flags SGLang has but the emulator does not need (``--tp-size``, ``--mem-fraction-static``, …) are
accepted and returned as ignored, so an InferenceService's arguments can be passed verbatim.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from pulumi_lora.testing.emulator._config import (
    DEFAULT_CONTEXT_LENGTH,
    DEFAULT_MODEL_PATH,
    EmulatorConfig,
    EmulatorConfigError,
    StartupAdapter,
)
from pulumi_lora.testing.emulator._faults import Fault, parse_latency

__all__ = ["ignored_flag_names", "parse_args"]

SGLANG_DEFAULT_PORT = 30000
_FAULT_HELP = """\
fault SPEC: [ROUTE:]KIND[=VALUE][,OPTION]...  (ROUTE '*' or a path; default '*')
  kinds:   status=CODE | drop | stall=SECONDS | malformed | huge=BYTES | drip=SECONDS
  options: times=N|always (default 1) | after (handle first, then fault the answer)
           | chunk=BYTES (drip) | head (drip the status line and headers too)
           | land=SECONDS (drop: handle the request that long after closing)
           | body=TEXT (status; last, taken verbatim)
  e.g.     /load_lora_adapter:status=503,times=2   *:drop,after   /v1/models:stall=5
           /load_lora_adapter:drop,land=3   /v1/models:drip=0.5,head
"""
_T = TypeVar("_T")


def parse_args(argv: Sequence[str]) -> tuple[EmulatorConfig, tuple[str, ...]]:
    """The configuration the arguments describe, and the arguments it ignored.

    Exits (``SystemExit`` 2, message on stderr) on a bad flag or a combination SGLang refuses.
    """
    parser = _parser()
    namespace, ignored = parser.parse_known_args(list(argv))
    try:
        config = _config(namespace)
    except EmulatorConfigError as exc:
        parser.error(str(exc))
    return config, tuple(ignored)


def ignored_flag_names(ignored: Sequence[str]) -> list[str]:
    """The flag names among ignored arguments, without values (they may hold secrets)."""
    return [arg.partition("=")[0] for arg in ignored if arg.startswith("-")]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pulumi_lora.testing.emulator",
        description="An emulated SGLang 0.5.15 server: runtime LoRA routes, no model.",
        epilog=_FAULT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_server_flags(parser)
    _add_lora_flags(parser)
    _add_emulator_flags(parser)
    return parser


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=SGLANG_DEFAULT_PORT)
    parser.add_argument("--model-path", "--model", default=DEFAULT_MODEL_PATH)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--admin-api-key", default=None)
    parser.add_argument("--random-seed", type=int, default=None)
    parser.add_argument("--dp-size", "--data-parallel-size", type=int, default=1)
    parser.add_argument("--context-length", type=int, default=DEFAULT_CONTEXT_LENGTH)


def _add_lora_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--enable-lora", action="store_true")
    parser.add_argument(
        "--lora-paths",
        nargs="*",
        type=_checked(_startup_adapter),
        default=[],
        help="<PATH> | <NAME>=<PATH> | JSON {'lora_name','lora_path','pinned'}",
    )
    parser.add_argument("--max-lora-rank", type=int, default=None)
    parser.add_argument("--lora-target-modules", nargs="*", default=None)
    parser.add_argument("--max-loras-per-batch", type=int, default=8)
    parser.add_argument("--max-loaded-loras", type=int, default=None)


def _mount(text: str) -> tuple[str, Path]:
    """``HOST:PATH`` → ``(PATH, HOST)``: a container path and the host directory mounted there."""
    host, sep, path = text.rpartition(":")
    if not sep or not host or not path.startswith("/"):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:/PATH")
    return path.rstrip("/") or "/", Path(host)


def _add_emulator_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("emulator only")
    group.add_argument(
        "--emulator-fs-root",
        type=Path,
        default=None,
        metavar="DIR",
        help="resolve adapter paths under DIR, like a volume mount",
    )
    group.add_argument(
        "--emulator-mount",
        type=_mount,
        action="append",
        default=[],
        metavar="HOST:PATH",
        help="resolve adapter paths under PATH in host directory HOST first (a volume the pod "
        "mounts; repeatable)",
    )
    group.add_argument(
        "--emulator-startup-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="answer /health and /health_generate 503 for S seconds after start",
    )
    group.add_argument(
        "--emulator-latency",
        action="append",
        type=_checked(parse_latency),
        default=[],
        metavar="ROUTE=SECONDS",
        help="add SECONDS to every request of ROUTE ('*': all others); repeatable",
    )
    group.add_argument(
        "--emulator-fault",
        action="append",
        type=_checked(Fault.parse),
        default=[],
        metavar="SPEC",
        help="arm a fault, e.g. /load_lora_adapter:status=503,times=2; repeatable",
    )
    group.add_argument(
        "--emulator-admin", action="store_true", help="serve the /_emulator/ admin API"
    )


def _checked(convert: Callable[[str], _T]) -> Callable[[str], _T]:
    """An argparse ``type`` that reports ``ValueError`` text as a usage error."""

    def run(text: str) -> _T:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    return run


def _startup_adapter(item: str) -> StartupAdapter:
    """One ``--lora-paths`` item, read as SGLang reads it (a bare path is also the name)."""
    item = item.strip()
    if item.startswith("{") and item.endswith("}"):
        data = json.loads(item)
        if not isinstance(data, dict) or "lora_name" not in data or "lora_path" not in data:
            raise ValueError(
                f"{item!r} looks like a JSON str, but it does not contain 'lora_name' and "
                "'lora_path' keys."
            )
        return StartupAdapter(
            str(data["lora_name"]), str(data["lora_path"]), bool(data.get("pinned", False))
        )
    if "=" in item:
        name, path = item.split("=", 1)
        return StartupAdapter(name, path)
    return StartupAdapter(item, item)


def _config(namespace: argparse.Namespace) -> EmulatorConfig:
    return EmulatorConfig(
        host=namespace.host,
        port=namespace.port,
        model_path=namespace.model_path,
        served_model_name=namespace.served_model_name,
        enable_lora=namespace.enable_lora,
        lora_paths=tuple(namespace.lora_paths),
        max_lora_rank=namespace.max_lora_rank,
        lora_target_modules=tuple(namespace.lora_target_modules or ()) or None,
        max_loras_per_batch=namespace.max_loras_per_batch,
        max_loaded_loras=namespace.max_loaded_loras,
        api_key=namespace.api_key,
        admin_api_key=namespace.admin_api_key,
        random_seed=namespace.random_seed,
        dp_size=namespace.dp_size,
        context_length=namespace.context_length,
        fs_root=namespace.emulator_fs_root,
        mounts=tuple(namespace.emulator_mount),
        startup_delay=namespace.emulator_startup_delay,
        latency=dict(namespace.emulator_latency),
        faults=tuple(namespace.emulator_fault),
        admin=namespace.emulator_admin,
    )
