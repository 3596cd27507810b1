"""The demo: the root stack on the local testbed, end to end, with progress.

Starts the testbed (real etcd + kube-apiserver, three emulated SGLang pods of an InferenceService,
adapter directories on disk), runs ``pulumi up`` of the root demo stack on the real engine,
prints which adapter is loaded on which pod, restarts a pod with the re-sync loop running and
times the adapters coming back, shows a clean refresh, and tears everything down (``--keep``
leaves it up and says how to reach it).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from pulumi import automation as auto

from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "models"
SERVICE = "llama"


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


def load_program() -> Callable[[], None]:
    """The root stack's program (``__main__.py``), run inline by the Automation API."""
    spec = importlib.util.spec_from_file_location("pulumi_lora_demo_program", ROOT / "__main__.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    program: Callable[[], None] = module.program
    return program


def table(handle: InferenceServiceHandle) -> str:
    """Adapter x pod, read from each pod's own /v1/models."""
    lines = [f"  {'pod':<34} adapters (name -> path)"]
    for pod in handle.pods():
        if not pod.ready:
            lines.append(f"  {pod.name:<34} (not Ready)")
            continue
        body: dict[str, Any] = httpx.get(f"{pod.url}/v1/models", timeout=5).json()
        served = {m["id"]: m["root"] for m in body["data"] if m.get("parent")}
        text = ", ".join(f"{k} -> {v}" for k, v in sorted(served.items())) or "(none)"
        lines.append(f"  {pod.name:<34} {text}")
    return "\n".join(lines)


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
        engine = LocalEngine(workdir / "engine")
        stack = engine.inline_stack("pulumi-lora-demo", "demo", load_program())
        stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
        stack.set_config("namespace", auto.ConfigValue(NAMESPACE))
        stack.set_config("inferenceService", auto.ConfigValue(SERVICE))
        with step("pulumi up (real engine)"):
            up = stack.up(on_output=lambda line: print("    " + line.rstrip("\n"), flush=True))
        say(f"loaded: sql={up.outputs['sql_loaded'].value} chat={up.outputs['chat_loaded'].value}")
        print(table(handle), flush=True)

        victim = handle.ready_pods()[0].name
        with step(f"restarting pod {victim} (SGLang loses its adapters)"):
            testbed.restart_pod(NAMESPACE, victim)
            handle.wait_ready(timeout=60)
        print(table(handle), flush=True)
        with step("pulumi up heals the restarted pod"):
            stack.up()
        print(table(handle), flush=True)

        with step("pulumi preview --refresh --expect-no-changes (clean state)"):
            stack.preview(refresh=True, expect_no_changes=True)
        if args.keep:
            say(f"left up. export KUBECONFIG={testbed.kubeconfig_path}; kubectl get lora -A")
            say("stop it with: kill the demo (Ctrl-C) - everything it started is torn down")
            while True:
                time.sleep(3600)
        with step("pulumi destroy"):
            stack.destroy()
    finally:
        with step("tearing the testbed down"):
            testbed.stop()
    say("demo complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
