"""The least privilege of whoever runs ``pulumi`` with LoRAAdapters: RBAC as plain manifests.

Pure. The rules depend on the transport, API keys, staging and ``delegated``.
``pulumi-lora rbac`` prints them; ``deploy/rbac/`` holds the ClusterRoles it prints. A grant
that reaches into a namespace past the CRs (:data:`REACHING`) is printed only in a Role of a
namespace named: never in a ClusterRole, which holds in every namespace, kube-system included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from pulumi_lora._models import GROUP, ISVC_PLURAL, PLURAL, Transport

DEFAULT_NAME = "pulumi-lora-provider"

SUBJECT_KINDS = {"user": "User", "group": "Group", "serviceaccount": "ServiceAccount"}


def provider_rules(
    transport: Transport, *, keyed: bool, staging: bool, gated: bool = False
) -> list[dict[str, Any]]:
    """Pure: the rules the provider needs for ``transport`` (``keyed``: it reads the SGLang API
    key from a Secret; ``staging``: it runs the stager Job and calls it through the pod proxy;
    ``gated``: the targets' pods carry the readiness gate, which a swap writes pod by pod while
    it watches the Service's EndpointSlices)."""
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": [GROUP],
            "resources": [PLURAL],
            "verbs": ["get", "list", "create", "patch", "delete"],
        },
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
        {"apiGroups": [GROUP], "resources": [ISVC_PLURAL], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    # Every transport resolves the target: its pods and the workloads that own them.
    rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]})
    rules.append(
        {"apiGroups": ["apps"], "resources": ["replicasets", "deployments"], "verbs": ["list"]}
    )
    if transport is Transport.PROXY or staging:  # staging: the stager is reached through it
        rules.append({"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get", "create"]})
    if keyed and transport is Transport.DIRECT:
        rules.append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    if staging:
        rules.append(
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]}
        )
    if gated and transport is not Transport.DELEGATED:  # delegated: the loop swaps
        rules.append({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]})
        rules.append(
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}
        )
    return rules


class Reach(NamedTuple):
    """A grant that reaches into a namespace past the CRs, and what holding it amounts to."""

    resource: str
    verbs: frozenset[str]
    amounts_to: str


#: The grants printed only as Roles of the namespaces named (docs/operations.md, "``pulumi-lora
#: rbac``", says what every grant amounts to). A ClusterRole would hold each in every namespace,
#: kube-system included.
REACHING: tuple[Reach, ...] = (
    Reach(
        "jobs",
        frozenset({"create"}),
        "runs any image as any ServiceAccount of the namespace, mounting any of its Secrets "
        "and claims",
    ),
    Reach(
        "pods/proxy",
        frozenset({"get", "create"}),
        "sends requests to any port of any pod of the namespace, through the apiserver and "
        "past NetworkPolicies",
    ),
    Reach("secrets", frozenset({"get"}), "reads any Secret of the namespace it knows the name of"),
    Reach(
        "pods/status",
        frozenset({"patch"}),
        "rewrites the status of any pod of the namespace: its conditions (whether it is Ready, "
        "so in its Services' endpoints) and its addresses",
    ),
)


def reaching(rules: Sequence[dict[str, Any]]) -> list[str]:
    """Pure: each grant of :data:`REACHING` that ``rules`` hold, as ``VERBS RESOURCE: what it
    amounts to`` (the verbs in the rules' order)."""
    found = []
    for reach in REACHING:
        verbs = [
            verb
            for rule in rules
            if reach.resource in rule["resources"]
            for verb in rule["verbs"]
            if verb in reach.verbs
        ]
        if verbs:
            found.append(f"{', '.join(dict.fromkeys(verbs))} {reach.resource}: {reach.amounts_to}")
    return found


#: What a delegated refresh reads where the re-sync loop runs: its Lease, to see it is alive.
LEASE_RULE = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}


def parse_subject(text: str) -> dict[str, str]:
    """``user:NAME``, ``group:NAME`` or ``serviceaccount:NAMESPACE/NAME`` as a binding subject
    (raises ``ValueError`` saying the forms)."""
    kind, _, rest = text.partition(":")
    if kind.lower() not in SUBJECT_KINDS or not rest:
        raise ValueError("a subject is user:NAME, group:NAME or serviceaccount:NAMESPACE/NAME")
    subject = {"kind": SUBJECT_KINDS[kind.lower()], "name": rest}
    if subject["kind"] == "ServiceAccount":
        namespace, _, name = rest.partition("/")
        if not namespace or not name:
            raise ValueError("a ServiceAccount subject is serviceaccount:NAMESPACE/NAME")
        return {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    return {**subject, "apiGroup": "rbac.authorization.k8s.io"}


def provider_rbac(
    transport: Transport,
    namespaces: Sequence[str] = (),
    *,
    keyed: bool = False,
    staging: bool = False,
    gated: bool = False,
    subject: dict[str, str] | None = None,
    name: str = DEFAULT_NAME,
    loop_namespace: str | None = None,
) -> list[dict[str, Any]]:
    """Pure: a Role (and RoleBinding for ``subject``) in each of ``namespaces`` (the CRs' and
    their targets'), or one ClusterRole (and ClusterRoleBinding) when none is given.

    No namespace with rules that reach into one (:data:`REACHING`: ``staging``, the ``proxy``
    transport, ``keyed`` ``direct``) is a ``ValueError`` naming each grant and what it amounts
    to: those are granted only where named. ``delegated`` also reads the re-sync loop's Lease:
    anywhere with a ClusterRole, else in ``loop_namespace`` (required then; a ``ValueError``
    says so)."""
    rules = provider_rules(transport, keyed=keyed, staging=staging, gated=gated)
    reaches = reaching(rules)
    if reaches and not namespaces:
        raise ValueError(
            "these grants are printed only in the namespaces you name, never as a ClusterRole "
            "(which holds them in every namespace, kube-system included):\n"
            + "".join(f"  {reach}\n" for reach in reaches)
            + "Give each namespace of the targets (the InferenceServices') and of the CRs "
            "with -n NAMESPACE (repeat)."
        )
    delegated = transport is Transport.DELEGATED
    if delegated and namespaces and not loop_namespace:
        raise ValueError(
            "the delegated transport reads the re-sync loop's Lease: give the namespace the "
            "loop runs in (--loop-namespace)"
        )
    labels = {"app.kubernetes.io/name": "pulumi-lora", "app.kubernetes.io/component": "provider"}
    rbac = "rbac.authorization.k8s.io/v1"
    if not namespaces:
        made: list[dict[str, Any]] = [
            {
                "apiVersion": rbac,
                "kind": "ClusterRole",
                "metadata": {"name": name, "labels": labels},
                "rules": [*rules, LEASE_RULE] if delegated else rules,
            }
        ]
        if subject:
            made.append(
                {
                    "apiVersion": rbac,
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": name, "labels": labels},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": name,
                    },
                    "subjects": [subject],
                }
            )
        return made
    by_namespace = {namespace: list(rules) for namespace in namespaces}
    if delegated and loop_namespace:
        by_namespace.setdefault(loop_namespace, []).append(LEASE_RULE)
    made = []
    for namespace, granted in by_namespace.items():
        meta = {"name": name, "namespace": namespace, "labels": labels}
        made.append({"apiVersion": rbac, "kind": "Role", "metadata": meta, "rules": granted})
        if subject:
            made.append(
                {
                    "apiVersion": rbac,
                    "kind": "RoleBinding",
                    "metadata": dict(meta),
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": name,
                    },
                    "subjects": [subject],
                }
            )
    return made
