"""Readiness gates on the testbed, as Kubernetes has them (issue 54, items 1 and 7).

The admission policy (``_kube._gate_policy``), applied with kubectl to the real kube-apiserver,
adds the gate to new SGLang pods of an InferenceService and to nothing else; the played kubelet
computes Ready from ``ContainersReady`` and every gate's condition with the kubelet's words
(``GeneratePodReadyCondition``), and keeps the gate's condition, written by another user through
``pods/status``, across its own status writes and a container restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml

from pulumi_lora._kube._gate_policy import GATE_CONDITION, readiness_gate_policy
from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

NOT_THERE = f'corresponding condition of pod readiness gate "{GATE_CONDITION}" does not exist.'


def pod(testbed: Testbed, namespace: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = testbed.rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return got


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in obj["status"].get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def set_gate(testbed: Testbed, namespace: str, name: str, status: str) -> None:
    """Write the gate's condition as the loop does: a strategic merge patch of pods/status."""
    body = {"status": {"conditions": [{"type": GATE_CONDITION, "status": status}]}}
    done = testbed.kubectl(
        "patch", "pod", name, "-n", namespace, "--subresource=status",
        "--type=strategic", "-p", json.dumps(body),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def sglang_pod(
    name: str,
    namespace: str,
    gates: list[dict[str, str]],
    containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A bare pod labelled as an SGLang InferenceService's, on a node nobody plays (never run)."""
    labels = {
        "inference.llmkube.dev/service": "hand-made",
        "inference.llmkube.dev/runtime": "sglang",
    }
    spec: dict[str, Any] = {
        "containers": containers or [{"name": "sglang", "image": "none"}],
        "nodeName": "x",
    }
    if gates:
        spec["readinessGates"] = gates
    meta = {"name": name, "namespace": namespace, "labels": labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def admitted(testbed: Testbed, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod``'s spec once admitted (a server-side dry run: admission runs, nothing is stored;
    a stored pod on a node nobody plays would never finish terminating)."""
    done = testbed.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod)
    )
    assert done.returncode == 0, done.stderr
    spec: dict[str, Any] = json.loads(done.stdout)["spec"]
    return spec


def admitted_gates(
    testbed: Testbed, namespace: str, gates: list[dict[str, str]]
) -> list[dict[str, str]]:
    """The readiness gates a new SGLang pod made with ``gates`` has once admitted."""
    found: list[dict[str, str]] = (
        admitted(testbed, sglang_pod("probe", namespace, gates)).get("readinessGates") or []
    )
    return found


def gates_on_admission(testbed: Testbed, namespace: str) -> bool:
    """Whether a new SGLang pod in ``namespace`` gets the gate."""
    return bool(admitted_gates(testbed, namespace, []))


@contextmanager
def policy_in_force(testbed: Testbed, namespace: str, **options: Any) -> Iterator[str]:
    """The policy (``readiness_gate_policy``'s ``options``), bound to ``namespace`` only (the
    testbed is shared), until the block ends."""
    name = f"gate-{namespace}"[:63]
    manifests = yaml.safe_dump_all(readiness_gate_policy(name, [namespace], **options))
    done = testbed.kubectl("apply", "-f", "-", input=manifests)
    assert done.returncode == 0, done.stderr
    try:
        # The apiserver takes a policy up through its informers, a moment after the apply:
        # probe with a server-side dry run (admission runs, nothing is stored) until it gates.
        wait_until(lambda: gates_on_admission(testbed, namespace), 30, what="the policy in force")
        yield namespace
    finally:
        testbed.kubectl("delete", "-f", "-", input=manifests)


@pytest.fixture
def gated(testbed: Testbed, namespace: str) -> Iterator[str]:
    """The policy as it comes (every option at its default), bound to ``namespace``."""
    with policy_in_force(testbed, namespace) as bound:
        yield bound


def test_the_policy_gates_sglang_pods_and_the_kubelet_computes_ready_from_the_gate(
    testbed: Testbed, gated: str
) -> None:
    handle: InferenceServiceHandle = testbed.deploy_inference_service(gated, "llama", replicas=1)
    other = testbed.deploy_inference_service(gated, "cpp", replicas=1, runtime="llamacpp")
    wait_until(lambda: any(p.containers_ready for p in handle.pods()), 30, what="containers ready")
    (info,) = handle.pods()
    obj = pod(testbed, gated, info.name)
    assert obj["spec"]["readinessGates"] == [{"conditionType": GATE_CONDITION}]
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "ReadinessGatesNotReady",
        NOT_THERE,
    )
    assert condition(obj, "ContainersReady")["status"] == "True"
    assert not info.ready and handle.ready_pods() == []
    other.wait_ready(30)  # a llamacpp pod is left alone: no gate, Ready as its probe says
    (cpp,) = other.pods()
    assert "readinessGates" not in pod(testbed, gated, cpp.name)["spec"]

    set_gate(testbed, gated, info.name, "True")
    wait_until(lambda: handle.pod(info.name).ready, 10, what="Ready once the gate is True")
    obj = pod(testbed, gated, info.name)
    assert condition(obj, "Ready")["status"] == "True"
    assert "reason" not in condition(obj, "Ready")
    assert condition(obj, GATE_CONDITION)["status"] == "True"

    set_gate(testbed, gated, info.name, "False")
    wait_until(lambda: not handle.pod(info.name).ready, 10, what="not Ready once the gate is False")
    assert condition(pod(testbed, gated, info.name), "Ready")["message"] == (
        f'the status of pod readiness gate "{GATE_CONDITION}" is not "True", but False'
    )

    # The kubelet's own writes (a restart: not ready, then ready again) keep the gate's
    # condition, and Ready follows it: True only with the gate True again.
    set_gate(testbed, gated, info.name, "True")
    wait_until(lambda: handle.pod(info.name).ready, 10, what="Ready again")
    testbed.restart_pod(gated, info.name)
    wait_until(lambda: not handle.pod(info.name).containers_ready, 10, what="the restart seen")
    obj = pod(testbed, gated, info.name)
    assert condition(obj, "Ready")["reason"] == "ContainersNotReady"
    assert condition(obj, GATE_CONDITION)["status"] == "True"  # kept: not the kubelet's
    wait_until(lambda: handle.pod(info.name).ready, 30, what="Ready after the restart")


def test_pods_outside_the_bound_namespaces_are_not_gated(
    testbed: Testbed, gated: str, namespace: str
) -> None:
    elsewhere = testbed.create_namespace("ungated")
    handle = testbed.deploy_inference_service(elsewhere, "llama", replicas=1)
    handle.wait_ready(30)
    (info,) = handle.pods()
    assert "readinessGates" not in pod(testbed, elsewhere, info.name)["spec"]
    assert gated == namespace


def test_the_gate_is_appended_to_gates_a_pod_already_has(testbed: Testbed, gated: str) -> None:
    """A pod made with a gate of its own keeps it and gets ours once (no duplicate, even for a
    pod that already has ours). Server-side dry runs, as everything below."""
    assert admitted_gates(testbed, gated, [{"conditionType": "example.com/x"}]) == [
        {"conditionType": "example.com/x"},
        {"conditionType": GATE_CONDITION},
    ]
    assert admitted_gates(testbed, gated, [{"conditionType": GATE_CONDITION}]) == [
        {"conditionType": GATE_CONDITION}
    ]


def test_the_sglang_container_drains_on_stop_as_long_as_asked_and_keeps_its_own_pre_stop(
    testbed: Testbed, namespace: str
) -> None:
    """``drain_on_stop_seconds=15`` (``pulumi-lora readiness-gate --drain-on-stop 15``): the
    ``sglang`` container gets a 15 s ``preStop`` sleep beside the hooks it has, wherever it
    sits among the containers; a ``preStop`` of its own is kept as it is, and other containers
    are left alone. At the default (5 s) the CLI test checks the same through a stack."""
    drain = {"preStop": {"sleep": {"seconds": 15}}}
    own = {"preStop": {"exec": {"command": ["sleep", "30"]}}}
    start = {"postStart": {"exec": {"command": ["true"]}}}

    def lifecycles(namespace: str, *containers: dict[str, Any]) -> list[Any]:
        pod = sglang_pod("probe", namespace, [], [{"image": "none", **c} for c in containers])
        return [c.get("lifecycle") for c in admitted(testbed, pod)["containers"]]

    with policy_in_force(
        testbed, testbed.create_namespace("drain"), drain_on_stop_seconds=15
    ) as ns:
        assert lifecycles(ns, {"name": "sglang"}) == [drain]
        assert lifecycles(ns, {"name": "sglang", "lifecycle": start}) == [{**start, **drain}]
        assert lifecycles(ns, {"name": "sglang", "lifecycle": own}) == [own]
        assert lifecycles(ns, {"name": "proxy"}, {"name": "sglang"}) == [None, drain]
