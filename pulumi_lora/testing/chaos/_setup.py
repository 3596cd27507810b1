"""A chaos run's options and its set-up: the service, its adapters, the re-sync loop, the stack.

:class:`RunSetUp` is a base class of ``_driver``'s run: its first phase, before any fault.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from pulumi_lora._pulumi._resource import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.loop import LoopProcess
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

__all__ = ["SERVICE", "ChaosOptions", "RunSetUp"]

SERVICE = "llama"
"""The InferenceService a chaos run deploys (and scales, and faults)."""


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    """How big and how long a chaos run is (the defaults are the CI run's)."""

    duration: float = 60.0  # seconds of faults
    seed: int = 1
    adapters: int = 20
    replicas: int = 4
    gap: tuple[float, float] = (1.0, 3.0)  # seconds between steps
    bound: float = 60.0  # seconds the loop has to heal the service after the last fault
    load_timeout: float = 2.0  # the loop's and the provider's load/unload timeout
    verify_interval: float = 3.0  # the loop's verification sweep
    apiserver_restart: bool = True
    workdir: Path | None = None  # default: a temporary directory, removed afterwards


class RunSetUp:
    """The set-up phase of ``_driver``'s run (a base class of it, which sets these attributes)."""

    tb: Testbed
    options: ChaosOptions
    workdir: Path
    namespace: str
    handle: InferenceServiceHandle | None
    replicas: int
    paths: dict[str, tuple[str, str]]
    declared: dict[str, dict[str, Any]]
    loop: LoopProcess | None
    loop_kubeconfig: Path
    loop_namespace: str
    stack: auto.Stack | None
    _monitor: threading.Thread | None

    def _sample_forever(self) -> None:
        raise NotImplementedError

    def _wait_whole(self, timeout: float, what: str) -> float:
        raise NotImplementedError

    # --- set-up -----------------------------------------------------------------------------------

    def _set_up(self) -> None:
        tb, options = self.tb, self.options
        self.namespace = tb.create_namespace("chaos")
        self.handle = tb.deploy_inference_service(self.namespace, SERVICE, replicas=self.replicas)
        self.handle.wait_ready(timeout=60)
        for index in range(options.adapters):
            name = f"a{index:02d}"
            self.paths[name] = (
                tb.make_adapter(f"chaos-{name}"),
                tb.make_adapter(f"chaos-{name}-b"),
            )
            self.declared[name] = {
                "adapter_name": f"chaos-{name}",
                "path": self.paths[name][0],
                "inference_service": SERVICE,
                "namespace": self.namespace,
            }
        self._start_loop_identity()
        self._start_loop()
        self.stack = self._make_stack()
        self.stack.up(on_output=lambda _line: None)
        self._monitor = threading.Thread(
            target=self._sample_forever, name="chaos-monitor", daemon=True
        )
        self._monitor.start()
        self._wait_whole(60, "the initial pulumi up to be whole")

    def _start_loop_identity(self) -> None:
        """Apply the loop's manifests (least-privilege RBAC) and a kubeconfig for its account.

        The Deployment gets no replicas: the testbed would run them, and the chaos run starts
        (and kills) its loop processes itself.
        """
        system = self.tb.create_namespace("chaos-system")
        manifests = resync_manifests(
            system, "pulumi-lora:chaos", watch_namespace=self.namespace, replicas=0
        )
        rendered = self.workdir / "resync.yaml"
        rendered.write_text(yaml.safe_dump_all(manifests, sort_keys=False), encoding="utf-8")
        self._kubectl("apply", "-f", str(rendered))
        name = next(m["metadata"]["name"] for m in manifests if m["kind"] == "ServiceAccount")
        token = self._kubectl("create", "token", name, "-n", system, "--duration", "2h").strip()
        self.tb.write_kubeconfig(
            self.loop_kubeconfig, token=token, user=f"system:serviceaccount:{system}:{name}"
        )
        self.loop_namespace = system

    def _start_loop(self) -> None:
        timeout = str(self.options.load_timeout)
        self.loop = LoopProcess(
            [
                "--kubeconfig",
                str(self.loop_kubeconfig),
                "--namespace",
                self.namespace,
                "--lease-namespace",
                self.loop_namespace,
                "--verify-interval",
                str(self.options.verify_interval),
                "--backoff-base",
                "0.2",
                "--backoff-max",
                "3",
                "--load-timeout",
                timeout,
                "--unload-timeout",
                timeout,
                "--read-timeout",
                timeout,
                "--connect-timeout",
                "1",
                "--metrics-host",
                "127.0.0.1",
                "--metrics-port",
                "0",
            ],
            self.workdir / "resync.log",
        )

    def _make_stack(self) -> auto.Stack:
        declared = self.declared

        def program() -> None:
            for name, args in declared.items():
                LoRAAdapter(name, LoRAAdapterArgs(**args))

        engine = LocalEngine(self.workdir / "engine")
        stack = engine.inline_stack("lora-chaos", "chaos", program)
        timeout = auto.ConfigValue(str(self.options.load_timeout))
        stack.set_all_config(
            {
                "pulumi-lora:kubeconfig": auto.ConfigValue(str(self.tb.kubeconfig_path)),
                "pulumi-lora:loadTimeoutSeconds": timeout,
                "pulumi-lora:unloadTimeoutSeconds": timeout,
                "pulumi-lora:readTimeoutSeconds": timeout,
                "pulumi-lora:connectTimeoutSeconds": auto.ConfigValue("1"),
            }
        )
        return stack

    def _kubectl(self, *args: str) -> str:
        done = self.tb.kubectl(*args)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return str(done.stdout)
