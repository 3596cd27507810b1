"""The shipped ValidatingAdmissionPolicies (``resync_manifests(admission_policies=True)``) on a
real kube-apiserver: each refusal, in the apiserver's own words through ``kubectl``, and the
project's own operations passing under them.

The policies are cluster-scoped; their bindings here select only namespaces labelled with this
module's tag, so other tests sharing the testbed never meet them.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from _resync_harness import Cluster, everywhere, wait_until
from conftest import LoopFactory, apply_manifests

from pulumi_lora._args import AdapterArgs
from pulumi_lora._models import MOST_DRAIN_SECONDS, MOST_UNAVAILABLE, Transport, format_time
from pulumi_lora.deploy import (
    ACCEPT_FOREIGN_ADAPTERS_LABEL,
    DEFAULT_NAME,
    SERVICE_LABEL,
    ResyncDeployment,
    resync_manifests,
)
from pulumi_lora.testing.testbed import CONTROLLER_USER, Testbed

#: The label that puts a namespace under this module's bindings.
POLICY_LABEL = "pulumi-lora.dev/admission-test"
#: Who the pod policy lets create labelled pods: exactly what docs/resync.md recommends.
CREATORS = json.loads(
    re.search(  # type: ignore[union-attr]
        r'workload_creators=(\["[^\]]*\])',
        (Path(__file__).parents[2] / "docs" / "resync.md").read_text(encoding="utf-8"),
    ).group(1)
)
#: kubectl acting as the ReplicaSet controller (the admin may impersonate anyone).
AS_REPLICASET_CONTROLLER = f"--as={CONTROLLER_USER}"
MALLORY = ("--as=mallory", "--as-group=system:masters")
DENIED = "denied request"


@pytest.fixture(scope="module")
def tag(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Apply the policies and bindings (named after a fresh tag); remove them afterwards."""
    name = f"vap-{secrets.token_hex(3)}"
    manifests = [
        m
        for m in resync_manifests(
            "unused",
            "pulumi-lora:test",
            name=name,
            admission_policies=True,
            workload_creators=CREATORS,
            admission_namespace_selector={"matchLabels": {POLICY_LABEL: name}},
            llmkube_coexistence=False,  # tests/e2e/test_llmkube_coexistence.py applies that one
        )
        if m["kind"].startswith("ValidatingAdmissionPolicy")
    ]
    assert [m["kind"] for m in manifests] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] * 3
    apply_manifests(testbed, manifests, tmp_path_factory.mktemp("vap") / "policies.yaml")
    yield name
    for manifest in reversed(manifests):
        testbed.kubectl("delete", manifest["kind"].lower(), manifest["metadata"]["name"])


def guard(testbed: Testbed, namespace: str, tag: str) -> str:
    done = testbed.kubectl("label", "namespace", namespace, f"{POLICY_LABEL}={tag}", "--overwrite")
    assert done.returncode == 0, done.stderr
    return namespace


@pytest.fixture
def guarded(testbed: Testbed, tag: str) -> str:
    """A fresh namespace under the policies."""
    return guard(testbed, testbed.create_namespace("vap"), tag)


