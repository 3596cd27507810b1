"""The testbed's pod helpers: InferenceServices, their pods, and adapter folders, for tests.

Thin helpers over the pod player (``_pods.py``) and the kubelet's state of each pod; the
testbed's operator, controllers and kubelet act the same on objects made any other way.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.testbed._containers import ContainerProcess
from pulumi_lora.testing.testbed._handles import DEFAULT_EXTRA_ARGS, InferenceServiceHandle
from pulumi_lora.testing.testbed._netns import netns_unavailable_reason
from pulumi_lora.testing.testbed._pods import Network, PodPlayer, Server

__all__ = ["PodHelpers", "TestbedError"]


class TestbedError(RuntimeError):
    """The testbed was used wrongly (not started, already stopped, ...)."""

    __test__ = False  # not a pytest test class


class PodHelpers:
    """Pod helpers of :class:`~pulumi_lora.testing.testbed.Testbed` (a base class of it)."""

    __test__ = False  # not a pytest test class

    @property
    def adapter_root(self) -> Path:
        """The directory the emulators read adapters from (the pods' ``/``)."""
        raise NotImplementedError

    def _require_player(self) -> PodPlayer:
        raise NotImplementedError

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        raise NotImplementedError

    def deploy_inference_service(
        self,
        namespace: str,
        name: str,
        *,
        replicas: int = 2,
        runtime: str = "sglang",
        extra_args: Sequence[str] = DEFAULT_EXTRA_ARGS,
        network: Network = "loopback",
        startup_delay: float = 0.0,
        emulator_args: Sequence[str] = (),
        model: str = "llama-8b",
        probe_time_scale: float | None = None,
        endpoint_port: int | None = None,
        server: Server = "emulator",
        adapter_claim: str | None = None,
    ) -> InferenceServiceHandle:
        """Create an InferenceService CR; return the handle on what the controllers run for it.

        A thin helper: the testbed's operator and controllers act on any InferenceService, this
        one only carries the test knobs (``network``, ``startup_delay``, ``emulator_args``,
        ``probe_time_scale``) as ``testbed.pulumi-lora.dev/`` annotations. ``probe_time_scale``
        is the factor on the readiness probe's periods (default 0.1, ten probes a second per
        pod; benchmarks pass 1.0 so that the probes cost what a real kubelet's would), never on
        its ``timeoutSeconds``, which the kubelet waits as declared. Returns
        once the pods exist and their emulators were started (not yet Ready: use
        :meth:`InferenceServiceHandle.wait_ready`). ``network="netns"`` needs root; see
        :func:`netns_available`. ``endpoint_port`` sets ``spec.endpoint.port``: the port of the
        Service LLMKube's operator creates (8080 without it, which the pods do not serve).
        ``server="sglang"`` runs the real SGLang server in each pod (on the CPU, the tiny model
        ``tools/provision.py`` built; about 4 GB and 20-30 s to start each) with ``extra_args``
        as its flags, as LLMKube passes them; ``emulator_args`` and ``startup_delay`` are the
        emulator's and do not apply to it. ``adapter_claim`` makes a bound ReadWriteMany
        PersistentVolumeClaim of that name (a directory of this testbed, :meth:`claim_directory`)
        and mounts it read-only at ``/adapters`` in every SGLang pod, the claim staged adapters
        land on; a pod that does not mount it cannot see its files.
        """
        if network == "netns":
            reason = netns_unavailable_reason()
            if reason is not None:
                raise TestbedError(f"netns pods are unavailable here: {reason}")
        return self._require_player().deploy(
            namespace,
            name,
            replicas=replicas,
            runtime=runtime,
            extra_args=extra_args,
            network=network,
            startup_delay=startup_delay,
            emulator_args=emulator_args,
            model=model,
            probe_time_scale=probe_time_scale,
            endpoint_port=endpoint_port,
            server=server,
            adapter_claim=adapter_claim,
        )

    def claim_directory(self, namespace: str, claim: str) -> Path:
        """The host directory behind the testbed's claim ``namespace/claim`` (made, and bound,
        if it was not): what staging Jobs write and the pods that mount it read."""
        return self._require_player().make_claim(namespace, claim)

    def jobs_left(self, namespace: str, timeout: float = 20.0) -> list[str]:
        """The Jobs in ``namespace`` once a command's stager has gone, by name: it ends by itself
        seconds after the provider process that held it (the server ends, the Job's TTL is 0),
        so this waits up to ``timeout`` for none to be left."""
        ends = time.monotonic() + timeout
        while True:
            listed = self.kubectl("get", "jobs", "-n", namespace, "-o", "name")
            left = listed.stdout.split() if listed.returncode == 0 else [listed.stderr.strip()]
            if not left or time.monotonic() >= ends:
                return left
            time.sleep(0.25)

    def expose_to_pods(self, port: int, host: str = "127.0.0.1") -> None:
        """Make ``host:port`` on this machine's loopback reachable at the same address from
        pods in network namespaces (a Hub endpoint or an S3 server a staging Job fetches from,
        as a cluster reaches a Service)."""
        self._require_player().routes.add_port(port, host)

    def inference_service(self, namespace: str, name: str) -> InferenceServiceHandle:
        """The handle of an InferenceService in the cluster (whoever made it); KeyError if none."""
        return self._require_player().handle(namespace, name)

    def delete_inference_service(self, namespace: str, name: str) -> None:
        """Stop an InferenceService's pods and delete them and its CR (frees their processes)."""
        self.inference_service(namespace, name).delete()

    def restart_pod(self, namespace: str, pod: str) -> None:
        """Restart a pod's emulator in place (state lost, restartCount+1, same address)."""
        self._require_player().handle_of_pod(namespace, pod).restart_pod(pod)

    def replace_pod(self, namespace: str, pod: str) -> str:
        """Delete a pod and create its replacement; returns the new pod's name."""
        return self._require_player().handle_of_pod(namespace, pod).replace_pod(pod).name

    def kill_pod_process(self, namespace: str, pod: str) -> None:
        """Crash a pod's emulator without restarting it (Ready becomes False)."""
        self._require_player().handle_of_pod(namespace, pod).kill_pod_process(pod)

    def crash_pod(self, namespace: str, pod: str) -> None:
        """SIGKILL any pod's container (the loop's too) as a crash would: no chance to clean up;
        the kubelet restarts it after its back-off where it restarts crashed containers."""
        runtime = self._require_player().runtime_of(namespace, pod)
        runtime.stop_container(crash=True)
        runtime.publish()

    def pod_host_pid(self, namespace: str, pod: str) -> int | None:
        """The host's pid of a pod's container process (for ``/proc``), ``None`` unless running.

        For a container: its first process as podman reports it; for a local process: its pid.
        """
        process = self._require_player().runtime_of(namespace, pod).process
        if process is None or not process.alive():
            return None
        if isinstance(process, ContainerProcess):
            return process.host_pid()
        return process.pid

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Patch the InferenceService's ``spec.replicas``; return once the pods follow."""
        self.inference_service(namespace, name).scale(replicas)

    def emulator_url(self, namespace: str, pod: str) -> str:
        """Base URL of a pod's emulator (``http://IP:PORT``)."""
        return self._require_player().handle_of_pod(namespace, pod).pod(pod).url

    def make_adapter(
        self,
        name: str,
        rank: int = 8,
        target_modules: Sequence[str] = ("q_proj", "v_proj"),
    ) -> str:
        """Write a PEFT LoRA adapter, ``adapters/<name>/`` under the adapter root.

        Its config and weights (``pulumi_lora.testing.peft``: for the testbed's tiny Llama) load
        on the emulator and on a real SGLang pod alike. Returns the path a pod sees,
        ``/adapters/<name>`` (what a LoRAAdapter's ``spec.path`` holds).
        """
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ValueError(f"adapter name {name!r} is not a safe directory name")
        folder = self.adapter_root / "adapters" / name
        write_adapter(folder, rank=rank, target_modules=target_modules, base_model="llama-8b")
        return f"/adapters/{name}"
