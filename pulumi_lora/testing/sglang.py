"""The real SGLang server on the CPU: where ``tools/provision.py`` put it, and how to start it.

``python3 tools/provision.py`` installs ``sglang==SGLANG_VERSION`` into a virtualenv of its own,
builds the tiny Llama the tests serve, and puts two test-support shims beside it (see
``tools/sglang/shims/``). :class:`RealSGLang` finds that tree; :meth:`RealSGLang.command` is the
command line and environment of one server, with the LoRA flags the caller passes (an
InferenceService's ``extraArgs``, as LLMKube passes them) after the CPU flags.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2

from pulumi_lora.testing._cache import PROVISION_COMMAND, cache_dir

if TYPE_CHECKING:
    from pulumi_lora.testing.testbed._process import ManagedProcess

__all__ = ["CPU_FLAGS", "SGLANG_VERSION", "RealSGLang", "RealSGLangMissingError", "generate"]

SGLANG_VERSION = "0.5.23"
"""The SGLang release the tests run (``tools/versions.toml``'s ``[sglang]``; a test keeps both
the same)."""

CPU_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--lora-backend",
    "torch_native",
    "--max-total-tokens",
    "8192",
    "--max-running-requests",
    "8",
    "--sleep-on-idle",
)
"""What a CPU needs (docs/real-sglang.md has why): SGLang's CPU engine, native torch attention
and LoRA kernels (Triton's need a GPU), a bounded KV cache (else 70 % of the memory) and an idle
scheduler that sleeps (else it spins a core)."""


class RealSGLangMissingError(FileNotFoundError):
    """The SGLang tree is not provisioned."""


@dataclass(frozen=True)
class RealSGLang:
    """One provisioned SGLang tree: its virtualenv, the tiny model and the shims."""

    home: Path

    @classmethod
    def find(cls) -> RealSGLang:
        """The provisioned tree, or :class:`RealSGLangMissingError` naming the command."""
        home = cache_dir() / f"sglang-{SGLANG_VERSION}"
        stamp = home / "stamp.json"
        if not stamp.exists() or not (home / "venv" / "bin" / "python").exists():
            raise RealSGLangMissingError(
                f"SGLang {SGLANG_VERSION} is not provisioned at {home}; "
                f"install it with `{PROVISION_COMMAND}` from the pulumi-lora repository"
            )
        json.loads(stamp.read_text())  # a half-written tree fails here, not in a server
        return cls(home)

    @property
    def python(self) -> Path:
        """The interpreter of SGLang's virtualenv."""
        return self.home / "venv" / "bin" / "python"

    @property
    def model(self) -> Path:
        """The tiny Llama's directory (``--model-path``)."""
        return self.home / "model"

    @property
    def shims(self) -> Path:
        """The test-support modules, for ``PYTHONPATH``."""
        return self.home / "shims"

    def command(
        self,
        host: str,
        port: int,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of one server on ``host:port`` serving the tiny model with
        ``args`` (the LoRA flags: ``--enable-lora``, ``--max-lora-rank``, ...)."""
        argv = [str(self.python), "-m", "sglang.launch_server"]
        argv += ["--model-path", str(self.model), "--host", host, "--port", str(port)]
        argv += [*CPU_FLAGS, *args]
        environment = dict(os.environ if env is None else env)
        environment["SGLANG_USE_CPU_ENGINE"] = "1"
        environment["PYTHONPATH"] = str(self.shims)
        environment["HF_HUB_OFFLINE"] = "1"  # the model is local; nothing goes to a hub
        environment.pop("VIRTUAL_ENV", None)
        return argv, environment

    def serve(
        self, port: int, args: Sequence[str], log: Path, *, timeout: float = 180.0
    ) -> ManagedProcess:
        """Start one server on ``127.0.0.1:port`` with ``args`` and wait until ``/health``
        answers 200; fails naming the log's end if it exits or is not ready in ``timeout``."""
        from pulumi_lora.testing.testbed._process import ManagedProcess, tail  # noqa: PLC0415

        argv, env = self.command("127.0.0.1", port, args)
        process = ManagedProcess(f"sglang :{port}", argv, log, env=env)
        process.start()
        deadline = time.monotonic() + timeout
        while True:
            if not process.alive():
                raise RuntimeError(f"SGLang exited while starting; its log ends:\n{tail(log)}")
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    return process
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                process.stop(timeout=20)
                raise RuntimeError(
                    f"SGLang not ready in {timeout:.0f} s; its log ends:\n{tail(log)}"
                )
            time.sleep(0.25)


def generate(url: str, lora: str | None = None, *, timeout: float = 60.0) -> str:
    """Greedy text (8 tokens) from the server at ``url``, through adapter ``lora`` or the base
    model: what tells an adapter that serves from one that is only listed. Raises
    ``RuntimeError`` naming the answer unless it is a 200."""
    body: dict[str, object] = {
        "text": "the adapter of the pod",
        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
    }
    if lora is not None:
        body["lora_path"] = lora
    answer = httpx2.post(f"{url}/generate", json=body, timeout=timeout)
    if answer.status_code != 200:
        raise RuntimeError(f"/generate at {url}: HTTP {answer.status_code}: {answer.text[:500]}")
    text: str = answer.json()["text"]
    return text
