"""The loop's deployment: rendered manifests, and both applied to the real apiserver (the
component through the real engine and pulumi-kubernetes provider)."""

from __future__ import annotations

import json
from typing import Any

import pulumi
from conftest import Identity

from pulumi_lora.deploy import (
    DEFAULT_NAME,
    LEASE_RULES,
    RELEASE_RULE,
    RESOURCE_TYPE,
    SECRET_RULE,
    WATCH_RULES,
    ResyncDeployment,
    resync_manifests,
)
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import (
    BinaryNotFoundError,
    Testbed,
    find_binary,
    image_present,
    loop_image,
)


def by_kind(manifests: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for m in manifests:
        found.setdefault(m["kind"], []).append(m)
    return found


def test_cluster_wide_manifests() -> None:
    manifests = resync_manifests("ops", "ghcr.io/acme/pulumi-lora:1.0", replicas=2)
    kinds = by_kind(manifests)
    assert [m["kind"] for m in manifests] == [
        "ValidatingAdmissionPolicy",  # the LLMKube coexistence policy, first
        "ValidatingAdmissionPolicyBinding",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    ]
    assert kinds["ClusterRole"][0]["rules"] == [*WATCH_RULES, RELEASE_RULE]
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
    assert verbs == {"list", "watch", "patch", "create"}  # never delete, update or *
    assert not any("secrets" in rule["resources"] for rule in kinds["ClusterRole"][0]["rules"])


def test_namespaced_manifests_use_a_role_in_the_watched_namespace() -> None:
    manifests = resync_manifests("ops", "img", watch_namespace="models", name="loop")
    kinds = by_kind(manifests)
    assert "ClusterRole" not in kinds and len(kinds["Role"]) == 2
    watch_role, lease_role = kinds["Role"]
    assert SECRET_RULE in watch_role["rules"]  # the watched namespace's API-key Secrets
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


def stored(testbed: Testbed, manifest: dict[str, Any]) -> dict[str, Any]:
    """The object as the apiserver holds it."""
    meta = manifest["metadata"]
    where = ("-n", meta["namespace"]) if "namespace" in meta else ()
    done = testbed.kubectl("get", manifest["kind"].lower(), meta["name"], *where, "-o", "json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def contains(whole: Any, part: Any) -> bool:
    """``part`` is in ``whole``: every key it names has the same value (the apiserver only adds
    defaults and bookkeeping)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(
            k in whole and contains(whole[k], v) for k, v in part.items()
        )
    if isinstance(part, list):
        return (
            isinstance(whole, list)
            and len(whole) == len(part)
            and all(contains(w, p) for w, p in zip(whole, part, strict=True))
        )
    return bool(whole == part)


def test_the_component_creates_exactly_the_rendered_objects(
    testbed: Testbed, engine: LocalEngine
) -> None:
    """``ResyncDeployment`` through the real engine and the built pulumi-kubernetes provider, its
    cluster given as a ``kubeconfig`` Output:
    the objects in the apiserver are the rendered manifests, pulumi-kubernetes' await sees the
    Deployment (a container of the loop's image, run by the testbed's kubelet) become
    available, and ``destroy`` removes every object."""
    try:
        find_binary("pulumi-resource-kubernetes")
    except BinaryNotFoundError as exc:
        missing_real_part(str(exc))
    image = loop_image()
    if not image_present(image):
        missing_real_part(f"the loop's image {image} (python3 tools/image.py --local-base)")
    ns = testbed.create_namespace("resync-component")
    watched = testbed.create_namespace("resync-watched")
    expected = resync_manifests(ns, image, watch_namespace=watched)
    kubeconfig = testbed.kubeconfig_path.read_text()

    def program() -> None:
        # the cluster's kubeconfig as a platform stack has it (issue 41): an Output
        loop = ResyncDeployment(
            "resync",
            namespace=ns,
            image=image,
            watch_namespace=watched,
            kubeconfig=pulumi.Output.from_input(kubeconfig),
        )
        pulumi.export("deployment", loop.deployment)
        pulumi.export("service_account", loop.service_account)

    stack = engine.inline_stack("resync-component", "dev", program)
    try:
        up = stack.up()
        assert up.outputs["deployment"].value == DEFAULT_NAME
        assert up.outputs["service_account"].value == DEFAULT_NAME
        resources = stack.export_stack().deployment["resources"]
        token = kubeconfig.split("token:")[1].split()[0]
        assert token not in engine.stored_state("resync-component", "dev")  # secret in the state
        kinds = sorted(r["type"] for r in resources if r["type"].startswith("kubernetes:"))
        assert kinds == sorted(
            f"kubernetes:{m['apiVersion'] if '/' in m['apiVersion'] else 'core/v1'}:{m['kind']}"
            for m in expected
        )
        assert RESOURCE_TYPE in {r["type"] for r in resources}
        for manifest in expected:
            assert contains(stored(testbed, manifest), manifest), manifest["kind"]
        deployment = stored(testbed, expected[-1])
        assert deployment["status"]["availableReplicas"] == 1  # what the await waited for
    finally:
        stack.destroy()
    for manifest in expected:
        meta = manifest["metadata"]
        where = ("-n", meta["namespace"]) if "namespace" in meta else ()
        gone = testbed.kubectl("get", manifest["kind"].lower(), meta["name"], *where)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, manifest["kind"]


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
