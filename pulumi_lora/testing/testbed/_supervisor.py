"""The detached process behind ``pulumi-lora testbed up``: runs one Testbed until told to stop.

``up`` starts ``python -m pulumi_lora.testing.testbed._supervisor --state-dir D --spec JSON`` in a
new session, then follows the state file ``D/state.json`` that this process rewrites (atomically)
at every step: ``phase`` goes ``starting`` → ``deploying`` → ``waiting-for-pods`` → ``ready``, or
``failed`` with an ``error``. SIGTERM or SIGINT stops the testbed, removes the state file and the
stable kubeconfig copy, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pulumi_lora.testing.testbed._containers import ContainerRuntime
from pulumi_lora.testing.testbed._handles import InferenceServiceHandle
from pulumi_lora.testing.testbed._pods import Network, Server
from pulumi_lora.testing.testbed._testbed import Testbed

__all__ = ["STATE_FILE", "SupervisorSpec", "main", "read_state", "write_state"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

STATE_FILE = "state.json"
"""Name of the state file inside the state directory."""

KUBECONFIG_FILE = "kubeconfig"
"""Name of the stable kubeconfig copy inside the state directory."""


@dataclass(frozen=True)
class SupervisorSpec:
    """What the supervisor runs (passed as JSON on its command line)."""

    isvcs: tuple[str, ...] = ()
    """InferenceService names to deploy (none: only the control plane)."""
    namespace: str = "default"
    """Namespace of the InferenceServices (created unless it exists)."""
    replicas: int = 1
    """Replicas of each InferenceService."""
    network: Network = "loopback"
    """Pod network: loopback or netns."""
    startup_delay: float = 0.0
    """Emulator start-up delay (seconds of 503 from /health_generate)."""
    ready_timeout: float = 60.0
    """Seconds to wait for the pods to be Ready."""
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    """extraArgs override (empty: the testbed's LoRA defaults)."""
    llmkube: bool = True
    """Run LLMKube's own LoRA controller (played), as every LLMKube install does."""
    container_runtime: ContainerRuntime = "auto"
    """How the re-sync loop's pods run: podman containers of their image, or local processes."""
    server: Server = "emulator"
    """What the SGLang pods run: the emulator, or the real server on the CPU (``sglang``)."""
    adapter_claim: str | None = None
    """A ReadWriteMany claim of this name mounted read-only at ``/adapters`` in every SGLang pod
    (staged adapters land on it); none: the adapter root is ``/adapters``."""


def write_state(state_dir: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (readers never see half a file)."""
    tmp = state_dir / f".{STATE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(state_dir / STATE_FILE)


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """The state file's content, or ``None`` when there is none (or it is unreadable)."""
    try:
        data = json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _pods_state(handles: list[InferenceServiceHandle]) -> list[dict[str, Any]]:
    return [
        {
            "namespace": handle.namespace,
            "name": handle.name,
            "pods": [asdict(info) for info in handle.pods()],
        }
        for handle in handles
    ]


def run(state_dir: Path, spec: SupervisorSpec, stop: threading.Event) -> int:
    """Run the testbed described by ``spec`` until ``stop`` is set; return the exit status."""
    state: dict[str, Any] = {
        "phase": "starting",
        "supervisor_pid": os.getpid(),
        "started_at": time.time(),
        "spec": asdict(spec),
    }
    write_state(state_dir, state)
    testbed = Testbed(
        llmkube_lora_controller=spec.llmkube, container_runtime=spec.container_runtime
    )
    handles: list[InferenceServiceHandle] = []
    kubeconfig = state_dir / KUBECONFIG_FILE
    try:
        testbed.start()
        testbed.write_kubeconfig(kubeconfig)
        state.update(
            phase="deploying" if spec.isvcs else "ready",
            id=testbed.id,
            server=testbed.server,
            kubeconfig=str(kubeconfig),
            dir=str(testbed.directory),
            pids=testbed.pids,
            versions=testbed.versions,
            audit_log=str(testbed.audit_log_path),
            loop_pods="containers" if testbed.runs_containers else "processes",
        )
        write_state(state_dir, state)
        if spec.isvcs:
            testbed.rest.request(
                "POST",
                "/api/v1/namespaces",
                body={
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": spec.namespace},
                },
                allow=(409,),
            )
            for name in spec.isvcs:
                kwargs: dict[str, Any] = {}
                if spec.extra_args:
                    kwargs["extra_args"] = spec.extra_args
                handles.append(
                    testbed.deploy_inference_service(
                        spec.namespace,
                        name,
                        replicas=spec.replicas,
                        network=spec.network,
                        startup_delay=spec.startup_delay,
                        server=spec.server,
                        adapter_claim=spec.adapter_claim,
                        # a real server's probe is a generation: once a second, as declared
                        probe_time_scale=1.0 if spec.server == "sglang" else None,
                        **kwargs,
                    )
                )
            state.update(phase="waiting-for-pods", isvcs=_pods_state(handles))
            write_state(state_dir, state)
            for handle in handles:
                handle.wait_ready(spec.ready_timeout)
        state.update(phase="ready", isvcs=_pods_state(handles), pids=testbed.pids)
        write_state(state_dir, state)
        _log.info("testbed supervisor ready (pid %d)", os.getpid())
        while not stop.wait(1.0):
            if handles:
                state["isvcs"] = _pods_state(handles)
                write_state(state_dir, state)
        return 0
    except Exception as exc:
        _log.exception("testbed supervisor failed")
        state.update(phase="failed", error=f"{type(exc).__name__}: {exc}")
        write_state(state_dir, state)
        return 1
    finally:
        state["phase"] = "stopping"
        if (state_dir / STATE_FILE).exists():
            write_state(state_dir, state)
        testbed.stop()
        kubeconfig.unlink(missing_ok=True)
        if state.get("error") is None:
            (state_dir / STATE_FILE).unlink(missing_ok=True)
        _log.info("testbed supervisor stopped")


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse ``--state-dir`` and ``--spec``, run until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m pulumi_lora.testing.testbed._supervisor")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--spec", default="{}", help="SupervisorSpec as JSON")
    args = parser.parse_args(argv)
    raw = json.loads(args.spec)
    raw["isvcs"] = tuple(raw.get("isvcs", ()))
    raw["extra_args"] = tuple(raw.get("extra_args", ()))
    spec = SupervisorSpec(**raw)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    stop = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    return run(args.state_dir, spec, stop)


if __name__ == "__main__":
    sys.exit(main())
