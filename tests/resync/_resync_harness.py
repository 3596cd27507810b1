"""Running the re-sync loop as a real process (the CLI) in tests, and reading what it says.

``LoopProcess`` starts ``python -m pulumi_lora resync`` (or ``python -m pulumi_lora._resync``
until the command is mounted on the main CLI), collects its JSON log lines, finds its metrics
port from the ``serving`` line, and stops it with SIGTERM (or SIGKILL, to play a crash).
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

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pulumi_lora._cli import cli
from pulumi_lora._cluster import adapter_manifest, apply_adapter, get_adapter

T = TypeVar("T")


def loop_command() -> list[str]:
    """The loop's command line: through the main CLI when ``resync`` is mounted there."""
    if "resync" in getattr(cli, "commands", {}):
        return [sys.executable, "-m", "pulumi_lora", "resync"]
    return [sys.executable, "-m", "pulumi_lora._resync"]


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

    def get(self, path: str) -> httpx.Response:
        """GET one of the loop's routes."""
        return PROBE.get(f"{self.url}{path}")

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``: (name, sorted labels) → value."""
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


# --- the cluster side of a test -----------------------------------------------------------------


class Cluster:
    """One test's namespace: InferenceServices, CRs, and what the pods serve.

    ``close`` deletes the CRs and scales the InferenceServices to zero, so a later test's loop
    (which may watch every namespace) finds nothing of this one to act on.
    """

    def __init__(self, testbed: Any, namespace: str) -> None:
        self.tb = testbed
        self.namespace = namespace
        self.client = testbed.client()
        self.handles: list[Any] = []

    def deploy(self, name: str = "llama", replicas: int = 2, **kwargs: Any) -> Any:
        """Deploy an InferenceService and wait until its pods are Ready."""
        handle = self.tb.deploy_inference_service(self.namespace, name, replicas=replicas, **kwargs)
        self.handles.append(handle)
        handle.wait_ready(timeout=60)
        return handle

    def apply_cr(
        self,
        name: str,
        path: str,
        *,
        adapter: str | None = None,
        isvc: str = "llama",
        annotations: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Apply a LoRAAdapter as the provider would (server-side apply, its field manager)."""
        spec = {"name": adapter or name, "path": path, "inferenceServiceRef": {"name": isvc}}
        manifest = adapter_manifest(self.namespace, name, spec, dict(annotations or {}))
        return apply_adapter(self.client, manifest)

    def cr(self, name: str) -> dict[str, Any] | None:
        """The CR as stored (None when gone)."""
        return get_adapter(self.client, self.namespace, name)

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        """The CR's conditions by type."""
        cr = self.cr(name) or {}
        return {c["type"]: c for c in (cr.get("status") or {}).get("conditions") or ()}

    def kubectl(self, *args: str) -> str:
        """kubectl in this namespace; fails the test on a non-zero exit."""
        done = self.tb.kubectl(*args, "-n", self.namespace)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return str(done.stdout)

    def events(self) -> list[dict[str, Any]]:
        """Events in the namespace."""
        return list(json.loads(self.kubectl("get", "events", "-o", "json"))["items"])

    def close(self) -> None:
        """Delete this test's CRs and stop its pods."""
        self.tb.kubectl(
            "delete", "loraadapters.inference.llmkube.dev", "--all", "-n", self.namespace
        )
        for handle in self.handles:
            # Teardown: a failed scale must not hide the test's own result.
            with contextlib.suppress(Exception):
                self.tb.scale(self.namespace, handle.name, 0)


#: One client for the tests' probes of pods (a client per call costs a TLS context each time);
#: no keep-alive, so no connection outlives a request and a pod can restart on its port.
PROBE = httpx.Client(trust_env=False, timeout=5, limits=httpx.Limits(max_keepalive_connections=0))


def served(handle: Any) -> dict[str, dict[str, str]]:
    """Every Ready pod's adapters (name → path) from its own ``/v1/models``."""
    found = {}
    for pod in handle.ready_pods():
        try:
            body = PROBE.get(f"{pod.url}/v1/models").json()
        except httpx.HTTPError:
            continue
        found[pod.name] = {m["id"]: m["root"] for m in body["data"] if m.get("parent")}
    return found


def everywhere(handle: Any, expected: Mapping[str, str], replicas: int | None = None) -> bool:
    """Whether every Ready pod (``replicas`` of them, when given) serves exactly ``expected``."""
    seen = served(handle)
    count = handle.replicas if replicas is None else replicas
    return len(seen) == count and all(adapters == dict(expected) for adapters in seen.values())


def emulator(url: str, method: str, route: str, body: Any = None) -> Any:
    """Talk to an emulator directly (out-of-band changes; its admin API)."""
    response = PROBE.request(method, f"{url}{route}", json=body, timeout=10)
    return response.json() if response.content else None
