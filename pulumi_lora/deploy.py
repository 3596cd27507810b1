"""Deploying the re-sync loop: plain manifests, and the same objects as a Pulumi component.

:func:`resync_manifests` renders the loop's ServiceAccount, least-privilege roles, Lease role and
Deployment as plain dicts (and, on request, the LLMKube coexistence policy, the admission
policies and the monitoring objects); :class:`ResyncDeployment` creates the very same objects
with pulumi-kubernetes (``pip install pulumi-lora[kubernetes]``), imported only when built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pulumi

from pulumi_lora._kube._admission import ACCEPT_FOREIGN_ADAPTERS_LABEL, SERVICE_LABEL
from pulumi_lora._models import LLMKUBE_CONTROLLER_USER
from pulumi_lora._resync._manifests import (
    DEFAULT_NAME,
    GATE_RULE,
    LEASE_RULES,
    RELEASE_RULE,
    SECRET_RULE,
    WATCH_RULES,
    admission_policies,
    alert_rules,
    coexistence_policy,
    grafana_dashboard,
    lease_rules,
    monitoring_manifests,
    resync_manifests,
)

__all__ = [
    "ACCEPT_FOREIGN_ADAPTERS_LABEL",
    "DEFAULT_NAME",
    "GATE_RULE",
    "LEASE_RULES",
    "LLMKUBE_CONTROLLER_USER",
    "RELEASE_RULE",
    "SECRET_RULE",
    "SERVICE_LABEL",
    "WATCH_RULES",
    "ResyncDeployment",
    "admission_policies",
    "alert_rules",
    "coexistence_policy",
    "grafana_dashboard",
    "lease_rules",
    "monitoring_manifests",
    "resync_manifests",
]


# --- the Pulumi component -----------------------------------------------------------------------

RESOURCE_TYPE = "pulumi-lora:index:ResyncDeployment"
"""The component's type token."""

_KINDS = {
    "ServiceAccount": ("core", "ServiceAccount"),
    "ClusterRole": ("rbac", "ClusterRole"),
    "ClusterRoleBinding": ("rbac", "ClusterRoleBinding"),
    "Role": ("rbac", "Role"),
    "RoleBinding": ("rbac", "RoleBinding"),
    "Deployment": ("apps", "Deployment"),
    "ValidatingAdmissionPolicy": ("admissionregistration", "ValidatingAdmissionPolicy"),
    "ValidatingAdmissionPolicyBinding": (
        "admissionregistration",
        "ValidatingAdmissionPolicyBinding",
    ),
    "ConfigMap": ("core", "ConfigMap"),
}
#: Kinds created as ``apiextensions.CustomResource`` (any kind at its apiVersion): the Prometheus
#: Operator's, and the readiness gate's MutatingAdmissionPolicy and binding, which
#: pulumi-kubernetes 4.25 has at ``admissionregistration.k8s.io/v1alpha1`` only (1.36 serves v1).
_CUSTOM_KINDS = (
    "PodMonitor",
    "PrometheusRule",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)
#: Created after the loop's Deployment, and so deleted before it on ``destroy``: no pod is ever
#: gated while no loop runs to write its gate.
_AFTER_THE_LOOP = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")


def _label(manifest: Mapping[str, Any], name: str) -> str:
    """A Pulumi name suffix, unique within the set (two Roles when namespaced: watch, lease;
    a Role per namespace of ``secret_namespaces``, by its namespace; three policies and
    bindings, by what follows ``name`` in theirs)."""
    kind, meta = str(manifest["kind"]).lower(), manifest["metadata"]
    object_name = str(meta["name"])
    if kind.startswith("mutatingadmissionpolicy"):
        return kind
    if kind.startswith("validatingadmissionpolicy"):
        return kind + "-" + object_name.removeprefix(name + "-")
    if kind == "configmap":
        return "dashboard"
    if object_name == f"{name}-secrets":
        return f"{kind}-secrets-{meta['namespace']}"
    return kind + ("-lease" if object_name == f"{name}-lease" else "")


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


