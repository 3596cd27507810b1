"""Who each part of a testbed acts as, and the RBAC that lets it.

Every part has its own identity, as in a cluster, so the apiserver's audit log and admission
policies see who did what: kube-controller-manager (:data:`KCM_USER`, and each controller as its
own ServiceAccount, e.g. :data:`CONTROLLER_USER` creates the pods), the scheduler's bind
(:data:`SCHEDULER_USER`), the kubelet (:data:`KUBELET_USER`, group ``system:nodes``) and LLMKube's
played operator (:data:`OPERATOR_USER`). The first three need nothing beyond the apiserver's
bootstrap RBAC except the node's binding; the operator gets a role of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_lora.testing.testbed._certs import StaticToken
from pulumi_lora.testing.testbed._controller_manager import KCM_USER, REPLICASET_CONTROLLER_USER
from pulumi_lora.testing.testbed._played import OPERATOR_USER
from pulumi_lora.testing.testbed._rest import KubeRest, grant_cluster_role
from pulumi_lora.testing.testbed._scheduler import SCHEDULER_USER
from pulumi_lora.testing.testbed._workloads import NODE_NAME

__all__ = [
    "CONTROLLER_USER",
    "KUBELET_USER",
    "OPERATOR_ROLE",
    "OPERATOR_USER",
    "PLAYER_USERS",
    "SCHEDULER_USER",
    "grant_players",
    "player_tokens",
]

CONTROLLER_USER = REPLICASET_CONTROLLER_USER
"""Who creates the pods of every Deployment: kube-controller-manager's ReplicaSet controller,
under its own ServiceAccount (``system:serviceaccount:kube-system:replicaset-controller``).

What admission policies' ``workload_creators`` name to tell its pods from anyone else's.
"""

KUBELET_USER = f"system:node:{NODE_NAME}"
"""Who the played kubelet acts as (group ``system:nodes``, ClusterRole ``system:node``)."""

OPERATOR_ROLE = "testbed:llmkube-operator"
"""ClusterRole (and binding) granting :data:`OPERATOR_USER` what the played operator reads and
writes."""

_OPERATOR_RULES = [
    {
        "apiGroups": ["inference.llmkube.dev"],
        "resources": ["inferenceservices"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["inference.llmkube.dev"],
        "resources": ["inferenceservices/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    {
        "apiGroups": [""],
        "resources": ["services"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    # The testbed's own bookkeeping (which pod serves which InferenceService) reads the chain.
    {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]

PLAYER_USERS = (KCM_USER, OPERATOR_USER, SCHEDULER_USER, KUBELET_USER)
"""The users the testbed's parts sign in as with static tokens."""


def player_tokens(tokens: Mapping[str, str]) -> list[StaticToken]:
    """The token file's lines for the parts (user → token); the kubelet in ``system:nodes``."""
    return [
        StaticToken(token, user, groups=("system:nodes",) if user == KUBELET_USER else ())
        for user, token in tokens.items()
    ]


def grant_players(rest: KubeRest, field_manager: str) -> None:
    """The operator's own role, and the node's ClusterRole ``system:node`` bound to
    :data:`KUBELET_USER` (kube-controller-manager and the scheduler's bind need nothing beyond
    the apiserver's bootstrap policy)."""
    operator = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}
    grant_cluster_role(rest, OPERATOR_ROLE, _OPERATOR_RULES, operator, field_manager)
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "testbed:node"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:node",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_USER}
        ],
    }
    rest.apply(f"{rbac}/clusterrolebindings/testbed:node", binding, field_manager)