def adapter(
    namespace: str,
    name: str,
    *,
    target: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": "llama"}
    if target is not None:
        ref["namespace"] = target
    return {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {"name": name, "path": f"/adapters/{name}", "inferenceServiceRef": ref},
    }


def pod(namespace: str, name: str, *, labels: dict[str, str], owner: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "llama-5d8f7",
                "uid": "6f1c7a52-0000-4000-8000-000000000001",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.5"}]},
    }


def create(testbed: Testbed, manifest: dict[str, Any], *options: str) -> tuple[int, str]:
    """``kubectl create -f -`` (as the admin, or as ``options`` say): exit code and stderr."""
    done = testbed.kubectl("create", "-f", "-", *options, input=yaml.safe_dump(manifest))
    return done.returncode, done.stderr.strip()


def refused(testbed: Testbed, manifest: dict[str, Any], *options: str) -> str:
    """The apiserver's refusal of ``manifest``, waiting out the policies' informer start-up
    (a server-side dry run until refused), then for real; printed, so the run shows it."""

    def dry_refused() -> bool:
        code, _ = create(testbed, manifest, "--dry-run=server", *options)
        return code != 0

    wait_until(dry_refused, timeout=20, what="the admission policies to take effect")
    code, stderr = create(testbed, manifest, *options)
    assert code != 0 and DENIED in stderr, stderr
    print(f"kubectl create {manifest['kind']} {manifest['metadata']['name']}: {stderr}")
    return stderr


def admitted(testbed: Testbed, manifest: dict[str, Any], *options: str) -> None:
    """``manifest`` is created; waits out a policy's params informer (a namespace just labelled)."""
    wait_until(
        lambda: create(testbed, manifest, "--dry-run=server", *options)[0] == 0,
        timeout=20,
        what=f"{manifest['kind']} {manifest['metadata']['name']} to be admitted",
    )
    code, stderr = create(testbed, manifest, *options)
    assert code == 0, stderr


# --- (a) cross-namespace targets ----------------------------------------------------------------


def test_a_cross_namespace_target_needs_the_target_namespace_to_opt_in(
    testbed: Testbed, guarded: str
) -> None:
    target = testbed.create_namespace("vap-target")
    said = refused(testbed, adapter(guarded, "foreign", target=target))
    assert "ValidatingAdmissionPolicy" in said and "-adapter-targets" in said
    assert f"targets an InferenceService in namespace {target}" in said
    assert f"label it {ACCEPT_FOREIGN_ADAPTERS_LABEL}=true" in said
    # Its own namespace, named or implied, is always fine.
    admitted(testbed, adapter(guarded, "own-named", target=guarded))
    admitted(testbed, adapter(guarded, "own-implied"))
    # The target opts in: now the same CR is admitted.
    done = testbed.kubectl("label", "namespace", target, f"{ACCEPT_FOREIGN_ADAPTERS_LABEL}=true")
    assert done.returncode == 0, done.stderr
    admitted(testbed, adapter(guarded, "foreign", target=target))
    # An update moving an admitted CR to a namespace that has not opted in is refused too.
    elsewhere = testbed.create_namespace("vap-elsewhere")
    moved = adapter(guarded, "foreign", target=elsewhere)
    done = testbed.kubectl("apply", "-f", "-", input=yaml.safe_dump(moved))
    assert done.returncode != 0 and "does not accept adapters from other namespaces" in (
        done.stderr
    ), done.stderr


# --- (b) the service label ----------------------------------------------------------------------


def test_only_replicaset_controlled_pods_may_carry_the_service_label(
    testbed: Testbed, guarded: str
) -> None:
    labels = {SERVICE_LABEL: "impostor"}
    said = refused(testbed, pod(guarded, "loose", labels=labels, owner=False))
    assert "must be controlled by an apps/v1 ReplicaSet" in said
    # Controlled by a ReplicaSet, created by an allowed user: admitted.
    admitted(testbed, pod(guarded, "workload", labels=labels, owner=True), AS_REPLICASET_CONTROLLER)
    # The same pod from the cluster admin, who is not the ReplicaSet controller: refused.
    said = refused(testbed, pod(guarded, "by-admin", labels=labels, owner=True))
    assert "user testbed-admin may not create a pod carrying, or set, the label" in said
    # The same pod from anyone else (even with every permission): refused, naming the user.
    said = refused(testbed, pod(guarded, "forged", labels=labels, owner=True), *MALLORY)
    assert "user mallory may not create a pod carrying, or set, the label" in said
    # Pods without the label are not this policy's business; setting it later is.
    # (no owner: the garbage collector removes a pod whose owner does not exist)
    admitted(testbed, pod(guarded, "plain", labels={"app": "x"}, owner=False), *MALLORY)
    done = testbed.kubectl(
        "label", "pod", "plain", f"{SERVICE_LABEL}=impostor", "-n", guarded, *MALLORY
    )
    assert done.returncode != 0 and DENIED in done.stderr, done.stderr
    print(f"kubectl label pod plain: {done.stderr.strip()}")


# --- (c) the protocol's annotations -------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"pulumi-lora.dev/pinned": "yes"}, "pulumi-lora.dev/pinned must be one of true, false"),
        (
            {"pulumi-lora.dev/transport": "carrier-pigeon"},
            "pulumi-lora.dev/transport must be one of direct, proxy, delegated",
        ),
        (
            {"pulumi-lora.dev/readiness-policy": "SomePods"},
            "pulumi-lora.dev/readiness-policy must be one of AllReadyPods, AnyReadyPod",
        ),
        ({"pulumi-lora.dev/managed-by": "me"}, "pulumi-lora.dev/managed-by must be one of pulumi"),
        (
            {"pulumi-lora.dev/api-key-secret": "../etc/passwd"},
            "pulumi-lora.dev/api-key-secret must be SECRET-NAME/KEY",
        ),
        (
            {"pulumi-lora.dev/operation": "delete@soon"},
            "pulumi-lora.dev/operation must be update@<RFC3339 UTC> or delete@<RFC3339 UTC>",
        ),
        (
            {"pulumi-lora.dev/operation": "update@2026-12-03T10:00:00Z" + " " * 200_000},
            "pulumi-lora.dev/operation must be",
        ),
        (
            {"pulumi-lora.dev/evil": "1"},
            "unknown annotation under pulumi-lora.dev/: pulumi-lora.dev/evil",
        ),
        (
            {"pulumi-lora.dev/smoke-test": "no"},
            "pulumi-lora.dev/smoke-test must be one of true, false",
        ),
        (
            {"pulumi-lora.dev/max-unavailable": "0"},
            "pulumi-lora.dev/max-unavailable must be a whole number of pods, 1 to 1000",
        ),
        (
            {"pulumi-lora.dev/drain-seconds": "2s"},
            "pulumi-lora.dev/drain-seconds must be seconds, 0 to 600",
        ),
    ],
    ids=[
        "pinned",
        "transport",
        "policy",
        "managed-by",
        "secret",
        "operation",
        "huge",
        "unknown",
        "smoke-test",
        "max-unavailable",
        "drain-seconds",
    ],
)
def test_protocol_annotations_hold_only_defined_values(
    testbed: Testbed, guarded: str, annotations: dict[str, str], message: str
) -> None:
    said = refused(testbed, adapter(guarded, "noted", annotations=annotations))
    assert message in said


