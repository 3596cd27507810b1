"""The loop's deployment: rendered manifests, the Pulumi component (mocks), the real apiserver."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
from conftest import Identity

from pulumi_lora.deploy import (
    LEASE_RULES,
    RESOURCE_TYPE,
    WATCH_RULES,
    ResyncDeployment,
    resync_manifests,
)
from pulumi_lora.testing.testbed import Testbed


def by_kind(manifests: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for m in manifests:
        found.setdefault(m["kind"], []).append(m)
    return found


def test_cluster_wide_manifests() -> None:
    manifests = resync_manifests("ops", "ghcr.io/acme/pulumi-lora:1.0", replicas=2)
    kinds = by_kind(manifests)
    assert [m["kind"] for m in manifests] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    ]
    assert kinds["ClusterRole"][0]["rules"] == list(WATCH_RULES)
    assert "namespace" not in kinds["ClusterRole"][0]["metadata"]
    lease_role = kinds["Role"][0]
    assert lease_role["metadata"]["namespace"] == "ops" and lease_role["rules"] == list(LEASE_RULES)
    assert {
        "verbs": ["get", "update"],
        "resourceNames": ["pulumi-lora-resync"],
    }.items() <= lease_role["rules"][1].items()
    subject = kinds["ClusterRoleBinding"][0]["subjects"][0]
    assert subject == {"kind": "ServiceAccount", "name": "pulumi-lora-resync", "namespace": "ops"}
    deployment = kinds["Deployment"][0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 2 and pod["serviceAccountName"] == "pulumi-lora-resync"
    assert container["image"] == "ghcr.io/acme/pulumi-lora:1.0"
    assert container["livenessProbe"]["httpGet"] == {
        "port": "metrics",
        "scheme": "HTTP",
        "path": "/healthz",
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert "--namespace" not in container["args"]
    assert {e["name"] for e in container["env"]} == {"POD_NAME", "POD_NAMESPACE"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    verbs = {verb for rule in WATCH_RULES for verb in rule["verbs"]}
    assert verbs == {"list", "watch", "patch", "get", "create"}  # never delete, update or *


def test_namespaced_manifests_use_a_role_in_the_watched_namespace() -> None:
    manifests = resync_manifests("ops", "img", watch_namespace="models", name="loop")
    kinds = by_kind(manifests)
    assert "ClusterRole" not in kinds and len(kinds["Role"]) == 2
    watch_role, lease_role = kinds["Role"]
    assert watch_role["metadata"] == {
        **watch_role["metadata"],
        "name": "loop",
        "namespace": "models",
    }
    assert lease_role["metadata"]["namespace"] == "ops"
    binding = kinds["RoleBinding"][0]
    assert binding["metadata"]["namespace"] == "models"
    assert binding["subjects"][0]["namespace"] == "ops"
    args = kinds["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--namespace") + 1] == "models"


class Recorder(pulumi.runtime.Mocks):
    """Records every registration; echoes inputs as outputs."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


@pytest.fixture
def recorder() -> Recorder:
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    return mocks


@pulumi.runtime.test
def test_the_component_creates_exactly_the_rendered_objects(
    recorder: Recorder,
) -> pulumi.Output[Any]:
    loop = ResyncDeployment("resync", namespace="ops", image="img:1", watch_namespace="models")
    expected = resync_manifests("ops", "img:1", watch_namespace="models")

    def check(values: list[Any]) -> None:
        deployment, service_account = values
        assert (deployment, service_account) == ("pulumi-lora-resync", "pulumi-lora-resync")
        registered = {r.name: r for r in recorder.resources}  # registration order is async
        assert registered["resync"].typ == RESOURCE_TYPE
        names = [
            "resync-serviceaccount",
            "resync-role",
            "resync-rolebinding",
            "resync-role-lease",
            "resync-rolebinding-lease",
            "resync-deployment",
        ]
        assert set(registered) == {"resync", *names}
        for name, manifest in zip(names, expected, strict=True):
            args = registered[name]
            group = manifest["apiVersion"] if "/" in manifest["apiVersion"] else "core/v1"
            assert args.typ == f"kubernetes:{group}:{manifest['kind']}"
            assert json.loads(json.dumps(args.inputs)) == manifest  # camelCase kept, nothing lost

    return pulumi.Output.all(loop.deployment, loop.service_account).apply(check)


def test_the_manifests_apply_to_a_real_apiserver(
    testbed: Testbed, resync_identity: Identity
) -> None:
    """The session identity applied all six objects with ``kubectl apply -f``; they are there."""
    ns = resync_identity.namespace
    for kind in ("serviceaccount", "deployment", "role", "rolebinding"):
        done = testbed.kubectl("get", kind, "-n", ns, "-o", "name")
        assert done.returncode == 0 and done.stdout.strip(), (kind, done.stderr)
    for kind in ("clusterrole", "clusterrolebinding"):
        done = testbed.kubectl("get", kind, "pulumi-lora-resync", "-o", "json")
        assert done.returncode == 0, done.stderr
    stored = json.loads(
        testbed.kubectl("get", "deployment", "pulumi-lora-resync", "-n", ns, "-o", "json").stdout
    )
    probe = stored["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"]["path"] == "/readyz"
