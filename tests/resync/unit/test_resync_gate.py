"""The loop's readiness gate (issue 54): what it writes on a gated pod and when, and the
manifests and command that turn the gate on."""

from __future__ import annotations

import asyncio
from typing import Any

import pulumi
import pytest
import yaml
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._core import _ownership
from pulumi_lora._core._gate import GATE_CONDITION
from pulumi_lora._core._llmkube import pod_from_object
from pulumi_lora._kube._gate_policy import readiness_gate_policy
from pulumi_lora._resync._gate import GateKeeper
from pulumi_lora._resync._metrics import Metrics
from pulumi_lora._resync._views import adapter_from_object
from pulumi_lora._resync._world import World
from pulumi_lora.deploy import GATE_RULE, ResyncDeployment, resync_manifests
from tests._mocks import Recorder, recording


def pod_object(
    *, containers_ready: bool = True, container: str = "containerd://aaaaaaaaaaaa1111",
    gate: dict[str, Any] | None = None, version: str = "7",
) -> dict[str, Any]:  # fmt: skip
    conditions = [{"type": "ContainersReady", "status": "True" if containers_ready else "False"}]
    conditions += [gate] if gate else []
    return {
        "metadata": {
            "name": "llama-0",
            "namespace": "models",
            "uid": "uid-0",
            "resourceVersion": version,
            "labels": {"inference.llmkube.dev/service": "llama"},
        },
        "spec": {
            "containers": [{"name": "sglang"}],
            "readinessGates": [{"conditionType": GATE_CONDITION}],
        },
        "status": {
            "podIP": "10.0.0.1",
            "conditions": conditions,
            "containerStatuses": [{"name": "sglang", "containerID": container}],
        },
    }


def cr_object(name: str, loaded: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "models", "uid": f"uid-{name}", "generation": 1},
        "spec": {"name": name, "path": f"/a/{name}", "inferenceServiceRef": {"name": "llama"}},
        "status": {"loadedPath": f"/a/{name}"} if loaded else {},
    }


class FakeKube:
    def __init__(self, answers: list[bool] | None = None) -> None:
        self.patches: list[dict[str, Any]] = []
        self.answers = answers or []

    async def patch_pod_status(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        self.patches.append(body)
        return self.answers.pop(0) if self.answers else True


@pytest.fixture(autouse=True)
def no_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ownership, "REQUIRE_CONTROLLER_CHAIN", False)


def keeper(kube: FakeKube, *crs: dict[str, Any]) -> tuple[GateKeeper, World]:
    world = World()
    for obj in crs:
        cr = adapter_from_object(obj)
        assert cr is not None
        world.put_cr(cr)
    return GateKeeper(world, kube, Metrics()), world  # type: ignore[arg-type]


def written(kube: FakeKube) -> list[tuple[str, str, str]]:
    found = []
    for body in kube.patches:
        (condition,) = body["status"]["conditions"]
        found.append((condition["status"], condition["reason"], condition["message"]))
    return found


def test_a_stopped_container_is_marked_false_at_once_and_true_after_its_run() -> None:
    async def scenario() -> FakeKube:
        kube = FakeKube()
        gate, world = keeper(kube, cr_object("a", True), cr_object("new", False))
        true = {"type": GATE_CONDITION, "status": "True", "reason": "AdaptersLoaded",
                "message": "1 adapter loaded (container aaaaaaaaaaaa)"}  # fmt: skip
        world.put_pod(pod_from_object(pod_object(containers_ready=False, gate=true)), 0.0)
        gate.decide(("models", "llama-0"))  # the pod event: before any run
        await asyncio.sleep(0)
        false = {"type": GATE_CONDITION, "status": "False", "reason": "ContainerStopped",
                 "message": "the sglang container is not ready"}  # fmt: skip
        restarted = pod_object(container="containerd://bbbbbbbbbbbb2222", version="9", gate=false)
        world.put_pod(pod_from_object(restarted), 0.0)
        gate.ran(world.pods[("models", "llama-0")], {"a": "/a/a"})  # "new" is not required
        await asyncio.sleep(0)
        return kube

    kube = asyncio.run(scenario())
    assert written(kube) == [
        ("False", "ContainerStopped", "the sglang container is not ready"),
        ("True", "AdaptersLoaded", "1 adapter loaded (container bbbbbbbbbbbb)"),
    ]
    assert kube.patches[1]["metadata"] == {"resourceVersion": "9"}  # the True's precondition
    assert "metadata" not in kube.patches[0]


def test_a_refused_true_is_decided_again_on_the_next_event() -> None:
    async def scenario() -> FakeKube:
        kube = FakeKube(answers=[False])  # 409: the pod moved on
        gate, world = keeper(kube, cr_object("a", True))
        world.put_pod(pod_from_object(pod_object()), 0.0)
        gate.ran(world.pods[("models", "llama-0")], {"a": "/a/a"})
        await asyncio.sleep(0)
        world.put_pod(pod_from_object(pod_object(version="8")), 0.0)
        gate.decide(("models", "llama-0"))
        await asyncio.sleep(0)
        return kube

    kube = asyncio.run(scenario())
    assert [p["metadata"]["resourceVersion"] for p in kube.patches] == ["7", "8"]


