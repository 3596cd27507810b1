"""The re-sync loop's objects as plain manifests: its identity, least-privilege roles, Deployment.

Every rule in :data:`WATCH_RULES`, :data:`SECRET_RULE` and :data:`LEASE_RULES` is one the loop
uses, and nothing else is granted (``tests/resync/test_rbac.py`` shows both directions against a
real apiserver). :data:`SECRET_RULE` is granted only in Roles of the namespaces named, never in
the ClusterRole, which would hold it in every namespace, kube-system included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_lora import _monitoring
from pulumi_lora._kube import _admission
from pulumi_lora._kube._gate_policy import DRAIN_ON_STOP_SECONDS, readiness_gate_policy
from pulumi_lora._models import (
    DNS_LABEL_PATTERN,
    GROUP,
    ISVC_PLURAL,
    LLMKUBE_CONTROLLER_USER,
    PLURAL,
)
from pulumi_lora._resync._settings import DEFAULT_LEASE_NAME, DEFAULT_METRICS_PORT

DEFAULT_NAME = "pulumi-lora-resync"
"""Name of the ServiceAccount, roles, bindings and Deployment."""


WATCH_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
    {"apiGroups": [GROUP], "resources": [ISVC_PLURAL], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {
        "apiGroups": ["apps"],
        "resources": ["replicasets", "deployments"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
)
"""What the loop does where it watches: follow CRs, InferenceServices, pods and the ReplicaSets
and Deployments of the pods' controller chain; write CR status (server-side apply); record
Events. Nothing here reaches past the CRs' business: Secrets are :data:`SECRET_RULE`'s."""


SECRET_RULE: dict[str, Any] = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
"""Reading the API-key Secrets CRs name (``pulumi-lora.dev/api-key-secret``, in the
InferenceService's namespace). It reads any Secret of the namespace whose name is known, so it is
granted only in a Role of each namespace named: ``watch_namespace``'s, or each of
``secret_namespaces`` (a Role ``{name}-secrets`` there); never in the ClusterRole."""


RELEASE_RULE: dict[str, Any] = {
    "apiGroups": [GROUP],
    "resources": [PLURAL],
    "verbs": ["get", "patch"],
}
"""With the LLMKube coexistence policy: remove LLMKube's finalizer from the CRs the loop serves
(``--release-llmkube-finalizer``: read the CR, a JSON patch of ``metadata.finalizers`` that tests
the entry first, a read 5 s later to see whether it came back); and pulumi-lora's own finalizer
from a CR a failed delete left held, once the loop unloaded it everywhere (docs/protocol.md rule
4; without this rule ``pulumi-lora finish-delete`` does it)."""


GATE_RULE: dict[str, Any] = {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}
"""With the readiness gate (``readiness_gate=True``): write the ``pulumi-lora.dev/adapters-loaded``
condition of the pods it serves (a strategic merge patch of ``pods/status``). The verb reaches
every field of a pod's status in the namespaces the loop watches (see docs/threat-model.md)."""


SLICE_RULE: dict[str, Any] = {
    "apiGroups": ["discovery.k8s.io"],
    "resources": ["endpointslices"],
    "verbs": ["list"],
}
"""With the readiness gate: see which pods their Services send requests to (a swap on a gated
pod waits for it to leave, and rejoin, the Service's EndpointSlices)."""


_LEASE_GROUP = "coordination.k8s.io"


def lease_rules(lease_name: str = DEFAULT_LEASE_NAME) -> tuple[dict[str, Any], ...]:
    """Leader election, in the loop's own namespace: create the Lease (``create`` can't be
    narrowed by name), and read and renew that one Lease only."""
    return (
        {"apiGroups": [_LEASE_GROUP], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": [_LEASE_GROUP],
            "resources": ["leases"],
            "resourceNames": [lease_name],
            "verbs": ["get", "update"],
        },
    )


LEASE_RULES = lease_rules()
""":func:`lease_rules` for the default Lease name."""


def admission_policies(
    name: str = DEFAULT_NAME,
    *,
    workload_creators: Sequence[str] = (),
    namespace_selector: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Pure: three ValidatingAdmissionPolicies and their bindings (``Deny``), named
    ``{name}-adapter-targets``, ``{name}-service-label`` and ``{name}-adapter-annotations``:
    a LoRAAdapter targets another namespace only if that namespace is labelled
    :data:`ACCEPT_FOREIGN_ADAPTERS_LABEL` ``=true``; a pod carrying :data:`SERVICE_LABEL` is
    controlled by an ``apps/v1`` ReplicaSet (and, with ``workload_creators``, only those users
    create such a pod or set the label); a LoRAAdapter's ``pulumi-lora.dev/`` annotations hold
    only the protocol's keys and values. ``namespace_selector`` limits the bindings to the
    request namespaces it selects. Details: `pulumi_lora._kube._admission.admission_policies`.
    """
    return _admission.admission_policies(
        name, workload_creators=workload_creators, namespace_selector=namespace_selector
    )


_admission_policies = admission_policies  # the keyword of resync_manifests shadows the name


def coexistence_policy(
    name: str = DEFAULT_NAME,
    *,
    llmkube_user: str = LLMKUBE_CONTROLLER_USER,
    managed_only: bool = True,
    namespace_selector: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Pure: the ValidatingAdmissionPolicy (and binding) ``{name}-llmkube-coexistence`` that holds
    LLMKube's own LoRA controller off the LoRAAdapters pulumi-lora serves: it may neither add its
    finalizer to them nor write their status, so it never loads them through the Service.

    ``llmkube_user`` is the user LLMKube's controller manager acts as (its ServiceAccount; the
    default is LLMKube's kustomize and Helm install). ``managed_only`` covers only the CRs the
    provider made (annotation ``pulumi-lora.dev/managed-by``); ``False`` covers every LoRAAdapter
    in the namespaces ``namespace_selector`` selects. Apply it alone where the provider runs
    without the re-sync loop (``resync_manifests`` renders it by default). Details:
    `pulumi_lora._kube._admission.coexistence_policy`; why: docs/protocol.md.
    """
    return _admission.coexistence_policy(
        name,
        llmkube_user=llmkube_user,
        managed_only=managed_only,
        namespace_selector=namespace_selector,
    )


def alert_rules() -> dict[str, Any]:
    """The loop's Prometheus alerting rules, as a rule file (``{"groups": [...]}``): for a
    Prometheus without the Operator (``rule_files``). Runbooks: docs/operations.md."""
    return _monitoring.alert_rules()


def grafana_dashboard() -> dict[str, Any]:
    """The loop's Grafana dashboard (JSON model, importable; datasource chosen on import)."""
    return _monitoring.dashboard()


def monitoring_manifests(
    namespace: str,
    name: str = DEFAULT_NAME,
    *,
    labels: Mapping[str, str] | None = None,
    interval: str = "15s",
    dashboard_labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The loop's PodMonitor, PrometheusRule (:func:`alert_rules`) and a ConfigMap holding
    :func:`grafana_dashboard` (labelled ``grafana_dashboard: "1"`` for Grafana's sidecar, or
    ``dashboard_labels``), in ``namespace``. ``labels`` are added to all three: what your
    Prometheus's ``podMonitorSelector`` and ``ruleSelector`` ask for, e.g.
    ``{"release": "kube-prometheus-stack"}``. Needs the Prometheus Operator's CRDs
    (``monitoring.coreos.com/v1``)."""
    selector = {"app.kubernetes.io/name": "pulumi-lora-resync", "app.kubernetes.io/instance": name}
    return _monitoring.monitoring_manifests(
        namespace,
        name,
        selector,
        {**selector, "app.kubernetes.io/component": "monitoring", **(labels or {})},
        interval=interval,
        dashboard_labels=dashboard_labels,
    )


def secret_reach(secret_namespaces: Sequence[str], watch_namespace: str | None) -> list[str]:
    """Pure: the namespaces that get a Role of their own with :data:`SECRET_RULE` (each once, in
    the order given); none with ``watch_namespace``, whose Role holds the rule already.

    A ``ValueError`` says why for a single string (a sequence of namespaces is wanted), a name
    that is no namespace name, or, with ``watch_namespace``, a namespace other than it."""
    if isinstance(secret_namespaces, str):
        raise ValueError(
            f"secret_namespaces is a list of namespaces, not one string: [{secret_namespaces!r}]"
        )
    named = list(dict.fromkeys(secret_namespaces))
    wrong = [n for n in named if len(n) > 63 or not re.fullmatch(DNS_LABEL_PATTERN, n)]
    if wrong:
        raise ValueError(f"secret_namespaces: not namespace names: {wrong}")
    if watch_namespace is None:
        return named
    beyond = [n for n in named if n != watch_namespace]
    if beyond:
        raise ValueError(
            f"secret_namespaces {beyond}: the loop watches {watch_namespace!r} only "
            f"(watch_namespace), and reads Secrets there already; it never reads one elsewhere"
        )
    return []


def _namespaced_grant(
    name: str, meta: dict[str, Any], rules: list[dict[str, Any]], subjects: list[dict[str, str]]
) -> list[dict[str, Any]]:
    """A Role ``name`` with ``rules`` and its RoleBinding to ``subjects``, in ``meta``'s
    namespace."""
    rbac = "rbac.authorization.k8s.io/v1"

    def metadata() -> dict[str, Any]:  # one each: no YAML anchors when printed
        return {**meta, "name": name, "labels": dict(meta.get("labels") or {})}

    return [
        {"apiVersion": rbac, "kind": "Role", "metadata": metadata(), "rules": rules},
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": metadata(),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        },
    ]


def resync_manifests(
    namespace: str,
    image: str,
    *,
    name: str = DEFAULT_NAME,
    watch_namespace: str | None = None,
    secret_namespaces: Sequence[str] = (),
    replicas: int = 1,
    verify_interval: float = 30.0,
    metrics_port: int = DEFAULT_METRICS_PORT,
    lease_name: str = DEFAULT_LEASE_NAME,
    extra_args: Sequence[str] = (),
    image_pull_policy: str = "IfNotPresent",
    resources: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    admission_policies: bool = False,
    workload_creators: Sequence[str] = (),
    admission_namespace_selector: Mapping[str, Any] | None = None,
    llmkube_coexistence: bool = True,
    llmkube_user: str = LLMKUBE_CONTROLLER_USER,
    monitoring: bool = False,
    monitoring_labels: Mapping[str, str] | None = None,
    readiness_gate: bool = False,
    drain_on_stop_seconds: int | None = None,
) -> list[dict[str, Any]]:
    """Pure: the loop's manifests, in apply order.

    ``namespace`` is where the loop runs (its ServiceAccount, Lease and Deployment);
    ``watch_namespace`` limits it to one namespace (a Role there instead of a ClusterRole, with
    ``get`` on its Secrets). Watching every namespace, the loop reads Secrets only in
    ``secret_namespaces``: a Role ``{name}-secrets`` with ``get`` on ``secrets`` (and its
    RoleBinding) in each, never a ClusterRole; name there every namespace of an InferenceService
    whose CRs name an API-key Secret (keyed SGLang servers, ``api_key_secret_name``). None named
    is no Secret at all: such a CR is reported ``ApiKeySecretUnavailable``, saying what to set.
    With ``watch_namespace``, ``secret_namespaces`` may name that namespace only (a
    ``ValueError`` otherwise: the loop acts there only).
    ``replicas`` above 1 gives standbys (one leader acts; failover takes at most the Lease
    duration, immediately on a clean shutdown). ``extra_args`` are appended to the command.
    ``admission_policies=True`` appends :func:`admission_policies` (named after ``name``, with
    ``workload_creators`` and ``admission_namespace_selector`` as its ``workload_creators`` and
    ``namespace_selector``).

    ``llmkube_coexistence`` (on by default) appends :func:`coexistence_policy` for every
    LoRAAdapter the loop watches (``llmkube_user`` is LLMKube's controller identity) and runs
    the loop with ``--release-llmkube-finalizer``: the policy keeps LLMKube's LoRA controller
    from adding its finalizer and writing status, and the loop takes over CRs that carried the
    finalizer from before the policy. Turn it off only where LLMKube is not installed.

    ``monitoring=True`` (opt-in: it needs the Prometheus Operator's CRDs) appends
    :func:`monitoring_manifests` in ``namespace`` with ``monitoring_labels``.

    ``readiness_gate=True`` (Kubernetes 1.36 and later) appends, after the Deployment, the
    ``MutatingAdmissionPolicy`` and binding (named after ``name``) that give new SGLang pods of
    InferenceServices in ``watch_namespace`` (every namespace, unscoped) the readiness gate
    ``pulumi-lora.dev/adapters-loaded``, and grants the loop :data:`GATE_RULE` to write it.
    The policy also gives their ``sglang`` container a ``preStop`` sleep of
    ``drain_on_stop_seconds`` (5 unless given; 0: none), so a deleted pod keeps answering while
    kube-proxy and gateways take it out of rotation: raise it behind a slower gateway. Given
    without ``readiness_gate=True``, or outside 0 to 300, it is a ``ValueError``.
    """
    if drain_on_stop_seconds is not None and not readiness_gate:
        raise ValueError(
            "drain_on_stop_seconds is the readiness gate's: it needs readiness_gate=True"
        )
    drain = DRAIN_ON_STOP_SECONDS if drain_on_stop_seconds is None else drain_on_stop_seconds
    meta_labels = {
        "app.kubernetes.io/name": "pulumi-lora-resync",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "controller",
        **(labels or {}),
    }
    selector = {"app.kubernetes.io/name": "pulumi-lora-resync", "app.kubernetes.io/instance": name}

    def meta(obj_namespace: str | None = namespace) -> dict[str, Any]:
        data: dict[str, Any] = {"name": name, "labels": dict(meta_labels)}
        if obj_namespace is not None:
            data["namespace"] = obj_namespace
        return data

    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    readable = secret_reach(secret_namespaces, watch_namespace)
    rules = [dict(r) for r in WATCH_RULES]
    if watch_namespace is not None:
        rules.append(dict(SECRET_RULE))
    rules += [dict(RELEASE_RULE)] if llmkube_coexistence else []
    rules += [dict(GATE_RULE), dict(SLICE_RULE)] if readiness_gate else []
    if watch_namespace is None:
        watch_role: dict[str, Any] = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta(None),
            "rules": rules,
        }
        watch_binding: dict[str, Any] = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(None),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": subject,
        }
    else:
        watch_role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(watch_namespace),
            "rules": rules,
        }
        watch_binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(watch_namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subject,
        }
    secret_grants = [
        grant
        for where in readable
        for grant in _namespaced_grant(f"{name}-secrets", meta(where), [dict(SECRET_RULE)], subject)
    ]
    lease_name_ = f"{name}-lease"
    lease_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {**meta(), "name": lease_name_},
        "rules": [dict(r) for r in lease_rules(lease_name)],
    }
    lease_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {**meta(), "name": lease_name_},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": lease_name_},
        "subjects": subject,
    }
    args = [
        "--lease-name",
        lease_name,
        "--metrics-port",
        str(metrics_port),
        "--verify-interval",
        f"{verify_interval:g}",
    ]
    if watch_namespace is not None:
        args += ["--namespace", watch_namespace]
    if llmkube_coexistence:
        args.append("--release-llmkube-finalizer")
    args += list(extra_args)
    probe = {"port": "metrics", "scheme": "HTTP"}
    container = {
        "name": "resync",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["pulumi-lora", "resync"],
        "args": args,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
        ],
        "ports": [{"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"}],
        "livenessProbe": {
            "httpGet": {**probe, "path": "/healthz"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {**probe, "path": "/readyz"},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        "resources": dict(
            resources
            or {
                "requests": {"cpu": "50m", "memory": "128Mi"},
                "limits": {"memory": "256Mi"},
            }
        ),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {
                    "labels": dict(meta_labels),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(metrics_port),
                    },
                },
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                },
            },
        },
    }
    service_account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta()}
    policies = (
        _admission_policies(
            name,
            workload_creators=workload_creators,
            namespace_selector=admission_namespace_selector,
        )
        if admission_policies
        else []
    )
    coexistence: list[dict[str, Any]] = []
    if llmkube_coexistence:
        scope = (
            {"matchLabels": {"kubernetes.io/metadata.name": watch_namespace}}
            if watch_namespace is not None
            else None
        )
        coexistence = coexistence_policy(
            name, llmkube_user=llmkube_user, managed_only=False, namespace_selector=scope
        )
    # The coexistence policy first: in force before the loop starts taking CRs over.
    return [
        *coexistence,
        service_account,
        watch_role,
        watch_binding,
        *secret_grants,
        lease_role,
        lease_binding,
        deployment,
        *(
            readiness_gate_policy(
                name, [watch_namespace] if watch_namespace else [], drain_on_stop_seconds=drain
            )
            if readiness_gate
            else []
        ),
        *policies,
        *(monitoring_manifests(namespace, name, labels=monitoring_labels) if monitoring else []),
    ]