class ResyncDeployment(pulumi.ComponentResource):
    """The re-sync loop in a cluster, as one Pulumi component (the objects of
    :func:`resync_manifests`, created with pulumi-kubernetes).

    Takes the same keyword arguments as :func:`resync_manifests` (``secret_namespaces``: the
    namespaces of keyed SGLang servers, the only ones where the loop reads Secrets when it
    watches every namespace); ``opts`` are the component's
    resource options (e.g. ``provider=`` a ``kubernetes.Provider``). ``kubeconfig`` (content or
    path; ``cluster.kubeconfig`` is fine, kept secret) makes the objects through a
    ``kubernetes.Provider`` of that cluster instead: one or the other, not both. Outputs:
    ``service_account``, ``deployment`` (names) and ``namespace``.
    """

    def __init__(
        self,
        resource_name: str,
        *,
        namespace: str,
        image: str,
        kubeconfig: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
        **settings: Any,
    ) -> None:
        try:
            import pulumi_kubernetes as kubernetes  # noqa: PLC0415 - an optional extra
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "ResyncDeployment needs pulumi-kubernetes: pip install 'pulumi-lora[kubernetes]'"
            ) from exc
        if kubeconfig is not None and opts is not None and (opts.provider or opts.providers):
            raise ValueError(
                "ResyncDeployment takes kubeconfig or a provider in opts, not both: the "
                "kubeconfig makes the objects' kubernetes.Provider"
            )
        super().__init__(RESOURCE_TYPE, resource_name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if kubeconfig is not None:
            cluster = kubernetes.Provider(
                f"{resource_name}-cluster",
                kubeconfig=pulumi.Output.secret(kubeconfig),
                opts=pulumi.ResourceOptions(parent=self),
            )
            child = pulumi.ResourceOptions(parent=self, provider=cluster)
        manifests = resync_manifests(namespace, image, **settings)
        name = str(settings.get("name", DEFAULT_NAME))
        created: list[Any] = []
        for manifest in manifests:
            label = f"{resource_name}-{_label(manifest, name)}"
            if manifest["kind"] in _CUSTOM_KINDS:
                loop = [
                    c for c, m in zip(created, manifests, strict=False) if m["kind"] == "Deployment"
                ]
                after_loop = loop if manifest["kind"] in _AFTER_THE_LOOP else []
                created.append(
                    kubernetes.apiextensions.CustomResource(
                        label,
                        api_version=manifest["apiVersion"],
                        kind=manifest["kind"],
                        metadata=manifest["metadata"],
                        spec=manifest["spec"],
                        opts=pulumi.ResourceOptions.merge(
                            child, pulumi.ResourceOptions(depends_on=after_loop)
                        ),
                    )
                )
                continue
            group, kind = _KINDS[manifest["kind"]]
            api = getattr(getattr(kubernetes, group), manifest["apiVersion"].rsplit("/", 1)[-1])
            args = {_snake(k): v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
            # The Deployment waits for its account, permissions and the coexistence policy.
            after = list(created) if kind == "Deployment" else []
            created.append(
                getattr(api, kind)(
                    label,
                    **args,
                    opts=pulumi.ResourceOptions.merge(
                        child, pulumi.ResourceOptions(depends_on=after)
                    ),
                )
            )
        self.manifests = manifests
        self.children = created
        # From the objects themselves, so they resolve once the objects exist.
        made = {m["kind"]: c for c, m in zip(created, manifests, strict=True)}
        self.service_account = made["ServiceAccount"].metadata.apply(lambda m: m["name"])
        self.deployment = made["Deployment"].metadata.apply(lambda m: m["name"])
        self.namespace = pulumi.Output.from_input(namespace)
        self.register_outputs(
            {
                "service_account": self.service_account,
                "deployment": self.deployment,
                "namespace": self.namespace,
            }
        )
