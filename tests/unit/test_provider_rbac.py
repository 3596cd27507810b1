"""``pulumi-lora rbac``: the provider's least privilege as manifests, and ``deploy/rbac/`` as
the command prints it (the e2e flow as exactly that role: tests/e2e/test_least_privilege.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._kube._rbac import parse_subject, provider_rules
from pulumi_lora._models import Transport
from pulumi_lora._ops._checks import CheckStatus
from pulumi_lora._ops._permissions import asks, check_permissions

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {
    "direct.yaml": ["--transport", "direct"],
    "delegated.yaml": ["--transport", "delegated"],
}
#: What reaches into a namespace beyond the CRs: run a pod as any of its ServiceAccounts (a Job),
#: send requests to any port of its pods (the pod proxy), read its Secrets.
REACHING = {("jobs", "create"), ("pods/proxy", "create"), ("pods/proxy", "get"), ("secrets", "get")}


def granted(rules: list[dict[str, object]]) -> set[tuple[str, str]]:
    return {(str(r), str(v)) for rule in rules for r in rule["resources"] for v in rule["verbs"]}  # type: ignore[attr-defined]


def printed(*argv: str) -> tuple[int, list[dict[str, Any]], str]:
    """``pulumi-lora rbac ARGV`` as a user runs it: exit code, the manifests it printed on
    stdout (parsed), and what it said on stderr."""
    done = CliRunner().invoke(cli, ["rbac", *argv])
    return done.exit_code, [m for m in yaml.safe_load_all(done.stdout) if m], done.stderr


@pytest.mark.parametrize(("name", "flags"), SHIPPED.items())
def test_deploy_rbac_is_what_the_command_prints(name: str, flags: list[str]) -> None:
    done = CliRunner().invoke(cli, ["rbac", *flags])
    assert done.exit_code == 0, done.output
    assert (ROOT / "deploy" / "rbac" / name).read_text(encoding="utf-8") == done.output


def test_no_shipped_role_reaches_into_every_namespace() -> None:
    """``deploy/rbac/`` holds only the ClusterRoles the command prints, none of which may run a
    Job, proxy to a pod or read a Secret."""
    shipped = sorted(p.name for p in (ROOT / "deploy" / "rbac").iterdir())
    assert shipped == sorted(SHIPPED)
    for name in shipped:
        for made in yaml.safe_load_all((ROOT / "deploy" / "rbac" / name).read_text()):
            assert not granted(made["rules"]) & REACHING, name


@pytest.mark.parametrize(
    ("flags", "grants"),
    [
        (["--staging"], ["create jobs", "create pods/proxy"]),
        (["--transport", "proxy"], ["create pods/proxy"]),
        (["--api-key-secrets"], ["get secrets"]),
        (["--transport", "delegated", "--staging"], ["create jobs", "create pods/proxy"]),
        (["--transport", "proxy", "--staging", "--subject", "user:ci"], ["create jobs"]),
    ],
)
def test_what_reaches_into_a_namespace_is_refused_without_one(
    flags: list[str], grants: list[str]
) -> None:
    """Issue 53: ``rbac --staging`` without ``-n`` printed a ClusterRole with ``create jobs`` and
    ``create pods/proxy`` in every namespace, kube-system included. It prints nothing now, and
    says which grants, what each amounts to, and to name the namespaces."""
    code, manifests, said = printed(*flags)
    assert code == 2
    assert manifests == []
    for grant in grants:
        assert grant in said, said
    assert "only in the namespaces you name" in said
    assert "-n NAMESPACE" in said


@pytest.mark.parametrize("transport", [t.value for t in Transport])
@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("staging", [False, True])
def test_no_printed_cluster_role_reaches_into_a_namespace(
    transport: str, keyed: bool, staging: bool
) -> None:
    """Every combination without ``-n``: a ClusterRole that only sees (CRs, pods, workloads),
    or a refusal; never a cluster-wide Job, pod proxy or Secret."""
    flags = ["--transport", transport, "--subject", "group:deployers"]
    flags += ["--api-key-secrets"] * keyed + ["--staging"] * staging
    code, manifests, said = printed(*flags)
    needed = granted(provider_rules(Transport(transport), keyed=keyed, staging=staging))
    if needed & REACHING:  # refused, printing nothing
        assert (code, manifests) == (2, []) and "-n NAMESPACE" in said, said
        return
    assert code == 0, said
    assert [m["kind"] for m in manifests] == ["ClusterRole", "ClusterRoleBinding"]
    assert not granted(manifests[0]["rules"]) & REACHING


def test_staging_with_namespaces_is_a_role_in_each_and_nothing_cluster_wide() -> None:
    code, manifests, _ = printed(
        "--staging", "--api-key-secrets", "-n", "models", "-n", "serving", "--subject", "user:ci"
    )
    assert code == 0
    assert [(m["kind"], m["metadata"]["namespace"]) for m in manifests] == [
        ("Role", "models"),
        ("RoleBinding", "models"),
        ("Role", "serving"),
        ("RoleBinding", "serving"),
    ]
    for role in (m for m in manifests if m["kind"] == "Role"):
        assert granted(role["rules"]) >= REACHING


def test_each_transport_gets_only_what_it_uses() -> None:
    direct = granted(provider_rules(Transport.DIRECT, keyed=False, staging=False))
    proxy = granted(provider_rules(Transport.PROXY, keyed=False, staging=False))
    assert ("pods/proxy", "create") in proxy and ("pods/proxy", "create") not in direct
    assert not any(resource == "secrets" for resource, _ in direct | proxy)
    keyed = granted(provider_rules(Transport.DIRECT, keyed=True, staging=False))
    assert keyed - direct == {("secrets", "get")}
    # proxy cannot carry a key and delegated leaves keys to the loop: no Secret either way
    assert ("secrets", "get") not in granted(
        provider_rules(Transport.PROXY, keyed=True, staging=False)
    )
    assert ("secrets", "get") not in granted(
        provider_rules(Transport.DELEGATED, keyed=True, staging=False)
    )
    staged = granted(provider_rules(Transport.DIRECT, keyed=False, staging=True))
    assert staged - direct == {
        ("jobs", "create"),
        ("jobs", "get"),
        ("jobs", "delete"),
        ("pods/proxy", "get"),  # the stager is reached through the pod proxy
        ("pods/proxy", "create"),
    }
    assert not any(
        verb in {"*", "deletecollection", "escalate", "bind"} for _, verb in staged | keyed
    )


def test_namespaces_give_roles_and_a_subject_gives_bindings() -> None:
    done = CliRunner().invoke(
        cli, ["rbac", "-n", "models", "-n", "serving", "--subject", "serviceaccount:ci/deployer"]
    )
    made = list(yaml.safe_load_all(done.output))
    assert [(m["kind"], m["metadata"]["namespace"]) for m in made] == [
        ("Role", "models"),
        ("RoleBinding", "models"),
        ("Role", "serving"),
        ("RoleBinding", "serving"),
    ]
    assert made[1]["subjects"] == [
        {"kind": "ServiceAccount", "name": "deployer", "namespace": "ci"}
    ]


def test_a_subject_is_checked() -> None:
    assert parse_subject("user:ci-deployer")["kind"] == "User"
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        parse_subject("serviceaccount:deployer")
    done = CliRunner().invoke(cli, ["rbac", "--subject", "robot:x"])
    assert done.exit_code == 2 and "user:NAME" in done.output


def test_doctor_names_a_denied_permission_by_verb_and_resource() -> None:
    wanted = asks(Transport.PROXY, keyed=False)
    assert ("create", "", "pods/proxy") in wanted
    assert ("create", "inference.llmkube.dev", "loraadapters") in wanted
    denied = [("get", "", "pods/proxy"), ("create", "inference.llmkube.dev", "loraadapters")]
    check = check_permissions(denied, "models", "proxy", keyed=False)
    assert check.status is CheckStatus.FAIL
    assert check.message == (
        "this identity may not, in models: "
        "get pods/proxy, create loraadapters.inference.llmkube.dev"
    )
    assert check.fix.startswith("pulumi-lora rbac --transport proxy -n models")
    assert check_permissions([], "models", "direct", keyed=False).status is CheckStatus.OK


def test_delegated_reads_the_loops_lease_where_the_loop_runs() -> None:
    refused = CliRunner().invoke(cli, ["rbac", "--transport", "delegated", "-n", "models"])
    assert refused.exit_code == 2
    assert "give the namespace the loop runs in (--loop-namespace)" in refused.output
    done = CliRunner().invoke(
        cli,
        ["rbac", "--transport", "delegated", "-n", "models", "--loop-namespace", "pulumi-lora"],
    )
    assert done.exit_code == 0, done.output
    roles = {m["metadata"]["namespace"]: m["rules"] for m in yaml.safe_load_all(done.output)}
    assert roles["pulumi-lora"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}
    ]
    assert ("leases", "get") not in granted(roles["models"])
    cluster_wide = yaml.safe_load((ROOT / "deploy" / "rbac" / "delegated.yaml").read_text())
    assert ("leases", "get") in granted(cluster_wide["rules"])
