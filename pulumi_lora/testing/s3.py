"""moto's S3-compatible server (``moto_server``, the project's ``test`` extra) on loopback, for
staging tests: a real S3 API, not a stand-in for one."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MotoServer", "MotoUnavailableError"]


class MotoUnavailableError(RuntimeError):
    """``moto_server`` is not installed beside this interpreter."""


@dataclass
class MotoServer:
    """``moto_server`` on 127.0.0.1 at a free port, and keys it accepts (any keys do)."""

    endpoint: str = ""
    env: dict[str, str] = field(
        default_factory=lambda: {
            "AWS_ACCESS_KEY_ID": "testing-key-id",
            "AWS_SECRET_ACCESS_KEY": "testing-secret-0123456789",
            "AWS_REGION": "us-east-1",
        }
    )
    _process: subprocess.Popen[str] | None = None

    @property
    def port(self) -> int:
        """The port it serves on."""
        return int(self.endpoint.rpartition(":")[2])

    def start(self) -> MotoServer:
        """Start it and wait until it names the port it bound."""
        program = shutil.which("moto_server", path=str(Path(sys.executable).parent))
        if program is None:
            raise MotoUnavailableError(
                "moto_server is not installed (the project's test extra: moto[server])"
            )
        process = subprocess.Popen(
            [program, "-H", "127.0.0.1", "-p", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:  # werkzeug names the port it bound, then serves
            found = re.search(r"Running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                self.endpoint = found[1]
                break
        if not self.endpoint:
            process.kill()
            raise RuntimeError(f"moto_server exited ({process.wait()}) without serving")
        # Its request log goes on: drain it, or the pipe fills and the server blocks.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        self._process = process
        return self

    def stop(self) -> None:
        """Stop it."""
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
