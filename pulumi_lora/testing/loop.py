"""The re-sync loop as a real process, for tests, benchmarks and the chaos run.

``LoopProcess`` starts ``python -m pulumi_lora resync``, collects its JSON log lines (and writes
them to a file), finds its metrics port from the ``serving`` line, reads ``/metrics``, and stops
it with SIGTERM (or SIGKILL, to play a crash).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx2

__all__ = ["LoopProcess", "loop_command", "wait_until"]

T = TypeVar("T")

#: No keep-alive: no connection outlives a request, so a restarted loop can reuse its port.
_PROBE = httpx2.Client(
    trust_env=False, timeout=5, limits=httpx2.Limits(max_keepalive_connections=0)
)


def loop_command() -> list[str]:
    """The loop's command line, on this interpreter: ``python -m pulumi_lora resync``."""
    return [sys.executable, "-m", "pulumi_lora", "resync"]


def wait_until(
    check: Callable[[], T | None], timeout: float, interval: float = 0.05, what: str = ""
) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check} (last: {last!r})")


class LoopProcess:
    """One ``resync`` process."""

    def __init__(self, args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None):
        self.argv = [*loop_command(), *args]
        self.log_path = log_path
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._lock = threading.Lock()
        child_env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        child_env.update(env or {})
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = int(self.wait_event("serving", timeout=30)["port"])

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in self.proc.stderr:
                log.write(line)
                log.flush()
                with self._lock:
                    self.raw.append(line)
                    with contextlib.suppress(ValueError):  # a traceback's lines, say
                        self.lines.append(json.loads(line))

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    @property
    def url(self) -> str:
        """Base URL of the loop's health and metrics server."""
        return f"http://127.0.0.1:{self.port}"

    def events(self, name: str, **fields: Any) -> list[dict[str, Any]]:
        """Log lines of event ``name`` whose fields match."""
        with self._lock:
            lines = list(self.lines)
        return [
            line
            for line in lines
            if line.get("event") == name and all(line.get(k) == v for k, v in fields.items())
        ]

    def wait_event(self, name: str, timeout: float = 20.0, **fields: Any) -> dict[str, Any]:
        """Wait for a log line of event ``name`` (with these fields)."""

        def found() -> dict[str, Any] | None:
            if self.proc.poll() is not None and not self.events(name, **fields):
                raise AssertionError(
                    f"the loop exited ({self.proc.returncode}) before {name!r}:\n{self.tail()}"
                )
            hits = self.events(name, **fields)
            return hits[-1] if hits else None

        return wait_until(found, timeout, what=f"log event {name} {fields}")

    def get(self, path: str) -> httpx2.Response:
        """GET one of the loop's routes."""
        return _PROBE.get(f"{self.url}{path}")

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``: (name, sorted labels) → value."""
        from prometheus_client.parser import (  # noqa: PLC0415 - the metrics extra
            text_string_to_metric_families,
        )

        text = self.get("/metrics").text
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """The sum of samples named ``name`` whose labels include ``labels`` (0 when none)."""
        return sum(
            value
            for (sample, sample_labels), value in self.metrics().items()
            if sample == name and all((k, v) in sample_labels for k, v in labels.items())
        )

    def cpu_seconds(self) -> float:
        """User + system CPU of the process so far (Linux ``/proc``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> tuple[float, float]:
        """Current and peak resident memory in MB (Linux ``/proc``)."""
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
        )
        return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024

    def tail(self, lines: int = 60) -> str:
        """The last log lines, for failure messages."""
        with self._lock:
            return "".join(self.raw[-lines:])

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"the loop ignored SIGTERM for {timeout}s:\n{self.tail()}"
            ) from None
        finally:
            self._reader.join(5)

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to release the Lease."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
