"""Whether the readiness gate can work here (issue 54, item 1): doctor's checks of the cluster's
``MutatingAdmissionPolicy`` API and of pods the gate holds unready, API discovery, and
``ResyncDeployment(readiness_gate=True)`` refusing a cluster without the API before it applies
anything. The words asserted are those a user reads."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx2
import pulumi
import pytest
import yaml
from click.testing import CliRunner
from lightkube import Client, KubeConfig

from pulumi_lora import deploy
from pulumi_lora._commands._operator import gate_command
from pulumi_lora._core._llmkube import GATE_CONDITION, PodEndpoint, pod_from_object
from pulumi_lora._errors import ClusterError
from pulumi_lora._kube._discovery import gate_refusal, policy_versions
from pulumi_lora._kube._gate_policy import readiness_gate_policy
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._models import Transport
from pulumi_lora._ops._doctor import (
    CheckStatus,
    DoctorFacts,
    check_gate_api,
    check_gate_held,
    diagnose,
)
from pulumi_lora._ops._permissions import asks
from tests._mocks import Recorder, recording

NOW = datetime(2026, 12, 2, 10, 47, 30, tzinfo=UTC)
WAITING = "waiting for 1 of 2 adapters: sql (/adapters/sql)"
HELD_FIX = (
    "find why what it names is not loaded (pulumi-lora status, the re-sync loop's log); "
    "runbook of alert PulumiLoRAPodHeldUnready: docs/operations.md#pulumilorapodheldunready"
)
BETA = (
    "MutatingAdmissionPolicy only in admissionregistration.k8s.io/v1beta1 (Kubernetes 1.34 and "
    "1.35, behind the MutatingAdmissionPolicy feature gate)"
)


def pod(
    name: str,
    *,
    gated: bool = True,
    containers_ready: bool = True,
    gate: dict[str, str] | None = None,
    started: str = "2026-12-02T10:00:00Z",
) -> PodEndpoint:
    """A pod of models/llama as the apiserver has it (Ready False: a gated pod waits)."""
    conditions: list[dict[str, str]] = [
        {"type": "ContainersReady", "status": str(containers_ready)},
        {"type": "Ready", "status": "False"},
    ]
    if gate is not None:
        conditions.append({"type": GATE_CONDITION, **gate})
    spec: dict[str, Any] = {"containers": [{"name": "sglang"}]}
    if gated:
        spec["readinessGates"] = [{"conditionType": GATE_CONDITION}]
    running = {"running": {"startedAt": started}}
    return pod_from_object(
        {
            "metadata": {
                "name": name,
                "namespace": "models",
                "labels": {"inference.llmkube.dev/service": "llama"},
            },
            "spec": spec,
            "status": {
                "podIP": "10.0.0.1",
                "conditions": conditions,
                "containerStatuses": [
                    {"name": "sglang", "containerID": "containerd://3f2a9c", "state": running}
                ],
            },
        }
    )


def loading(since: str = "2026-12-02T10:41:22Z") -> dict[str, str]:
    return {
        "status": "False",
        "reason": "AdaptersLoading",
        "message": WAITING,
        "lastTransitionTime": since,
    }


LOADED = {"status": "True", "reason": "AdaptersLoaded", "message": "2 adapters loaded"}


# --- the API: MutatingAdmissionPolicy v1 ---------------------------------------------------------


def test_a_1_36_cluster_serves_the_gate_whether_or_not_the_pods_carry_it() -> None:
    none = check_gate_api(("v1",), [pod("llama-0", gated=False)])
    assert (none.name, none.status) == ("readiness-gate", CheckStatus.OK)
    assert none.message == (
        "the cluster serves MutatingAdmissionPolicy in admissionregistration.k8s.io/v1: the "
        "readiness gate can be installed (ResyncDeployment(readiness_gate=True), or pulumi-lora "
        "readiness-gate); no pod here carries it"
    )
    every = check_gate_api(("v1",), [pod("llama-0"), pod("llama-1")])
    assert every.status is CheckStatus.OK
    assert every.message == (
        "2/2 pods carry the readiness gate pulumi-lora.dev/adapters-loaded "
        "(MutatingAdmissionPolicy in admissionregistration.k8s.io/v1 is served)"
    )


def test_pods_made_before_the_policy_are_named_as_ungated() -> None:
    some = check_gate_api(("v1",), [pod("llama-0"), pod("llama-1", gated=False)])
    assert some.status is CheckStatus.WARN
    assert some.message == (
        "only 1/2 pods carry the readiness gate pulumi-lora.dev/adapters-loaded: pods created "
        "before the gate's policy have none, and turn Ready before their adapters load"
    )
    assert some.fix == (
        "restart the InferenceService's pods once the policy is in place (kubectl rollout "
        "restart deployment): a pod gets its gates when it is created"
    )


def test_an_older_cluster_cannot_take_the_gate_a_warning_unless_pods_carry_it() -> None:
    beta = check_gate_api(("v1beta1",), [pod("llama-0", gated=False)])
    assert beta.status is CheckStatus.WARN
    assert beta.message == (
        "the readiness gate cannot be installed here: it needs MutatingAdmissionPolicy in "
        "admissionregistration.k8s.io/v1 (Kubernetes 1.36 or later), and the cluster serves "
        f"{BETA}"
    )
    assert beta.fix == (
        "run the re-sync loop without readiness_gate (pods then turn Ready before their adapters "
        "load), or upgrade the cluster to Kubernetes 1.36 or later"
    )
    none = check_gate_api((), [])
    assert none.status is CheckStatus.WARN
    assert none.message.endswith("and the cluster serves no MutatingAdmissionPolicy at all")

    gated = check_gate_api((), [pod("llama-0")])
    assert gated.status is CheckStatus.FAIL
    assert gated.message == (
        "1/1 pods carry the readiness gate pulumi-lora.dev/adapters-loaded, but the cluster "
        "serves no MutatingAdmissionPolicy at all: pulumi-lora's gate policy needs "
        "admissionregistration.k8s.io/v1 (Kubernetes 1.36 or later)"
    )
    assert gated.fix == (
        "upgrade the cluster to Kubernetes 1.36 or later, or take the gate off: remove what adds "
        "it to the pods (a policy of another version, a webhook) and restart them"
    )


# --- pods held unready ----------------------------------------------------------------------------


def test_a_pod_held_past_the_bound_is_named_with_since_when_and_what_is_missing() -> None:
    checks = check_gate_held([pod("llama-0", gate=loading()), pod("llama-1", gate=LOADED)], NOW)
    assert len(checks) == 1
    (held,) = checks
    assert (held.name, held.status, held.pod) == ("gate-held", CheckStatus.WARN, "llama-0")
    assert held.message == (
        "containers ready, held unready by the readiness gate since 2026-12-02T10:41:22Z "
        f"(6 min): {WAITING}"
    )
    assert held.fix == HELD_FIX


def test_within_the_bound_or_not_ready_or_ungated_is_not_held() -> None:
    recent = loading(since="2026-12-02T10:46:00Z")  # 90 s before NOW
    assert [(c.status, c.message) for c in check_gate_held([pod("llama-0", gate=recent)], NOW)] == [
        (
            CheckStatus.OK,
            "no pod held unready by the readiness gate for more than 120 s (1 gated)",
        )
    ]
    stopped = pod("llama-0", containers_ready=False, gate=loading())  # its containers: not held
    assert check_gate_held([stopped], NOW)[0].status is CheckStatus.OK
    assert check_gate_held([pod("llama-0", gated=False)], NOW) == []  # no gate, no check


def test_a_new_container_is_held_only_since_it_started() -> None:
    # The gate turned False when the old container stopped (10:00); the new one started 10:46.
    restarted = pod("llama-0", gate=loading("2026-12-02T10:00:00Z"), started="2026-12-02T10:46:00Z")
    assert check_gate_held([restarted], NOW)[0].status is CheckStatus.OK
    later = datetime(2026, 12, 2, 11, 0, 0, tzinfo=UTC)
    (held,) = check_gate_held([restarted], later)
    assert held.message.startswith(
        "containers ready, held unready by the readiness gate since 2026-12-02T10:46:00Z (14 min)"
    )


def test_a_gate_no_loop_ever_wrote_says_so() -> None:
    (held,) = check_gate_held([pod("llama-0", started="2026-12-02T08:30:00Z")], NOW)
    assert held.message == (
        "containers ready, held unready by the readiness gate since 2026-12-02T08:30:00Z (2 h): "
        "no pulumi-lora.dev/adapters-loaded condition yet: no re-sync loop has written it (is "
        "one running for this namespace, with patch on pods/status?)"
    )


def test_doctor_adds_the_gate_checks_after_the_pods_only_when_it_asked() -> None:
    spec = {"runtime": "sglang", "replicas": 1}
    pods = (pod("llama-0", gate=loading()),)
    asked = DoctorFacts("models", "llama", {"spec": spec}, pods=pods, gate_api=("v1",), now=NOW)
    names = [c.name for c in diagnose(asked).checks]
    assert names[names.index("pods") + 1 :][:2] == ["readiness-gate", "gate-held"]
    unasked = DoctorFacts("models", "llama", {"spec": spec}, pods=pods)
    assert not {"readiness-gate", "gate-held"} & {c.name for c in diagnose(unasked).checks}


def test_on_gated_pods_doctor_asks_for_the_swaps_grant_and_names_the_flag_that_gives_it() -> None:
    """A deployer role made without ``--readiness-gate`` passes every load but 403s on the first
    rolling swap: doctor asks for what the swap needs where the pods carry the gate."""
    swap = [("patch", "", "pods/status"), ("list", "discovery.k8s.io", "endpointslices")]
    assert not set(swap) & set(asks(Transport.DIRECT, keyed=False))
    assert set(swap) <= set(asks(Transport.DIRECT, keyed=False, gated=True))
    assert not set(swap) & set(asks(Transport.DELEGATED, keyed=False, gated=True))  # the loop's

    spec = {"runtime": "sglang", "replicas": 1}
    facts = DoctorFacts(
        "models", "llama", {"spec": spec}, pods=(pod("llama-0", gate=LOADED),), denied=tuple(swap)
    )
    (check,) = [c for c in diagnose(facts).checks if c.name == "permissions"]
    assert check.status is CheckStatus.FAIL
    assert check.message == (
        "this identity may not, in models: patch pods/status, list endpointslices.discovery.k8s.io"
    )
    assert check.fix == (
        "pulumi-lora rbac --transport direct --readiness-gate -n models --subject ... "
        "| kubectl apply -f - (as a cluster admin)"
    )
    allowed = replace(facts, denied=())
    (ok,) = [c for c in diagnose(allowed).checks if c.name == "permissions"]
    assert ok.message == (
        "this identity may do all the provider does (direct) in models, the rolling swap on "
        "gated pods included"
    )
    delegated = replace(allowed, transport=Transport.DELEGATED)
    (loop,) = [c for c in diagnose(delegated).checks if c.name == "permissions"]
    assert loop.message == "this identity may do all the provider does (delegated) in models"


# --- API discovery --------------------------------------------------------------------------------


def cluster(served: dict[str, list[str]], status: int = 200) -> tuple[Client, list[str]]:
    """A lightkube client whose apiserver serves ``served`` (version → resource names) of
    admissionregistration.k8s.io; every other version is a 404. Returns the paths asked."""
    asked: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.url.path)
        version = request.url.path.rsplit("/", 1)[-1]
        if status != 200:
            return httpx2.Response(status, json={"kind": "Status"})
        if version not in served:
            return httpx2.Response(404, json={"kind": "Status", "code": 404})
        listed = [{"name": name, "namespaced": False} for name in served[version]]
        return httpx2.Response(200, content=json.dumps({"resources": listed}).encode())

    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "https://apiserver.test"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )
    return Client(config=config, transport=httpx2.MockTransport(answer)), asked


def test_discovery_asks_v1_first_and_the_older_versions_only_without_it() -> None:
    v1 = ["validatingadmissionpolicies", "mutatingadmissionpolicies"]
    client, asked = cluster({"v1": v1})
    assert policy_versions(client) == ("v1",)
    assert asked == ["/apis/admissionregistration.k8s.io/v1"]
    older, asked = cluster({"v1": ["validatingadmissionpolicies"], "v1beta1": v1})
    assert policy_versions(older) == ("v1beta1",)
    assert len(asked) == 3
    assert policy_versions(cluster({"v1": ["validatingwebhookconfigurations"]})[0]) == ()
    with pytest.raises(ClusterError, match=r"GET /apis/admissionregistration.k8s.io/v1\) failed"):
        policy_versions(cluster({}, status=403)[0])


def test_the_refusal_names_the_need_and_what_to_do() -> None:
    assert gate_refusal(("v1",)) is None
    assert gate_refusal(("v1beta1",)) == (
        "readiness_gate=True needs MutatingAdmissionPolicy in admissionregistration.k8s.io/v1 "
        f"(Kubernetes 1.36 or later), and this cluster serves {BETA}. Nothing was applied: "
        "deploy the re-sync loop without readiness_gate (pods then turn Ready before their "
        "adapters load), or upgrade the cluster to Kubernetes 1.36 or later"
    )


# --- ResyncDeployment(readiness_gate=True) --------------------------------------------------------


@pytest.fixture
def recorder() -> Recorder:
    return recording()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pulumi.runtime.test
def test_the_component_refuses_a_cluster_without_the_api_before_any_object(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[KubeSource] = []

    def served(source: KubeSource) -> tuple[str, ...]:
        asked.append(source)
        return ("v1beta1",)

    monkeypatch.setattr(deploy, "_served", served)
    with pytest.raises(pulumi.RunError) as refused:
        deploy.ResyncDeployment(
            "resync", namespace="ops", image="img:1", readiness_gate=True, kubeconfig="/k/config"
        )
    assert str(refused.value) == gate_refusal(("v1beta1",))
    assert asked == [KubeSource("/k/config")]
    assert not [r for r in recorder.resources if r.typ.startswith("kubernetes:")]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pulumi.runtime.test
def test_a_cluster_that_cannot_be_asked_is_not_refused(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> Any:
    warned: list[str] = []
    monkeypatch.setattr(deploy, "_served", lambda source: "cannot reach the Kubernetes apiserver")
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warned.append(message))
    loop = deploy.ResyncDeployment("resync", namespace="ops", image="img:1", readiness_gate=True)
    assert warned == [
        "readiness_gate=True: could not ask the cluster whether it serves MutatingAdmissionPolicy "
        "in admissionregistration.k8s.io/v1 (Kubernetes 1.36 or later): cannot reach the "
        "Kubernetes apiserver; not checked"
    ]

    def check(urns: list[str]) -> None:
        assert len(urns) == len(loop.manifests)

    return pulumi.Output.all(*(c.urn for c in loop.children)).apply(check)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_kubeconfig_output_is_asked_once_known_and_every_object_waits_for_it(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[KubeSource] = []

    def served(source: KubeSource) -> tuple[str, ...]:
        asked.append(source)
        return ()

    monkeypatch.setattr(deploy, "_served", served)
    # Each object's registration fails with the refusal; a program would end there, the test's
    # event loop keeps them: not reported again when they are collected.
    asyncio.get_event_loop().set_exception_handler(lambda loop, context: None)

    @pulumi.runtime.test
    def program() -> Any:
        kubeconfig = pulumi.Output.from_input("/k/config")
        loop = deploy.ResyncDeployment(
            "resync", namespace="ops", image="img:1", readiness_gate=True, kubeconfig=kubeconfig
        )
        return pulumi.Output.all(*(c.urn for c in loop.children))

    with pytest.raises(pulumi.RunError, match="this cluster serves no MutatingAdmissionPolicy"):
        program()
    assert asked == [KubeSource("/k/config")]
    assert not [r for r in recorder.resources if r.typ.startswith("kubernetes:")]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pulumi.runtime.test
def test_with_a_provider_in_opts_it_says_that_it_cannot_check(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pulumi_kubernetes as kubernetes  # noqa: PLC0415 - the optional extra

    warned: list[str] = []
    monkeypatch.setattr(deploy, "_served", lambda source: pytest.fail("asked"))
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warned.append(message))
    opts = pulumi.ResourceOptions(provider=kubernetes.Provider("k8s"))
    deploy.ResyncDeployment("resync", namespace="ops", image="i", readiness_gate=True, opts=opts)
    assert warned == [
        "readiness_gate=True with a kubernetes.Provider in opts: whether its cluster serves "
        "MutatingAdmissionPolicy v1 (Kubernetes 1.36 or later) is not checked before the loop is "
        "applied; pass kubeconfig= instead to have it checked"
    ]


def test_the_readiness_gate_command_says_first_what_it_requires() -> None:
    done = CliRunner().invoke(gate_command, ["-n", "models"])
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[0] == (
        "# Requires Kubernetes 1.36 or later: MutatingAdmissionPolicy in "
        "admissionregistration.k8s.io/v1 (pulumi-lora doctor says whether a cluster serves it)"
    )
    printed = list(yaml.safe_load_all(done.output))  # kubectl skips the comment too
    assert printed == readiness_gate_policy("pulumi-lora-resync-readiness-gate", ["models"])


def test_under_pulumis_mocks_no_cluster_is_asked(recorder: Recorder) -> None:
    """A unit test of a program (Pulumi's mocks) has no cluster: the ambient kubeconfig, which
    may name any cluster, is not read."""
    assert deploy._served(KubeSource("/nowhere/kubeconfig")) is None
