"""Where the loop may read Secrets, as rendered: only in Roles of the namespaces named.

``get`` on ``secrets`` reads any Secret of a namespace whose name is known; the loop needs only
the API-key Secrets CRs name, so no ClusterRole of its manifests holds it (issue 53's pattern:
a ClusterRole would hold it in every namespace, kube-system included).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
import yaml

from pulumi_lora._resync._kube import secret_refused
from pulumi_lora.deploy import (
    RELEASE_RULE,
    SECRET_RULE,
    WATCH_RULES,
    ResyncDeployment,
    resync_manifests,
)
from tests._mocks import Recorder, recording

Manifests = list[dict[str, Any]]


def reading_secrets(manifests: Manifests) -> list[tuple[str, str | None, str]]:
    """(kind, namespace, name) of every role of ``manifests`` with a rule on ``secrets``."""
    return [
        (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])
        for m in manifests
        if m["kind"] in ("Role", "ClusterRole")
        and any("secrets" in rule["resources"] for rule in m["rules"])
    ]


def test_the_cluster_wide_loop_reads_no_secret_by_default() -> None:
    manifests = resync_manifests("ops", "img:1")
    assert reading_secrets(manifests) == []
    cluster_role = next(m for m in manifests if m["kind"] == "ClusterRole")
    assert cluster_role["rules"] == [*WATCH_RULES, RELEASE_RULE]


def test_each_named_namespace_gets_a_role_with_exactly_get_on_secrets() -> None:
    manifests = resync_manifests(
        "ops", "img:1", name="loop", secret_namespaces=["models", "serving", "models", "ops"]
    )
    assert reading_secrets(manifests) == [
        ("Role", "models", "loop-secrets"),
        ("Role", "serving", "loop-secrets"),
        ("Role", "ops", "loop-secrets"),
    ]
    assert not any(m["kind"] == "ClusterRole" and SECRET_RULE in m["rules"] for m in manifests)
    for where in ("models", "serving", "ops"):
        role, binding = (
            m
            for m in manifests
            if m["metadata"]["name"] == "loop-secrets" and m["metadata"]["namespace"] == where
        )
        assert role["kind"] == "Role" and role["rules"] == [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
        ]
        assert binding["kind"] == "RoleBinding"
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "loop-secrets",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "loop", "namespace": "ops"}
        ]
    # the grants come before the Deployment, which the component makes wait for them
    kinds = [m["kind"] for m in manifests]
    assert kinds.index("Deployment") > max(i for i, k in enumerate(kinds) if k == "RoleBinding")
    # as printed for kubectl: plain documents, no YAML anchors
    assert "&id" not in yaml.safe_dump_all(manifests, sort_keys=False)


def test_the_watched_namespace_keeps_its_secret_rule_and_nothing_beyond_it() -> None:
    scoped = resync_manifests("ops", "img:1", watch_namespace="models")
    assert reading_secrets(scoped) == [("Role", "models", "pulumi-lora-resync")]
    assert (
        resync_manifests("ops", "img:1", watch_namespace="models", secret_namespaces=["models"])
        == scoped
    )
    with pytest.raises(
        ValueError, match=r"secret_namespaces \['kube-system'\]: the loop watches 'models'"
    ):
        resync_manifests(
            "ops", "img:1", watch_namespace="models", secret_namespaces=["models", "kube-system"]
        )


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("models", r"a list of namespaces, not one string: \['models'\]"),
        (["Models"], r"not namespace names: \['Models'\]"),
        (["", "a" * 64], "not namespace names"),
    ],
)
def test_what_is_no_list_of_namespaces_is_refused(given: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        resync_manifests("ops", "img:1", secret_namespaces=given)


def test_a_refused_secret_says_what_to_set() -> None:
    advice = secret_refused("models", "sglang-key")
    assert advice.startswith("the loop may not read Secret models/sglang-key: ")
    assert "add 'models' to secret_namespaces" in advice
    assert "resync_manifests or ResyncDeployment" in advice


@pytest.fixture
def recorder() -> Recorder:
    return recording()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pulumi.runtime.test
def test_the_component_makes_one_role_per_named_namespace(recorder: Recorder) -> Any:
    loop = ResyncDeployment(
        "resync", namespace="ops", image="img:1", secret_namespaces=["models", "ops"]
    )

    def check(urns: list[str]) -> None:
        assert len(set(urns)) == len(urns) == len(loop.manifests)
        roles = {
            r.name: r.inputs["metadata"]["namespace"]
            for r in recorder.resources
            if r.typ == "kubernetes:rbac.authorization.k8s.io/v1:Role"
            and r.inputs["metadata"]["name"] == "pulumi-lora-resync-secrets"
        }
        assert roles == {"resync-role-secrets-models": "models", "resync-role-secrets-ops": "ops"}

    return pulumi.Output.all(*(child.urn for child in loop.children)).apply(check)
