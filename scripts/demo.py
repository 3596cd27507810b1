"""The demo: the root stack on the local testbed, driven by the `pulumi` commands a user types.

Starts the testbed (real etcd + kube-apiserver, three emulated SGLang pods of an InferenceService,
adapter directories on disk), then, in the repository's root (``Pulumi.yaml`` + ``__main__.py``),
prints and runs ``pulumi stack init``, ``pulumi config set``, ``pulumi up``; shows which adapter
each pod serves; restarts a pod and shows ``pulumi preview --refresh --expect-no-changes`` catch
it and ``pulumi up`` heal it; then ``pulumi destroy`` and ``pulumi stack rm``, and tears the
testbed down (``--keep`` leaves both up and says how to reach them). The CLI's backend and
PULUMI_HOME are private to the run; its language host runs the program in ``.venv``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from pulumi_lora.testing.engine import LocalEngine, ProjectDir
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "models"
SERVICE = "llama"
VENV = ROOT / ".venv"
"""The stack's virtualenv (``Pulumi.yaml``: ``virtualenv: .venv``), made by tools/provision.py."""
STACK = "demo"


def demo_engine(home: Path) -> LocalEngine:
    """The demo's private Pulumi installation, resolving plugins as a user's installation does.

    ``.venv`` holds pulumi-kubernetes (the platform example and its tests need it), so the
    Python host reports its plugin as required by the stack, and the engine looks for it on
    ``PATH`` first, where the provisioned one sits beside the CLI: "warning: using
    pulumi-resource-kubernetes from $PATH" on every command. Ambient plugins off, it is found
    where a user's is, in the plugin cache (``LocalEngine`` links the provisioned one there);
    the language hosts and the dynamic-provider plugin are found beside the CLI, as bundled.
    """
    return LocalEngine(home, extra_env={"PULUMI_IGNORE_AMBIENT_PLUGINS": "true"})


def say(message: str) -> None:
    """Progress line."""
    print(f"[demo] {message}", flush=True)


@contextmanager
def step(title: str) -> Iterator[None]:
    """A titled, timed step."""
    say(f"{title} ...")
    start = time.monotonic()
    yield
    say(f"{title}: done in {time.monotonic() - start:.1f}s")


def show(done: subprocess.CompletedProcess[str]) -> None:
    """What the command printed, indented under it."""
    for line in (done.stdout + done.stderr).rstrip().splitlines():
        print(f"    {line}", flush=True)


def table(handle: InferenceServiceHandle) -> str:
    """Adapter x pod, read from each pod's own /v1/models."""
    lines = [f"  {'pod':<34} adapters (name -> path)"]
    for pod in handle.pods():
        if not pod.ready:
            lines.append(f"  {pod.name:<34} (not Ready)")
            continue
        body: dict[str, Any] = httpx2.get(f"{pod.url}/v1/models", timeout=5).json()
        served = {m["id"]: m["root"] for m in body["data"] if m.get("parent")}
        text = ", ".join(f"{k} -> {v}" for k, v in sorted(served.items())) or "(none)"
        lines.append(f"  {pod.name:<34} {text}")
    return "\n".join(lines)


def run_stack(shell: ProjectDir, testbed: Testbed, handle: InferenceServiceHandle) -> None:
    """The user's commands: up, a restarted pod seen as drift and healed, a clean preview."""
    shell.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
    shell.pulumi("config", "set", "namespace", NAMESPACE)
    shell.pulumi("config", "set", "inferenceService", SERVICE)
    with step("pulumi up (real engine, Python language host)"):
        show(shell.pulumi("up", "--yes"))
    outputs = shell.outputs()
    say(f"loaded: sql={outputs['sql_loaded']} chat={outputs['chat_loaded']}")
    print(table(handle), flush=True)

    victim = handle.ready_pods()[0].name
    with step(f"restarting pod {victim} (SGLang loses its adapters)"):
        testbed.restart_pod(NAMESPACE, victim)
        handle.wait_ready(timeout=60)
    print(table(handle), flush=True)
    with step("drift: pulumi preview --refresh --expect-no-changes fails"):
        drift = shell.pulumi("preview", "--refresh", "--expect-no-changes", check=False)
        show(drift)
        if drift.returncode == 0:
            raise SystemExit("the preview did not see the restarted pod")
    with step("pulumi up heals the restarted pod"):
        show(shell.pulumi("up", "--yes", "--skip-preview"))
    print(table(handle), flush=True)
    with step("pulumi preview --refresh --expect-no-changes (clean)"):
        show(shell.pulumi("preview", "--refresh", "--expect-no-changes"))


def main() -> int:
    """Run the demo; exit 0 when every step did what it says."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the testbed and stack up")
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="pulumi-lora-demo-"))
    testbed = Testbed()
    with step("starting the testbed (etcd, kube-apiserver, CRDs)"):
        testbed.start()
    try:
        with step(f"deploying InferenceService {NAMESPACE}/{SERVICE} with {args.replicas} pods"):
            testbed.client().create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
            handle = testbed.deploy_inference_service(NAMESPACE, SERVICE, replicas=args.replicas)
            for name in ("sql-lora", "chat-lora"):
                testbed.make_adapter(name)
            handle.wait_ready(timeout=60)
        engine = demo_engine(workdir / "engine")
        shell = engine.project(ROOT, echo=lambda line: print(f"  {line}", flush=True), venv=VENV)
        backend = engine.shell_env["PULUMI_BACKEND_URL"]
        say(f"in {ROOT}, with `source .venv/bin/activate` and PULUMI_BACKEND_URL={backend}:")
        shell.pulumi("stack", "init", STACK)
        try:
            run_stack(shell, testbed, handle)
            if args.keep:
                say(f"left up. export KUBECONFIG={testbed.kubeconfig_path}; kubectl get lora -A")
                say(f"pulumi: export PULUMI_BACKEND_URL={backend}")
                say("stop it with: kill the demo (Ctrl-C) - everything it started is torn down")
                while True:
                    time.sleep(3600)
            with step("pulumi destroy"):
                show(shell.pulumi("destroy", "--yes", "--skip-preview"))
        finally:
            shell.pulumi("stack", "rm", STACK, "--yes", "--force", check=False)
    finally:
        with step("tearing the testbed down"):
            testbed.stop()
    say("demo complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
