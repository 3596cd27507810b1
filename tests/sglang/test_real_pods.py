"""End to end on real SGLang pods: the testbed's InferenceService runs the real server in each
pod (on the CPU, the tiny model), and ``pulumi up``, refresh, heal, path swap and destroy go
through the real engine, apiserver and provider, as a user's do.

After every heal, one generation through the adapter on every pod: the adapter is not only
listed, it serves (its output differs from the base model's). A bad adapter fails the ``up``
with SGLang's own words for it and leaves nothing loaded.

The pods are probed as a default ``Testbed()`` probes them (periods ten times faster, the
declared 5 s timeout kept), and a watch on the namespace's pods records every change of their
Ready condition: once Ready, a pod stays Ready through up, refresh, heal, swap and destroy, but
for the restarts the tests make.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
from pulumi_lora.testing.testbed._rest import KubeRest
from tests.e2e.conftest import drift_report

REAL_LORA_FLAGS = ("--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all")
"""The InferenceService's ``extraArgs``, as a platform team writes them for runtime LoRA."""
START_TIMEOUT = 240.0
"""Two real servers starting side by side on two cores (about 30 s each alone)."""


@dataclass(frozen=True)
class Seen:
    """One change of a pod's Ready condition, as the apiserver's watch delivered it."""

    pod: str
    ready: bool
    running: bool
    """Whether the container ran (a restart's stop is published with it terminated)."""
    restarts: int


class ReadyWatch:
    """Every change of the Ready condition of the pods of one namespace, from the first LIST
    on, through a chain of watches (each resumed from the last resourceVersion).

    A change the watch could not deliver (a watch the apiserver cannot resume, 410 Gone, is
    noted in ``gaps`` and followed by a LIST; or two changes between two versions of the pod)
    still moves the condition's ``lastTransitionTime``: it is recorded as the two changes it
    hides.
    """

    def __init__(self, rest: KubeRest, namespace: str) -> None:
        self.rest = rest
        self.namespace = namespace
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.seen: list[Seen] = []
        self.gaps: list[str] = []
        self._last: dict[str, tuple[Seen, str]] = {}  # each pod's last state and its Ready since
        self._versions: dict[str, int] = {}  # the newest resourceVersion noted of each pod
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ready-watch", daemon=True)

    def start(self) -> None:
        listing = self.rest.get(self.path)
        for pod in listing["items"]:
            self._note(pod)
        self._version = str(listing["metadata"]["resourceVersion"])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            params = {"watch": "1", "resourceVersion": self._version,
                      "allowWatchBookmarks": "true", "timeoutSeconds": "5"}  # fmt: skip
            try:
                with self.rest.stream("GET", self.path, params=params, timeout=WATCH_WAIT) as got:
                    if got.status_code != 200:
                        self._gap(f"watch answered {got.status_code}")
                        continue
                    for line in got.iter_lines():
                        if line:
                            self._event(json.loads(line))
            except httpx2.HTTPError as exc:  # the watch broke: resume from the same version
                self._stop.wait(0.2)
                if self._stop.is_set():
                    return
                print(f"ready watch resumed after {exc!r}")

    def _gap(self, why: str) -> None:
        self.gaps.append(why)
        listing = self.rest.get(self.path)
        for pod in listing["items"]:
            self._note(pod)
        self._version = str(listing["metadata"]["resourceVersion"])

    def _event(self, event: dict[str, Any]) -> None:
        obj = event.get("object", {})
        if event.get("type") == "ERROR":
            self._gap(str(obj.get("message", "watch error")))
            return
        self._version = str(obj.get("metadata", {}).get("resourceVersion", self._version))
        if event.get("type") in ("ADDED", "MODIFIED"):
            self._note(obj)

    def _note(self, pod: dict[str, Any]) -> None:
        status, name = pod.get("status", {}), str(pod["metadata"]["name"])
        conditions: list[dict[str, Any]] = status.get("conditions", []) or []
        condition = next((c for c in conditions if c.get("type") == "Ready"), {})
        containers = status.get("containerStatuses") or [{}]
        now = Seen(name, condition.get("status") == "True",
                   "running" in (containers[0].get("state") or {}),
                   int(containers[0].get("restartCount", 0)))  # fmt: skip
        since = str(condition.get("lastTransitionTime", ""))
        before = self._last.get(name)
        self._last[name] = (now, since)
        if before is not None and before[0].ready == now.ready and "" != before[1] != since:
            # Out and back (or in and out) between two versions the watch delivered.
            kept = before[0].restarts == now.restarts
            self.seen.append(Seen(name, not now.ready, kept, before[0].restarts))
            self.seen.append(now)
        elif before is None or before[0].ready != now.ready:
            self.seen.append(now)
        self._versions[name] = int(pod["metadata"]["resourceVersion"])

    def caught_up(self, timeout: float = 30.0) -> list[Seen]:
        """Every change so far, once the watch has delivered each pod as a LIST now shows it."""
        listed = {
            str(pod["metadata"]["name"]): int(pod["metadata"]["resourceVersion"])
            for pod in self.rest.get(self.path)["items"]
        }
        deadline = time.monotonic() + timeout
        while any(self._versions.get(name, 0) < version for name, version in listed.items()):
            assert time.monotonic() < deadline, f"the watch is behind the LIST: {listed}"
            time.sleep(0.1)
        return list(self.seen)

    def transitions(self) -> dict[str, list[str]]:
        """Each pod's Ready changes in order: ``True``/``False``, with the restart count."""
        changes: dict[str, list[str]] = {}
        for seen in list(self.seen):
            changes.setdefault(seen.pod, []).append(f"{seen.ready}#{seen.restarts}")
        return changes

    def drops(self) -> list[Seen]:
        """Every change to not Ready of a running container that had been Ready since its
        (re)start (a readiness probe that failed, not a restart), the watch caught up first."""
        ready_runs = set()
        dropped = []
        for seen in self.caught_up():
            if seen.ready:
                ready_runs.add((seen.pod, seen.restarts))
            elif seen.running and (seen.pod, seen.restarts) in ready_runs:
                dropped.append(seen)
        return dropped


