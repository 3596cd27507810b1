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
from pulumi_lora._kube._source import KubeSource
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


def _served(source: KubeSource) -> tuple[str, ...] | str | None:
    """The versions of ``admissionregistration.k8s.io`` in which the cluster of ``source`` serves
    ``MutatingAdmissionPolicy``, or why it could not be asked (words), or None under Pulumi's
    mocks: a unit test of a program has no cluster of its own to ask."""
    from pulumi.runtime.mocks import MockMonitor  # noqa: PLC0415 - only with the gate
    from pulumi.runtime.settings import get_monitor  # noqa: PLC0415

    if isinstance(get_monitor(), MockMonitor):
        return None
    from pulumi_lora._kube._discovery import versions_at  # noqa: PLC0415 - only with the gate

    return versions_at(source)


def _refuse_unserved_gate(source: KubeSource) -> None:
    """Raise ``pulumi.RunError`` when the cluster of ``source`` answers that it does not serve
    ``MutatingAdmissionPolicy`` v1; warn, and go on, when it cannot be asked."""
    from pulumi_lora._kube._discovery import GATE_API, MIN_KUBERNETES, gate_refusal  # noqa: PLC0415

    served = _served(source)
    if isinstance(served, str):
        pulumi.log.warn(
            f"readiness_gate=True: could not ask the cluster whether it serves "
            f"MutatingAdmissionPolicy in {GATE_API} (Kubernetes {MIN_KUBERNETES} or later): "
            f"{served}; not checked"
        )
    elif served is not None and (refusal := gate_refusal(served)):
        raise pulumi.RunError(refusal)


def _default_cluster(
    component: pulumi.ComponentResource, unchecked: str
) -> tuple[str | None, str | None] | None:
    """The kubeconfig and context of the default kubernetes provider (``kubernetes:kubeconfig``,
    ``kubernetes:context``; None each: ``KUBECONFIG``, ``~/.kube/config``), or None, warning
    what goes ``unchecked``, when a ``kubernetes.Provider`` in ``opts`` (or a parent's) makes
    the objects: a program cannot read a provider's kubeconfig."""
    if component.get_provider("kubernetes:index:Provider") is not None:
        pulumi.log.warn(
            f"readiness_gate=True with a kubernetes.Provider in opts: {unchecked}",
            resource=component,
        )
        return None
    config = pulumi.Config("kubernetes")
    return config.get("kubeconfig"), config.get("context")


def _gate_checked(
    component: pulumi.ComponentResource, kubeconfig: pulumi.Input[str] | None
) -> pulumi.Output[None] | None:
    """Refuse ``readiness_gate=True`` on a cluster that does not serve the gate's policy
    (``MutatingAdmissionPolicy``, ``admissionregistration.k8s.io/v1``: Kubernetes 1.36 and
    later) before anything is applied: a Deployment of the loop, applied before pulumi-kubernetes
    fails on the policy's unknown kind, would leave half a loop behind.

    The program asks the cluster itself (API discovery, ``_kube._discovery``) where it knows
    the kubeconfig: ``kubeconfig=`` as a plain string is asked at once, and nothing is created
    on a refusal; ``kubeconfig=`` as an Output is asked once it resolves, and every object
    waits for the answer (the returned Output: their metadata is taken from it), so a refusal
    fails them all unmade; without either, the default provider's (``kubernetes:kubeconfig``
    and ``kubernetes:context`` stack config, else ``KUBECONFIG``, ``~/.kube/config``).

    Not refused, only warned about, when the cluster cannot be asked: under ``pulumi preview``
    the cluster may not exist yet or be out of reach (a kubeconfig Output unknown in preview is
    not asked at all), and a cluster that answers pulumi-kubernetes but not this call is the
    provider's to judge. Not asked when a ``kubernetes.Provider`` is given in ``opts`` (or
    inherited from a parent): a program cannot read a provider's kubeconfig; pass
    ``kubeconfig=`` to have it checked. Not asked under Pulumi's mocks (unit tests).
    """
    given: pulumi.Input[str] | None = kubeconfig  # as given: an Output is asked once it resolves
    if kubeconfig is None:
        default = _default_cluster(
            component,
            "whether its cluster serves MutatingAdmissionPolicy v1 (Kubernetes 1.36 or later) is "
            "not checked before the loop is applied; pass kubeconfig= instead to have it checked",
        )
        if default is not None:
            _refuse_unserved_gate(KubeSource(*default))
        return None
    if isinstance(kubeconfig, str):
        _refuse_unserved_gate(KubeSource(kubeconfig))
        return None
    return pulumi.Output.from_input(given).apply(
        lambda text: _refuse_unserved_gate(KubeSource(text))
    )


def _gate_in_force(
    component: pulumi.ComponentResource,
    resource_name: str,
    settings: dict[str, Any],
    kubeconfig: pulumi.Input[str] | None,
    *,
    policy: list[Any],
) -> Any:
    """The component's last child (``_pulumi._gate_wait``): created once the gate's policy is in
    force, so what depends on the component (the InferenceService) gets gated pods from the
    first (``policy``: the policy and its binding). Not made where the cluster is a
    ``kubernetes.Provider`` in ``opts`` (its kubeconfig cannot be read: warned) or under
    Pulumi's mocks."""
    from pulumi.runtime.mocks import MockMonitor  # noqa: PLC0415 - only with the gate
    from pulumi.runtime.settings import get_monitor  # noqa: PLC0415

    from pulumi_lora._pulumi._gate_wait import GateInForce  # noqa: PLC0415

    if isinstance(get_monitor(), MockMonitor):
        return None
    context = None
    if kubeconfig is None:
        default = _default_cluster(
            component,
            "nothing waits until the gate's policy is in force, so SGLang pods made in the same "
            "`pulumi up` may come ungated; pass kubeconfig= instead",
        )
        if default is None:
            return None
        kubeconfig, context = default
    return GateInForce(
        f"{resource_name}-gate-in-force",
        policy=str(settings.get("name", DEFAULT_NAME)),
        namespace=str(settings.get("watch_namespace") or "default"),
        kubeconfig=kubeconfig,
        context=context,
        opts=pulumi.ResourceOptions(parent=component, depends_on=policy),
    )


def _after(checked: pulumi.Output[None], value: Any) -> pulumi.Output[Any]:
    """``value`` once ``checked`` resolves (failed with it, when the check refused)."""
    return checked.apply(lambda _: value)


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
        checked = _gate_checked(self, kubeconfig) if settings.get("readiness_gate") else None
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
        for plain in manifests:
            label = f"{resource_name}-{_label(plain, name)}"
            manifest = plain
            if checked is not None:  # every object waits for the cluster's answer
                manifest = {**plain, "metadata": _after(checked, plain["metadata"])}
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
        if settings.get("readiness_gate"):
            gate = [c for c, m in zip(created, manifests, strict=True) if "Mutating" in m["kind"]]
            self.gate_in_force = _gate_in_force(
                self, resource_name, settings, kubeconfig, policy=gate
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
