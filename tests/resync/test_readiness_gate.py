"""The readiness gate end to end (issue 54): the admission policy gates the SGLang pods, the loop
writes ``pulumi-lora.dev/adapters-loaded``, the kubelet turns a pod Ready from it, and the real
kube-controller-manager puts only Ready pods in the Service's EndpointSlices, where the traffic
kit sends requests for the declared adapters as kube-proxy would.

The loop runs as the identity ``resync_manifests(readiness_gate=True, watch_namespace=NS)``
renders (its Role gains ``patch`` on ``pods/status``; the policy is bound to NS), applied with
kubectl, as a user would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _resync_harness import Cluster, everywhere, wait_until
from conftest import Identity, LoopFactory, make_identity

from pulumi_lora._core._gate import GATE_CONDITION
from pulumi_lora._kube._gate_probe import gated_at_admission
from pulumi_lora.testing.audit import audited
from pulumi_lora.testing.testbed import Testbed
from pulumi_lora.testing.traffic import Traffic

PORT = 30000  # the Service's port and targetPort: the container's port (slice traffic)


def pod_json(cluster: Cluster, name: str) -> dict[str, Any]:
    """The pod as ``kubectl get pod -o json`` shows it to users."""
    found: dict[str, Any] = json.loads(cluster.kubectl("get", "pod", name, "-o", "json"))
    return found


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in pod["status"].get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def container_id(pod: dict[str, Any]) -> str:
    (status,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "sglang"]
    return str(status["containerID"]).rpartition("://")[2][:12]


def gates_new_pods(testbed: Testbed, namespace: str) -> bool:
    """Whether a new SGLang pod in ``namespace`` gets the gate (the product's dry run)."""
    return gated_at_admission(testbed.client(), namespace)


@pytest.fixture
def gate_identity(testbed: Testbed, cluster: Cluster, tmp_path: Path) -> Iterator[Identity]:
    """The loop's manifests with ``readiness_gate=True`` for the test's namespace: its Role (with
    ``pods/status`` patch) and the policy bound to that namespace, in force."""
    name = f"gate-{cluster.namespace}"[:50].rstrip("-")
    identity = make_identity(
        testbed, tmp_path, name=name, watch_namespace=cluster.namespace, readiness_gate=True
    )
    wait_until(lambda: gates_new_pods(testbed, cluster.namespace), 30, what="the policy in force")
    yield identity
    for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
        testbed.kubectl("delete", kind, name, "--ignore-not-found")


def test_the_gate_keeps_requests_off_pods_whose_adapters_are_not_back(
    cluster: Cluster, loops: LoopFactory, gate_identity: Identity
) -> None:
    loop = loops(cluster.namespace, identity=gate_identity)
    # Gated pods turn Ready only once the loop says so: with nothing declared yet, at once.
    handle = cluster.deploy(replicas=2, network="netns", endpoint_port=PORT)
    names = sorted(p.name for p in handle.pods())
    for name in names:
        pod = pod_json(cluster, name)
        assert pod["spec"]["readinessGates"] == [{"conditionType": GATE_CONDITION}]
        assert condition(pod, GATE_CONDITION)["message"].startswith("0 adapters loaded")

    want = {n: cluster.tb.make_adapter(n) for n in ("gate-a", "gate-b")}
    for name, path in want.items():
        cluster.apply_cr(name, path)
    wait_until(lambda: everywhere(handle, want), 30, what="both adapters on both pods")

    def says(name: str, message: str) -> bool:
        gate = condition(pod_json(cluster, name), GATE_CONDITION)
        return gate.get("status") == "True" and gate.get("message") == message

    for name in names:  # both CRs recorded their loads (loadedPath): both now required
        pod = pod_json(cluster, name)
        expected = f"2 adapters loaded (container {container_id(pod)})"
        wait_until(lambda n=name, m=expected: says(n, m), 20, what=f"{name}: {expected}")
        assert condition(pod_json(cluster, name), GATE_CONDITION)["reason"] == "AdaptersLoaded"

    client = cluster.tb.client()
    with Traffic(client, cluster.namespace, "llama", sorted(want), rate=40, seed=54) as traffic:
        wait_until(lambda: len(traffic.endpoints) == 2, 30, what="both pods in the slices")
        wait_until(lambda: len(traffic.report().outcomes) >= 40, 30, what="40 requests")

        # (a) A restart: the container's adapters are gone; it turns Ready only once both are
        # back, so no request for them meets it before.
        victim = names[0]
        restart = traffic.mark("restart")
        cluster.tb.restart_pod(cluster.namespace, victim)
        stopped = loop.wait_event("gate_written", pod=f"{cluster.namespace}/{victim}", status=False)
        assert stopped["reason"] == "ContainerStopped"
        back = f"2 adapters loaded (container {container_id(pod_json(cluster, victim))})"
        wait_until(lambda: says(victim, back), 30, what=f"{victim}: {back}")
        wait_until(lambda: handle.pod(victim).ready, 10, what="the restarted pod Ready")
        assert handle.served()[victim] == want
        wait_until(lambda: len(traffic.endpoints) == 2, 30, what="the pod back in the slices")
        settled = traffic.mark("restarted")
        wait_until(
            lambda: traffic.report().counts(settled).total() >= 40, 30, what="40 more requests"
        )

        # (b) A scale-up: the new pod takes requests only once it serves both adapters.
        scale = traffic.mark("scale to 3")
        cluster.tb.scale(cluster.namespace, "llama", 3)
        handle.wait_ready(60)
        wait_until(lambda: len(traffic.endpoints) == 3, 30, what="three pods in the slices")
        scaled = traffic.mark("scaled")
        wait_until(
            lambda: traffic.report().counts(scaled).total() >= 40, 30, what="40 more requests"
        )
        (added,) = sorted({p.name for p in handle.pods()} - set(names))
        assert handle.served()[added] == want

        # (c) A newly declared adapter takes no serving pod out of rotation.
        third = traffic.mark("a third adapter")
        before = {p.name: condition(pod_json(cluster, p.name), "Ready") for p in handle.pods()}
        unready_writes = len(loop.events("gate_written", status=False))
        want["gate-c"] = cluster.tb.make_adapter("gate-c")
        cluster.apply_cr("gate-c", want["gate-c"])
        wait_until(lambda: everywhere(handle, want, 3), 30, what="the third adapter everywhere")
        for info in handle.pods():
            expected = f"3 adapters loaded (container {container_id(pod_json(cluster, info.name))})"
            wait_until(lambda n=info.name, m=expected: says(n, m), 20, what=expected)
        done = traffic.mark("done")
        wait_until(lambda: traffic.report().counts(done).total() >= 20, 30, what="20 more")

    report = traffic.report()
    restarted = report.counts(restart, scale)
    scaled_up = report.counts(scale, third)
    declared = report.counts(third, float("inf"))
    print(f"restart: {dict(restarted)}; scale-up: {dict(scaled_up)}; third: {dict(declared)}")
    # No request for a declared adapter met a pod that did not serve it.
    assert restarted["not_loaded"] == 0, report.failed(restart, scale)
    assert scaled_up == {"ok": scaled_up.total()}, report.failed(scale, third)
    assert declared == {"ok": declared.total()}, report.failed(third)
    # The restarted pod was taken out until its adapters were back: its requests in the restart
    # window are those sent before the container stopped, or after both adapters were back.
    assert restarted["ok"] > 0
    # The newly declared adapter turned no pod unready: Ready never moved.
    after = {p.name: condition(pod_json(cluster, p.name), "Ready") for p in handle.pods()}
    assert after == before
    assert len(loop.events("gate_written", status=False)) == unready_writes

    # The gate's writes are the grant's use, and none was refused (the rendered Role is enough).
    if cluster.tb.audit_log_path is not None:
        used, denied = audited(cluster.tb.audit_log_path, gate_identity.user)
        assert ("", "pods/status", "patch") in used
        assert not denied, [(e["verb"], e["requestURI"]) for e in denied]