def test_a_missing_adapter_names_itself_and_a_serving_pod_stays_true() -> None:
    async def scenario() -> FakeKube:
        kube = FakeKube()
        gate, world = keeper(kube, cr_object("a", True), cr_object("b", True))
        world.put_pod(pod_from_object(pod_object()), 0.0)
        gate.ran(world.pods[("models", "llama-0")], {"a": "/a/a"})
        await asyncio.sleep(0)
        true = {"type": GATE_CONDITION, "status": "True", "reason": "AdaptersLoaded",
                "message": "2 adapters loaded (container aaaaaaaaaaaa)"}  # fmt: skip
        world.put_pod(pod_from_object(pod_object(gate=true)), 0.0)
        gate.ran(world.pods[("models", "llama-0")], {"a": "/a/a"})  # b unloaded out of band
        await asyncio.sleep(0)
        return kube

    kube = asyncio.run(scenario())
    assert written(kube) == [("False", "AdaptersLoading", "waiting for 1 of 2 adapters: b (/a/b)")]


def test_the_gate_grants_pods_status_patch_and_adds_the_policy_after_the_loop() -> None:
    plain = resync_manifests("ops", "img", watch_namespace="models")
    assert not [m for m in plain if m["kind"].startswith("MutatingAdmission")]
    assert all(GATE_RULE not in m.get("rules", []) for m in plain)

    gated = resync_manifests("ops", "img", watch_namespace="models", readiness_gate=True)
    kinds = [m["kind"] for m in gated]
    assert kinds.index("Deployment") < kinds.index("MutatingAdmissionPolicy")
    (role,) = [
        m for m in gated if m["kind"] == "Role" and m["metadata"]["name"] == "pulumi-lora-resync"
    ]
    assert GATE_RULE in role["rules"]
    policy = [m for m in gated if m["kind"].startswith("MutatingAdmission")]
    assert policy == readiness_gate_policy("pulumi-lora-resync", ["models"])

    everywhere = resync_manifests("ops", "img", readiness_gate=True)
    (cluster_role,) = [m for m in everywhere if m["kind"] == "ClusterRole"]
    assert GATE_RULE in cluster_role["rules"]
    (binding,) = [m for m in everywhere if m["kind"] == "MutatingAdmissionPolicyBinding"]
    assert "matchResources" not in binding["spec"]


def test_the_command_prints_the_policy_for_the_namespaces_named() -> None:
    done = CliRunner().invoke(cli, ["readiness-gate", "-n", "models", "-n", "chat"])
    assert done.exit_code == 0, done.output
    printed = list(yaml.safe_load_all(done.output))
    assert printed == readiness_gate_policy("pulumi-lora-resync-readiness-gate", ["models", "chat"])


def drains(manifests: list[dict[str, Any]]) -> list[str]:
    """The policy's mutations that add a preStop sleep (their CEL)."""
    (policy,) = [m for m in manifests if m["kind"] == "MutatingAdmissionPolicy"]
    expressions = [m["jsonPatch"]["expression"] for m in policy["spec"]["mutations"]]
    return [e for e in expressions if "preStop" in e]


def test_the_drain_on_stop_is_five_seconds_unless_given_and_none_at_zero() -> None:
    (default,) = drains(resync_manifests("ops", "img", readiness_gate=True))
    assert "{'sleep': {'seconds': 5}}" in default
    (slow,) = drains(resync_manifests("ops", "img", readiness_gate=True, drain_on_stop_seconds=15))
    assert "{'sleep': {'seconds': 15}}" in slow and "seconds': 5}" not in slow
    assert (
        drains(resync_manifests("ops", "img", readiness_gate=True, drain_on_stop_seconds=0)) == []
    )


@pytest.mark.parametrize("seconds", [-1, 301, 2.5, True, "5"])
def test_a_drain_on_stop_out_of_range_is_refused_with_what_is_accepted(seconds: Any) -> None:
    with pytest.raises(ValueError) as refused:
        resync_manifests("ops", "img", readiness_gate=True, drain_on_stop_seconds=seconds)
    assert str(refused.value).startswith(
        "drain_on_stop_seconds must be a whole number of seconds from 0 (no preStop sleep) to "
        f"300, got {seconds!r}"
    )


def test_a_drain_on_stop_without_the_gate_is_refused() -> None:
    with pytest.raises(ValueError, match="it needs readiness_gate=True"):
        resync_manifests("ops", "img", drain_on_stop_seconds=15)


def test_the_command_takes_the_drain_on_stop_and_refuses_what_the_policy_would() -> None:
    done = CliRunner().invoke(cli, ["readiness-gate", "--drain-on-stop", "0"])
    assert done.exit_code == 0, done.output
    printed = list(yaml.safe_load_all(done.output))
    assert printed == readiness_gate_policy(
        "pulumi-lora-resync-readiness-gate", [], drain_on_stop_seconds=0
    )
    refused = CliRunner().invoke(cli, ["readiness-gate", "--drain-on-stop", "301"])
    assert refused.exit_code == 2
    assert "Invalid value for '--drain-on-stop': 301 is not in the range 0<=x<=300." in (
        refused.output
    )


@pytest.fixture
def recorder() -> Recorder:
    return recording()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pulumi.runtime.test
def test_the_component_creates_the_policy_at_v1_after_the_loop(recorder: Recorder) -> Any:
    loop = ResyncDeployment(
        "resync", namespace="ops", image="img:1", watch_namespace="models", readiness_gate=True
    )
    kinds = [m["kind"] for m in loop.manifests]
    assert kinds.index("Deployment") < kinds.index("MutatingAdmissionPolicy")

    def check(urns: list[str]) -> None:
        assert len(set(urns)) == len(urns) == len(loop.manifests)
        made = {
            r.inputs["kind"]: r
            for r in recorder.resources
            if r.typ.startswith("kubernetes:admissionregistration.k8s.io/v1:Mutating")
        }
        assert set(made) == {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
        policy = readiness_gate_policy("pulumi-lora-resync", ["models"])
        assert made["MutatingAdmissionPolicy"].inputs["spec"] == policy[0]["spec"]

    return pulumi.Output.all(*(child.urn for child in loop.children)).apply(check)