def test_the_providers_own_annotations_are_admitted(testbed: Testbed, guarded: str) -> None:
    for index, transport in enumerate(Transport):
        args = AdapterArgs(
            adapter_name=f"a{index}",
            path="/adapters/a",
            inference_service="llama",
            namespace=guarded,
            pinned=bool(index % 2),
            smoke_test=bool(index % 2),
            transport=transport,
            api_key_secret_name="sglang-key.v1",
        )
        if index == 0:  # a staged adapter's CR also carries its source (issue 54's review)
            args = args.replace(source="hf://acme/sql@" + "0" * 40)
        if index == 1:  # and a swap's pace, when not the default
            args = args.replace(max_unavailable=25, drain_seconds=7.5)
        if index == 2:  # at the largest values the inputs take (1000 was refused)
            args = args.replace(max_unavailable=MOST_UNAVAILABLE, drain_seconds=MOST_DRAIN_SECONDS)
        notes = {
            **args.annotations(),
            "pulumi-lora.dev/operation": f"update@{format_time(datetime.now(UTC))}",
            "example.com/anything": "else",  # other prefixes are not the policy's business
        }
        admitted(testbed, adapter(guarded, f"a{index}", annotations=notes))


# --- the component -----------------------------------------------------------------------------


class Recorder(pulumi.runtime.Mocks):
    """Records every registration; echoes inputs as outputs."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


def test_the_docs_recommend_the_replicaset_controllers_user() -> None:
    """The value docs/resync.md tells users to pass is who really creates workload pods: the
    testbed's real kube-controller-manager's ReplicaSet controller (with
    ``--use-service-account-credentials``, as kubeadm runs it)."""
    assert CREATORS == [CONTROLLER_USER]
    assert CONTROLLER_USER == "system:serviceaccount:kube-system:replicaset-controller"


def test_admission_policies_are_opt_in() -> None:
    # By default only the LLMKube coexistence policy (tests/ops/test_coexistence.py) is rendered.
    assert [
        m["metadata"]["name"] for m in resync_manifests("ops", "img") if "Admission" in m["kind"]
    ] == ["pulumi-lora-resync-llmkube-coexistence"] * 2
    manifests = resync_manifests(
        "ops",
        "img",
        name="loop",
        admission_policies=True,
        workload_creators=["system:serviceaccount:kube-system:replicaset-controller"],
        admission_namespace_selector={"matchLabels": {"team": "ml"}},
    )
    assert manifests[:-6] == resync_manifests("ops", "img", name="loop")
    policies = manifests[-6:]
    assert [(m["kind"], m["metadata"]["name"]) for m in policies] == [
        (kind, f"loop-{suffix}")
        for suffix in ("adapter-targets", "service-label", "adapter-annotations")
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ]
    for binding in policies[1::2]:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"] == {
            "namespaceSelector": {"matchLabels": {"team": "ml"}}
        }
    assert "replicaset-controller" in policies[2]["spec"]["validations"][-1]["expression"]


def test_the_component_creates_the_admission_policies() -> None:
    recorder = Recorder()

    @pulumi.runtime.test
    def declare() -> pulumi.Output[Any]:
        pulumi.runtime.set_mocks(recorder, preview=False)
        loop = ResyncDeployment("guarded", namespace="ops", image="img:1", admission_policies=True)

        def outputs(values: list[Any]) -> None:
            # Every output names its own object, whatever follows the Deployment in the manifests.
            assert values == [DEFAULT_NAME, DEFAULT_NAME, "ops"]

        return pulumi.Output.all(loop.deployment, loop.service_account, loop.namespace).apply(
            outputs
        )

    # The mocked program returns only once every registration has finished (the outputs above may
    # resolve before the policies are registered), so the recorder is complete here.
    declare()
    registered = {r.name: r for r in recorder.resources}
    for manifest in resync_manifests("ops", "img:1", admission_policies=True)[-6:]:
        suffix = manifest["metadata"]["name"].removeprefix(DEFAULT_NAME + "-")
        args = registered[f"guarded-{manifest['kind'].lower()}-{suffix}"]
        assert args.typ == f"kubernetes:admissionregistration.k8s.io/v1:{manifest['kind']}"
        assert json.loads(json.dumps(args.inputs)) == manifest


# --- the project under the policies -------------------------------------------------------------


def test_the_loop_loads_under_the_policies(
    testbed: Testbed, cluster: Cluster, loops: LoopFactory, tag: str
) -> None:
    """An InferenceService whose pods the real ReplicaSet controller creates under the policies
    (``workload_creators`` as the docs recommend), a CR in the same namespace applied as the
    provider applies it, and the loop loading it and writing its status: nothing is refused."""
    guard(testbed, cluster.namespace, tag)
    bad = adapter(cluster.namespace, "probe", annotations={"pulumi-lora.dev/pinned": "maybe"})
    refused(testbed, bad)  # the namespace is under the policies now
    handle = cluster.deploy(replicas=2)
    path = testbed.make_adapter("admitted")
    args = AdapterArgs(
        adapter_name="admitted", path=path, inference_service="llama", namespace=cluster.namespace
    )
    cluster.apply_cr("admitted", path, annotations=args.annotations())
    loops(cluster.namespace)
    wait_until(lambda: everywhere(handle, {"admitted": path}), timeout=30, what="the loop to load")
    wait_until(
        lambda: cluster.conditions("admitted").get("Loaded", {}).get("status") == "True",
        timeout=30,
        what="the loop to write Loaded=True",
    )
    stored = json.loads(
        cluster.kubectl("get", "loraadapters.inference.llmkube.dev", "admitted", "-o", "json")
    )
    assert stored["status"]["loadedPath"] == path
