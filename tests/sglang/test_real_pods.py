"""End to end on real SGLang pods: the testbed's InferenceService runs the real server in each
pod (on the CPU, the tiny model), and ``pulumi up``, refresh, heal, path swap and destroy go
through the real engine, apiserver and provider, as a user's do.

After every heal, one generation through the adapter on every pod: the adapter is not only
listed, it serves (its output differs from the base model's). A bad adapter fails the ``up``
with SGLang's own words for it and leaves nothing loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pulumi
import pytest
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.fixtures import require_real_sglang_pods
from pulumi_lora.testing.loop import LoopProcess
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.sglang import generate
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import drift_report

REAL_LORA_FLAGS = ("--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all")
"""The InferenceService's ``extraArgs``, as a platform team writes them for runtime LoRA."""
START_TIMEOUT = 240.0
"""Two real servers starting side by side on two cores (about 30 s each alone)."""


@pytest.fixture(scope="module")
def real_pods(testbed: Testbed) -> Iterator[tuple[str, InferenceServiceHandle]]:
    """Two Ready real-SGLang pods, shared by this module's tests (each takes ~4 GB)."""
    require_real_sglang_pods()
    namespace = testbed.create_namespace("real")
    handle = testbed.deploy_inference_service(
        namespace,
        "llama",
        replicas=2,
        server="sglang",
        extra_args=REAL_LORA_FLAGS,
        probe_time_scale=1.0,  # a probe is a real generation: one a second, as declared
    )
    handle.wait_ready(timeout=START_TIMEOUT)
    yield namespace, handle
    testbed.release_namespace(namespace)


def program_of(declared: dict[str, dict[str, Any]]) -> Callable[[], None]:
    def program() -> None:
        for name, args in declared.items():
            adapter = LoRAAdapter(name, LoRAAdapterArgs(**args))
            pulumi.export(f"{name}_loaded", adapter.loaded)

    return program


def serves(handle: InferenceServiceHandle, name: str, path: str) -> None:
    """Every Ready pod lists ``name`` at ``path`` and generates through it."""
    served = handle.served()
    assert served and all(a.get(name) == path for a in served.values()), served
    for pod in handle.ready_pods():
        assert generate(pod.url, name) != generate(pod.url), f"{name} changes nothing on {pod.name}"


def test_up_drift_heal_swap_and_destroy_on_real_pods(
    engine: LocalEngine, testbed: Testbed, real_pods: tuple[str, InferenceServiceHandle]
) -> None:
    namespace, handle = real_pods
    v1, v2 = testbed.make_adapter("real-v1"), testbed.make_adapter("real-v2")
    declared = {"sql": {"adapter_name": "sql", "path": v1, "inference_service": "llama",
                        "namespace": namespace}}  # fmt: skip
    stack = engine.inline_stack("real-sglang", "e2e", program_of(declared))
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))

    assert stack.up().outputs["sql_loaded"].value is True
    serves(handle, "sql", v1)
    assert drift_report(stack) is None

    # Unloaded out of band on one real pod: the refresh names it, the next up re-loads it.
    victim = handle.ready_pods()[1]
    answer = httpx2.post(f"{victim.url}/unload_lora_adapter", json={"lora_name": "sql"})
    assert answer.status_code == 200, answer.text
    report = drift_report(stack)
    assert report is not None and "sql" in report
    stack.up()
    serves(handle, "sql", v1)

    # A real server restarted (it keeps nothing): drift, then healed by up.
    testbed.restart_pod(namespace, handle.ready_pods()[0].name)
    handle.wait_ready(timeout=START_TIMEOUT)
    assert drift_report(stack) is not None
    stack.up()
    serves(handle, "sql", v1)

    # A new path: every pod swaps to it.
    declared["sql"]["path"] = v2
    stack.up()
    serves(handle, "sql", v2)

    stack.destroy()
    assert get_adapter(testbed.client(), namespace, "sql") is None
    assert all("sql" not in adapters for adapters in handle.served().values())


def test_the_loop_reloads_a_restarted_real_pod(
    engine: LocalEngine,
    testbed: Testbed,
    real_pods: tuple[str, InferenceServiceHandle],
    tmp_path: Path,
) -> None:
    """The re-sync loop (``pulumi-lora resync``, as its image runs it) sees a real server come
    back empty after a restart and loads the declared adapter on it again, with no ``up``."""
    namespace, handle = real_pods
    path = testbed.make_adapter("real-loop")
    declared = {"kept": {"adapter_name": "kept", "path": path, "inference_service": "llama",
                         "namespace": namespace}}  # fmt: skip
    stack = engine.inline_stack("real-sglang", "loop", program_of(declared))
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    stack.up()
    loop = LoopProcess(
        ["--kubeconfig", str(testbed.kubeconfig_path), "--namespace", namespace,
         "--lease-namespace", namespace, "--lease-name", "real-sglang-loop",
         "--verify-interval", "2", "--metrics-host", "127.0.0.1", "--metrics-port", "0"],
        tmp_path / "loop.log",
    )  # fmt: skip
    try:
        loop.wait_event("caches_synced", timeout=60)
        victim = handle.ready_pods()[0].name
        testbed.restart_pod(namespace, victim)
        handle.wait_ready(timeout=START_TIMEOUT)
        deadline = time.monotonic() + 60
        while handle.served().get(victim) != {"kept": path}:
            assert time.monotonic() < deadline, f"not reloaded: {handle.served()}\n{loop.tail()}"
            time.sleep(0.5)
        serves(handle, "kept", path)
        assert loop.wait_event("pod_synced", pod=f"{namespace}/{victim}", timeout=10)
    finally:
        loop.stop()
        stack.destroy()


@pytest.mark.parametrize(
    ("broken", "words"),
    [
        pytest.param(
            {"rank": 32}, "incompatible with the current LoRA memory pool", id="rank-over-max"
        ),
        pytest.param(
            {"target_modules": ("nope_proj",)},
            "incompatible with the current LoRA memory pool",
            id="unknown-module",
        ),
        pytest.param({"missing": True}, "Cannot find any model weights", id="missing-weights"),
    ],
)
def test_a_bad_adapter_fails_with_sglangs_words_and_loads_nowhere(
    engine: LocalEngine,
    testbed: Testbed,
    real_pods: tuple[str, InferenceServiceHandle],
    broken: dict[str, Any],
    words: str,
) -> None:
    namespace, handle = real_pods
    name = f"bad-{sorted(broken)[0].replace('_', '-')}"
    folder = testbed.adapter_root / "adapters" / name
    missing = broken.pop("missing", False)
    write_adapter(folder, base_model="llama-8b", **broken)
    if missing:
        (folder / "adapter_model.safetensors").unlink()
    declared = {"bad": {"adapter_name": name, "path": f"/adapters/{name}",
                        "inference_service": "llama", "namespace": namespace}}  # fmt: skip
    stack = engine.inline_stack("real-sglang", name, program_of(declared))
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    with pytest.raises(auto.errors.CommandError) as failed:
        stack.up()
    print(f"\n--- {name}: what the up said ---\n{failed.value}")
    assert words in str(failed.value)
    assert all(name not in adapters for adapters in handle.served().values())