WATCH_WAIT = httpx2.Timeout(30.0, connect=5.0)
"""Beyond the watch's own 5 s: the apiserver ends it, the recorder resumes it."""


@pytest.fixture(scope="module")
def ready_watch(testbed: Testbed) -> Iterator[ReadyWatch]:
    """The Ready changes of the pods of the module's namespace, recorded from before they exist."""
    require_real_sglang_pods()
    namespace = testbed.create_namespace("real")
    watch = ReadyWatch(testbed.rest, namespace)
    watch.start()
    yield watch
    watch.stop()
    print(f"\n--- Ready changes of the real pods ---\n{watch.transitions()} (gaps: {watch.gaps})")


@pytest.fixture(scope="module")
def real_pods(
    testbed: Testbed, ready_watch: ReadyWatch
) -> Iterator[tuple[str, InferenceServiceHandle]]:
    """Two Ready real-SGLang pods, shared by this module's tests (each takes ~4 GB), probed as
    the defaults probe every pod."""
    namespace = ready_watch.namespace
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=2, server="sglang", extra_args=REAL_LORA_FLAGS
    )
    handle.wait_ready(timeout=START_TIMEOUT)
    yield namespace, handle
    testbed.release_namespace(namespace)


def stayed_ready(watch: ReadyWatch, after: str) -> None:
    """No pod has left Ready since it first was, but by a restart."""
    assert not watch.drops(), (
        f"after {after}, pods dropped out of Ready: {watch.drops()}; "
        f"every change: {watch.transitions()}"
    )


def program_of(declared: dict[str, dict[str, Any]]) -> Callable[[], None]:
    def program() -> None:
        for name, args in declared.items():
            adapter = LoRAAdapter(name, LoRAAdapterArgs(**args))
            pulumi.export(f"{name}_loaded", adapter.loaded)

    return program


def serves(handle: InferenceServiceHandle, name: str, path: str) -> None:
    """Every pod is Ready, lists ``name`` at ``path`` and generates through it."""
    assert [p.name for p in handle.ready_pods()] == [p.name for p in handle.pods()]
    served = handle.served()
    assert served and all(a.get(name) == path for a in served.values()), served
    for pod in handle.ready_pods():
        assert generate(pod.url, name) != generate(pod.url), f"{name} changes nothing on {pod.name}"


def test_up_drift_heal_swap_and_destroy_on_real_pods(
    engine: LocalEngine,
    testbed: Testbed,
    real_pods: tuple[str, InferenceServiceHandle],
    ready_watch: ReadyWatch,
) -> None:
    namespace, handle = real_pods
    stayed_ready(ready_watch, "the pods' start")
    before = len(ready_watch.caught_up())
    v1, v2 = testbed.make_adapter("real-v1"), testbed.make_adapter("real-v2")
    declared = {"sql": {"adapter_name": "sql", "path": v1, "inference_service": "llama",
                        "namespace": namespace}}  # fmt: skip
    stack = engine.inline_stack("real-sglang", "e2e", program_of(declared))
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))

    assert stack.up().outputs["sql_loaded"].value is True
    serves(handle, "sql", v1)
    assert drift_report(stack) is None
    stayed_ready(ready_watch, "up and refresh")

    # Unloaded out of band on one real pod: the refresh names it, the next up re-loads it.
    victim = handle.ready_pods()[1]
    answer = httpx2.post(f"{victim.url}/unload_lora_adapter", json={"lora_name": "sql"})
    assert answer.status_code == 200, answer.text
    report = drift_report(stack)
    assert report is not None and "sql" in report
    stack.up()
    serves(handle, "sql", v1)
    stayed_ready(ready_watch, "the out-of-band unload and its heal")

    # A real server restarted (it keeps nothing): drift, then healed by up.
    restarted = handle.ready_pods()[0].name
    testbed.restart_pod(namespace, restarted)
    handle.wait_ready(timeout=START_TIMEOUT)
    assert drift_report(stack) is not None
    stack.up()
    serves(handle, "sql", v1)
    stayed_ready(ready_watch, "the restart and its heal")

    # A new path: every pod swaps to it.
    declared["sql"]["path"] = v2
    stack.up()
    serves(handle, "sql", v2)
    stayed_ready(ready_watch, "the swap")

    stack.destroy()
    assert get_adapter(testbed.client(), namespace, "sql") is None
    assert all("sql" not in adapters for adapters in handle.served().values())
    stayed_ready(ready_watch, "destroy")
    # All the while, the one change of Ready was the restart's: out (stopped), and back.
    during = ready_watch.caught_up()[before:]
    print(f"\n--- Ready changes through up, refresh, heal, swap and destroy ---\n{during}")
    assert [(s.pod, s.ready) for s in during] == [(restarted, False), (restarted, True)], (
        ready_watch.transitions()
    )


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
