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

Behind pulumi-lora's readiness gate (issue 54), on two real pods in network namespaces of their
own, requests for a declared adapter sent as kube-proxy sends them (to the ready endpoints of the
Service's EndpointSlices) never meet a pod without it: through a restart (the pod turns Ready
only once the re-sync loop has loaded it again), a revision swap (pod by pod, each out of
rotation first) and a bad revision (a rank above ``--max-lora-rank``: rolled back, in SGLang's
words).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx2
import pulumi
import pytest
from _real_pods_kit import (
    PodVersion,
    ReadyWatch,
    apply_gate_policy,
    gate_of,
    remove_gate_policy,
)
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._errors import SwapRolledBack
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.fixtures import missing_real_part, require_real_sglang_pods
from pulumi_lora.testing.loop import LoopProcess, wait_until
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.sglang import generate
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed, netns_unavailable_reason
from pulumi_lora.testing.traffic import Traffic, sampled
from tests.e2e.conftest import adapter_props, drift_report, provider_for

REAL_LORA_FLAGS = ("--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all")
"""The InferenceService's ``extraArgs``, as a platform team writes them for runtime LoRA."""
START_TIMEOUT = 240.0
"""Two real servers starting side by side on two cores (about 30 s each alone)."""


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


# --- behind the readiness gate, under traffic ---------------------------------------------------

SERVICE_PORT = 30000
"""The Service's port and targetPort: the container's, so the slices' endpoints are routable."""
RATE = 5.0
"""Requests a second: enough to meet every window, little enough for two cores serving them
while a real server restarts beside them."""


@dataclass(frozen=True)
class Gated:
    namespace: str
    handle: InferenceServiceHandle
    loop: LoopProcess
    watch: ReadyWatch


@pytest.fixture
def gated_real_pods(testbed: Testbed, tmp_path: Path) -> Iterator[Gated]:
    """Two Ready real-SGLang pods on the ``netns`` network (their IPs in the Service's
    EndpointSlices), gated by the policy ``pulumi-lora readiness-gate`` prints, with the re-sync
    loop writing their gate; every version of the pods recorded from before they exist."""
    require_real_sglang_pods()
    reason = netns_unavailable_reason()
    if reason is not None:
        missing_real_part(f"netns pods unavailable: {reason}")
    namespace = testbed.create_namespace("real-gate")
    policy = f"gate-{namespace}"
    watch = ReadyWatch(testbed.rest, namespace)
    loop: LoopProcess | None = None
    try:
        apply_gate_policy(testbed, namespace, policy)
        watch.start()
        handle = testbed.deploy_inference_service(
            namespace, "llama", replicas=2, server="sglang", extra_args=REAL_LORA_FLAGS,
            network="netns", endpoint_port=SERVICE_PORT,
        )  # fmt: skip
        loop = LoopProcess(  # started while the servers start: its gate lets them turn Ready
            ["--kubeconfig", str(testbed.kubeconfig_path), "--namespace", namespace,
             "--lease-namespace", namespace, "--lease-name", "real-gate-loop",
             "--verify-interval", "2", "--metrics-host", "127.0.0.1", "--metrics-port", "0"],
            tmp_path / "loop.log",
        )  # fmt: skip
        loop.wait_event("caches_synced", timeout=60)
        handle.wait_ready(timeout=START_TIMEOUT)
        yield Gated(namespace, handle, loop, watch)
    finally:
        if loop is not None:
            loop.stop()
        watch.stop()
        testbed.release_namespace(namespace)
        remove_gate_policy(testbed, policy)


