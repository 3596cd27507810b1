"""Served, not only loaded (issue 54), through the real CLI: a platform stack behind the readiness
gate (``tests/cli/served_stack``: ``ResyncDeployment(readiness_gate=True)`` running the loop's
image, an InferenceService, three adapters), and requests for the declared adapters sent as
kube-proxy sends them (``pulumi_lora.testing.traffic``: to the ready endpoints of the Service's
EndpointSlices, which the real kube-controller-manager keeps). Through a pod restart, a pod
deleted and replaced, a scale-up, a rolling restart from a flag change, a revision swap and a bad
revision, no request fails (a crashed container's refusals aside: below); the
bad revision's ``pulumi up`` fails naming the pod and SGLang's words, and the old revision still
serves on every pod, the CR naming it. ``destroy`` removes the policy and its binding.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pulumi_lora._core._gate import GATE_CONDITION
from pulumi_lora._kube._gate_policy import DRAIN_ON_STOP_SECONDS
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import (
    Testbed,
    container_runtime_unavailable_reason,
    image_present,
    loop_image,
    netns_unavailable_reason,
)
from pulumi_lora.testing.traffic import Traffic, TrafficReport, sampled

from .conftest import Project, require_program, served

STACK = Path(__file__).parent / "served_stack"
ADAPTERS = ("sql-lora", "chat-lora", "code-lora")
POLICY = "served-resync"  # the ResyncDeployment's name: the policy's and the binding's


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.2)


def kubectl_json(testbed: Testbed, *args: str) -> Any:
    done = testbed.kubectl(*args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def quiet(report: TrafficReport, start: float, end: float, what: str, crashed: str = "") -> None:
    """No request in [start, end) failed, and some were sent; with ``crashed`` (a pod's IP), a
    connection refused by that pod's stopped container is no failure of ours: kube-proxy sends
    requests to it until the EndpointSlice controller sees the container stop (no gate can
    prevent that), but none may meet a pod without the adapter."""
    counts = report.counts(start, end)
    print(f"served: {what}: {dict(counts)}")
    assert counts.total() >= 20, (what, dict(counts))
    failed = [
        o
        for o in report.failed(start, end)
        if not (crashed and o.kind == "refused" and o.endpoint.startswith(f"{crashed}:"))
    ]
    assert not failed, (what, failed)


@pytest.mark.timeout(900)
def test_no_request_fails_through_restarts_scale_rollouts_swaps_and_bad_revisions(
    project: Project, testbed: Testbed
) -> None:
    require_program("pulumi-resource-kubernetes")
    for reason in (netns_unavailable_reason(), container_runtime_unavailable_reason()):
        if reason is not None:
            missing_real_part(f"pods in network namespaces, the loop as a container: {reason}")
    if not image_present(loop_image()):
        missing_real_part(f"the loop's image {loop_image()}: python3 tools/image.py --local-base")
    models, ops = testbed.create_namespace("served"), testbed.create_namespace("served-ops")
    paths = {name: testbed.make_adapter(name) for name in ADAPTERS}
    v2 = testbed.make_adapter("sql-lora-v2")
    bad = testbed.make_adapter("sql-lora-r512", rank=512)  # above --max-lora-rank 64

    runner = project(STACK)
    runner.pulumi("config", "set", "kubernetes:kubeconfig", str(testbed.kubeconfig_path))
    runner.pulumi("config", "set", "namespace", models)
    runner.pulumi("config", "set", "loopNamespace", ops)
    runner.pulumi("config", "set", "loopImage", loop_image())
    runner.pulumi("up", "--yes", "--skip-preview")

    service = testbed.inference_service(models, "llama")
    pods = service.pods()
    assert len(pods) == 3
    for pod in pods:  # the policy was in force before the first pod: every one is gated
        spec = kubectl_json(testbed, "get", "pod", pod.name, "-n", models)["spec"]
        assert {"conditionType": GATE_CONDITION} in spec["readinessGates"]
        (sglang,) = [c for c in spec["containers"] if c["name"] == "sglang"]
        assert sglang["lifecycle"]["preStop"] == {"sleep": {"seconds": DRAIN_ON_STOP_SECONDS}}
    wait_until(lambda: all(a == paths for a in served(service).values()), 60, "every adapter")

    def everywhere(expected: dict[str, str], replicas: int) -> bool:
        seen = served(service)
        return len(seen) == replicas and all(a == expected for a in seen.values())

    with Traffic(testbed.client(), models, "llama", list(ADAPTERS), rate=40, seed=54) as traffic:
        wait_until(lambda: len(traffic.endpoints) == 3, 60, "three pods in the slices")

        def settle(what: str, replicas: int) -> float:
            wait_until(lambda: len(traffic.endpoints) == replicas, 90, f"{what}: all in slices")
            settled = time.monotonic()
            wait_until(lambda: traffic.report().counts(settled).total() >= 20, 30, "20 more")
            return time.monotonic()

        # A pod restarts: it is out of rotation until its adapters are back.
        restart = traffic.mark("restart")
        crashed = str(pods[0].ip)
        testbed.restart_pod(models, pods[0].name)
        wait_until(lambda: everywhere(paths, 3), 60, "the restarted pod serves everything")
        deletion = settle("restart", 3)

        # A pod deleted, as `kubectl delete pod` does: it drains on stop (the policy's preStop)
        # while its replacement loads, and the replacement joins once it serves everything.
        deleted = pods[1].name
        gone = testbed.kubectl("delete", "pod", deleted, "-n", models, "--wait=false")
        assert gone.returncode == 0, gone.stderr
        wait_until(
            lambda: deleted not in {p.name for p in service.pods()} and everywhere(paths, 3),
            90,
            "the deleted pod gone, its replacement serving everything",
        )
        scale = settle("replacement", 3)

        # Scale 3 -> 4: the new pod joins once it serves every adapter.
        runner.pulumi("config", "set", "replicas", "4")
        runner.pulumi("up", "--yes", "--skip-preview")
        wait_until(lambda: everywhere(paths, 4), 90, "four pods serve everything")
        roll = settle("scale-up", 4)

        # A flag change rolls every pod through the Deployment: each new one joins served.
        before = {p.name for p in service.pods()}
        runner.pulumi("config", "set", "loraBatch", "6")  # --max-loras-per-batch=6
        runner.pulumi("up", "--yes", "--skip-preview")
        wait_until(
            lambda: not before & {p.name for p in service.pods()} and everywhere(paths, 4),
            180,
            "every pod replaced and serving everything",
        )
        for pod in service.pods():  # new pods, through the Deployment: the flag, the gate
            spec = kubectl_json(testbed, "get", "pod", pod.name, "-n", models)["spec"]
            (sglang,) = [c for c in spec["containers"] if c["name"] == "sglang"]
            assert "--max-loras-per-batch=6" in sglang["args"]
            assert {"conditionType": GATE_CONDITION} in spec["readinessGates"]
        swap = settle("rolling restart", 4)

        # A revision swap: pod by pod, each out of rotation first.
        runner.pulumi("config", "set", "sqlLoraPath", v2)
        in_rotation: list[int] = []
        with sampled(lambda: in_rotation.append(len(traffic.endpoints))):
            up = runner.pulumi("up", "--yes", "--skip-preview")
        assert "sql-lora: swapping to " in up.stdout + up.stderr  # progress, pod by pod
        assert min(in_rotation) == 3, in_rotation  # one pod out of rotation at a time
        swapped = {**paths, "sql-lora": v2}
        assert everywhere(swapped, 4)
        rollback = settle("swap", 4)

        # A bad revision: the up fails in SGLang's words; the old revision still serves.
        runner.pulumi("config", "set", "sqlLoraPath", bad)
        failed = runner.pulumi("up", "--yes", "--skip-preview", check=False)
        text = failed.stdout + failed.stderr
        assert failed.returncode != 0, text
        assert "could not swap adapter 'sql-lora'" in text, text
        assert "with rank 512 is incompatible" in text, text  # SGLang's words
        assert f"rolled back to {v2!r}" in text, text
        assert everywhere(swapped, 4)
        cr = kubectl_json(testbed, "get", "loraadapter", "sql-lora", "-n", models)
        assert cr["spec"]["path"] == v2
        done = settle("bad revision", 4)

    report = traffic.report()
    quiet(report, restart, deletion, "a pod restart", crashed=crashed)
    quiet(report, deletion, scale, "a pod deleted and replaced")
    quiet(report, scale, roll, "scale 3 -> 4")
    quiet(report, roll, swap, "a rolling restart (flag change)")
    quiet(report, swap, rollback, "a revision swap")
    quiet(report, rollback, done, "a bad revision")

    # The stack kept the good revision: with the program back on it, nothing changes.
    runner.pulumi("config", "set", "sqlLoraPath", v2)
    assert runner.outputs()["loadedPaths"]["sql-lora"] == v2
    runner.pulumi("preview", "--expect-no-changes")

    runner.pulumi("destroy", "--yes", "--skip-preview")
    for kind in ("mutatingadmissionpolicy", "mutatingadmissionpolicybinding"):
        gone = testbed.kubectl("get", kind, POLICY)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, kind
