"""An impostor pod: labelled as an InferenceService's, answering like SGLang, controlled by nobody.

What a tenant who may create pods in a namespace can make: a Pod carrying
``inference.llmkube.dev/service=NAME`` (and only that label, so no ReplicaSet's selector adopts
it) whose status says Ready at a loopback address where a real SGLang emulator answers, behind a
recorder that keeps every request it gets with its ``Authorization`` header. pulumi-lora must
send it nothing: no ``/v1/models``, no load, and never the API key.

The pod is not bound to the testbed's node, so no kubelet runs it; its status is written here,
through the ``pods/status`` subresource, as a kubelet would.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx2

from pulumi_lora._core._llmkube import SERVICE_LABEL
from pulumi_lora.testing.emulator import EmulatorConfig, EmulatorServer
from pulumi_lora.testing.testbed import Testbed

__all__ = ["Impostor", "Request"]


@dataclass(frozen=True)
class Request:
    """One request the impostor received."""

    method: str
    path: str
    authorization: str | None


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = upstream
        self.seen: list[Request] = []
        self.lock = threading.Lock()
        self.http = httpx2.Client(trust_env=False, timeout=30)


class _Forward(BaseHTTPRequestHandler):
    """Record the request, then answer with what the emulator behind answers."""

    protocol_version = "HTTP/1.1"
    server: _Recorder

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.seen.append(
                Request(self.command, self.path, self.headers.get("Authorization"))
            )
        answer = self.server.http.request(
            self.command,
            f"{self.server.upstream}{self.path}",
            content=body,
            headers={"Content-Type": self.headers.get("Content-Type") or "application/json"},
        )
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = _handle  # noqa: N815 - http.server's naming

    def log_message(self, format: str, *args: Any) -> None:
        return


class Impostor:
    """Create with a testbed, namespace and service name; use as a context manager."""

    def __init__(self, testbed: Testbed, namespace: str, service: str, name: str) -> None:
        self.testbed = testbed
        self.namespace = namespace
        self.service = service
        self.name = name
        config = EmulatorConfig(enable_lora=True, max_lora_rank=64, lora_target_modules=("all",))
        self._emulator = EmulatorServer(config).start()
        self._recorder = _Recorder(self._emulator.url)
        self._thread = threading.Thread(
            target=self._recorder.serve_forever, daemon=True, name=f"impostor:{name}"
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The loopback port the pod's status and container port point at."""
        return int(self._recorder.server_address[1])

    @property
    def url(self) -> str:
        """Base URL of the impostor's SGLang (the recorder)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[Request]:
        """Every request received so far."""
        with self._recorder.lock:
            return list(self._recorder.seen)

    def create(self) -> Impostor:
        """Create the Pod (the service label only, no ownerReferences) and mark it Ready."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {SERVICE_LABEL: self.service},
            },
            "spec": {
                "containers": [
                    {
                        "name": "sglang",
                        "image": "lmsysorg/sglang:impostor",
                        "ports": [{"name": "http", "containerPort": self.port}],
                    }
                ]
            },
        }
        self._kubectl("create", "-f", "-", stdin=json.dumps(pod))
        status = {
            "status": {
                "phase": "Running",
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": "sglang",
                        "ready": True,
                        "restartCount": 0,
                        "image": "lmsysorg/sglang:impostor",
                        "imageID": "",
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            }
        }
        self._kubectl(
            "patch",
            "pod",
            self.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(status),
        )
        return self

    def _kubectl(self, *args: str, stdin: str | None = None) -> None:
        done = self.testbed.kubectl(*args, "-n", self.namespace, input=stdin)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:2])}: {done.stderr.strip()}")

    def close(self) -> None:
        """Delete the Pod (immediately: no kubelet holds it) and stop the servers."""
        self.testbed.kubectl(
            "delete", "pod", self.name, "-n", self.namespace, "--grace-period=0", "--force"
        )
        self._recorder.shutdown()
        self._recorder.server_close()
        self._recorder.http.close()
        self._emulator.stop()

    def __enter__(self) -> Impostor:
        return self.create()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