def test_no_request_fails_on_gated_real_pods_through_restart_swap_and_bad_revision(
    testbed: Testbed, gated_real_pods: Gated
) -> None:
    """Issue 54 on the real server: requests for a declared adapter, sent to the ready endpoints
    of the Service's EndpointSlices, see no failure through (a) a restart (the loop reloads the
    adapter before the pod turns Ready), (b) a swap (pod by pod) and (c) a revision whose rank
    is above ``--max-lora-rank`` (rolled back: the old revision serves, the CR names it)."""
    namespace, handle, loop, watch = (
        gated_real_pods.namespace, gated_real_pods.handle, gated_real_pods.loop,
        gated_real_pods.watch,
    )  # fmt: skip
    names = sorted(p.name for p in handle.pods())
    for name in names:
        assert gate_of(testbed, namespace, name).gate == "True"  # nothing declared: at once
    v1, v2 = testbed.make_adapter("served-v1"), testbed.make_adapter("served-v2")
    write_adapter(testbed.adapter_root / "adapters" / "served-r64", base_model="llama-8b", rank=64)
    bad = "/adapters/served-r64"  # rank 64 > the pods' --max-lora-rank 16
    provider = provider_for(ProviderConfig(kube=KubeSource(str(testbed.kubeconfig_path))))
    props = adapter_props(namespace, v1, name="served")
    created = provider.create(props)
    wait_until(
        lambda: all(
            gate_of(testbed, namespace, n).gate_message.startswith("1 adapter loaded")
            for n in names
        ),
        30,
        what="the adapter required on every pod (its CR recorded the load)",
    )
    ips = {p.name: f"{p.ip}:{SERVICE_PORT}" for p in handle.pods()}

    def sent_to(pod: str, since: float) -> int:
        return sum(1 for o in traffic.report().outcomes if o.at >= since and o.endpoint == ips[pod])

    client = testbed.client()
    with Traffic(client, namespace, "llama", ["served"], rate=RATE, seed=54) as traffic:
        wait_until(lambda: len(traffic.endpoints) == 2, 30, what="both pods in the slices")
        steady = traffic.mark("steady")
        wait_until(lambda: all(sent_to(n, steady) >= 3 for n in names), 30, what="both serve")

        # (a) A restart: the server comes back empty; the loop loads the adapter on it, and
        # only then does the gate (and so Ready) turn True, on the new container.
        victim = names[0]
        restarts = handle.pod(victim).restart_count
        out: list[float] = []  # when the victim first left the endpoints Traffic sends to

        def note_out() -> None:
            if not out and ips[victim] not in traffic.endpoints:
                out.append(time.monotonic())

        gate_writes = {"name": "gate_written", "pod": f"{namespace}/{victim}", "status": False}
        unready_writes = len(loop.events(**gate_writes))
        restart = traffic.mark("restart")
        with sampled(note_out, every=0.02):
            testbed.restart_pod(namespace, victim)  # returns once the server stopped and rose
            took_stop = time.monotonic() - restart
            wait_until(lambda: out, 30, what=f"{victim} out of the slices")
        wait_until(lambda: len(loop.events(**gate_writes)) > unready_writes, 20, what="gate False")
        stopped = loop.events(**gate_writes)[unready_writes]
        assert stopped["reason"] == "ContainerStopped", stopped
        wait_until(lambda: handle.pod(victim).ready, START_TIMEOUT, what=f"{victim} Ready again")
        took_restart = time.monotonic() - restart
        wait_until(lambda: len(traffic.endpoints) == 2, 30, what=f"{victim} back in the slices")
        serves(handle, "served", v1)  # listed and generating, on the restarted pod too
        reloaded = loop.events("pod_synced", pod=f"{namespace}/{victim}", reason="restart")
        assert reloaded and reloaded[-1]["loads"] == 1, loop.tail()  # the loop put it back
        back = traffic.mark("back")
        wait_until(lambda: sent_to(victim, back) >= 3, 30, what=f"requests to {victim} again")

        # (b) A swap: pod by pod, each out of the slices first.
        swap = traffic.mark("swap")
        in_rotation: list[int] = []
        with sampled(lambda: in_rotation.append(len(traffic.endpoints))):
            updated = provider.update(created.id, created.outs, {**props, "path": v2}).outs
        took_swap = time.monotonic() - swap
        assert updated["loaded"] and updated["loaded_path"] == v2
        serves(handle, "served", v2)
        assert min(in_rotation) == 1, in_rotation  # one pod out at a time, never both
        wait_until(lambda: len(traffic.endpoints) == 2, 30, what="both pods back in the slices")

        # (c) A bad revision: SGLang refuses it on the first pod; v2 goes back, the CR keeps it.
        rollback = traffic.mark("bad revision")
        in_rotation.clear()
        with (
            sampled(lambda: in_rotation.append(len(traffic.endpoints))),
            pytest.raises(SwapRolledBack) as caught,
        ):
            provider.update(created.id, updated, {**props, "path": bad})
        took_rollback = time.monotonic() - rollback
        message = str(caught.value)
        print(f"\n--- the bad revision's error ---\n{message}")
        assert f"swapping served to {bad!r} failed (pod " in message
        assert "incompatible with the current LoRA memory pool" in message  # SGLang's words
        assert f"rolled back to {v2!r}: it serves again on " in message
        assert min(in_rotation) == 1, in_rotation
        serves(handle, "served", v2)
        stored = get_adapter(client, namespace, "served")
        assert stored is not None and stored["spec"]["path"] == v2, stored
        wait_until(lambda: len(traffic.endpoints) == 2, 30, what="both pods back in the slices")
        done = traffic.mark("done")
        wait_until(lambda: all(sent_to(n, done) >= 3 for n in names), 30, what="both serve")

    report = traffic.report()
    # A restart in place stops the server before its pod leaves the slices (SGLang closes its
    # socket at SIGTERM; the kubelet publishes the stop once the process exited), so requests
    # sent to it in between are refused, gate or not: the one kind of failure allowed, and
    # only then. None met a pod without the adapter.
    stopping = report.failed(restart, out[0])
    assert all(o.endpoint == ips[victim] and o.kind == "refused" for o in stopping), stopping
    bounds = {"steady": (steady, restart), "restart": (out[0], swap), "swap": (swap, rollback),
              "bad revision": (rollback, float("inf"))}  # fmt: skip
    counted = {window: report.counts(*within) for window, within in bounds.items()}
    shown = {window: dict(counts) for window, counts in counted.items()}
    print(f"\n--- requests for the adapter, by window ---\n{shown}")
    print(f"refused by the stopping server before its pod left the slices: {len(stopping)}")
    print(f"restart {took_restart:.1f}s (its stop {took_stop:.1f}s), swap {took_swap:.1f}s, "
          f"bad revision {took_rollback:.1f}s")  # fmt: skip
    for window, counts in counted.items():
        assert counts == {"ok": counts.total()}, (window, report.failed(*bounds[window]))

    # The restarted pod's new container: held out of Ready (its server up, its gate not True)
    # until the loop had loaded the adapter on it; it turned Ready with the gate True for that
    # container, and each later return to Ready (after the swap's hold) with the gate True too.
    watch.caught_up()
    new = [v for v in watch.versions if v.pod == victim and v.restarts == restarts + 1]
    first = next(i for i, v in enumerate(new) if v.ready)
    held = [v for v in new[:first] if v.containers_ready]
    assert held and all(v.ready_reason == "ReadinessGatesNotReady" for v in held), new[: first + 1]
    loaded = f"1 adapter loaded (container {new[first].container})"
    assert (new[first].gate, new[first].gate_message) == ("True", loaded), new[: first + 1]
    turned = [b for a, b in pairwise(new) if b.ready and not a.ready]
    assert all(v.gate == "True" for v in turned), turned
    # The swap and the rollback went pod by pod: never both gates False at once.
    assert not both_out(watch.versions, names), watch.transitions()
    provider.delete(created.id, updated)


def both_out(versions: list[PodVersion], names: list[str]) -> bool:
    """Whether, at some version, every pod of ``names`` had its gate False at once."""
    gates: dict[str, str] = {}
    for version in versions:
        gates[version.pod] = version.gate
        if all(gates.get(n) == "False" for n in names):
            return True
    return False
