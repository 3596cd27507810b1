"""ValidatingAdmissionPolicies that close what RBAC cannot say about pulumi-lora's objects.

Pure: plain dicts, rendered by ``pulumi_lora.deploy.admission_policies``. docs/threat-model.md
says what each policy closes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_lora._core._llmkube import SERVICE_LABEL
from pulumi_lora._models import (
    ANNOTATION_API_KEY_SECRET,
    ANNOTATION_DRAIN_SECONDS,
    ANNOTATION_MANAGED_BY,
    ANNOTATION_MAX_UNAVAILABLE,
    ANNOTATION_OPERATION,
    ANNOTATION_PINNED,
    ANNOTATION_POLICY,
    ANNOTATION_PREFIX,
    ANNOTATION_SMOKE_TEST,
    ANNOTATION_SOURCE,
    ANNOTATION_TRANSPORT,
    GROUP,
    LLMKUBE_CONTROLLER_USER,
    LLMKUBE_FINALIZER,
    PLURAL,
    Policy,
    Transport,
)

__all__ = [
    "ACCEPT_FOREIGN_ADAPTERS_LABEL",
    "COEXISTENCE_SUFFIX",
    "SERVICE_LABEL",
    "admission_policies",
    "coexistence_policy",
]

ACCEPT_FOREIGN_ADAPTERS_LABEL = "pulumi-lora.dev/accept-foreign-adapters"
"""A namespace labelled with this key and ``"true"`` accepts LoRAAdapters from other namespaces
targeting its InferenceServices (under :func:`admission_policies`)."""

_VAP = "admissionregistration.k8s.io/v1"
_ADAPTER_RULE = {
    "apiGroups": [GROUP],
    "apiVersions": ["*"],
    "operations": ["CREATE", "UPDATE"],
    "resources": [PLURAL],
}
#: DNS-1123 subdomain "/" a Secret key, as ``AdapterArgs`` builds the api-key-secret annotation.
_SECRET_REF = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-._a-zA-Z0-9]+$"  # noqa: S105
#: ``update@`` or ``delete@`` and a ``metav1.Time`` (second precision, UTC), as the provider writes.
_OPERATION = r"^(update|delete)@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"
#: A swap's pace (``max-unavailable``, ``drain-seconds``), as ``AdapterArgs.annotations`` writes it.
_PODS = r"^([1-9][0-9]{0,2}|1000)$"  # 1 to MOST_UNAVAILABLE
_SECONDS = r"^[0-9]{1,3}(\\.[0-9]+)?$"


def _cel(values: Sequence[str]) -> str:
    """A CEL list literal of strings."""
    return (
        "["
        + ", ".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values)
        + "]"
    )


def _annotation_rules() -> list[dict[str, Any]]:
    """One validation per protocol annotation (docs/protocol.md), plus one for unknown keys."""
    notes = "variables.notes"
    known = [
        ANNOTATION_MANAGED_BY,
        ANNOTATION_PINNED,
        ANNOTATION_TRANSPORT,
        ANNOTATION_POLICY,
        ANNOTATION_API_KEY_SECRET,
        ANNOTATION_OPERATION,
        ANNOTATION_SMOKE_TEST,
        ANNOTATION_SOURCE,  # a staged adapter's source URI (no credential: check refuses one)
        ANNOTATION_MAX_UNAVAILABLE,
        ANNOTATION_DRAIN_SECONDS,
    ]
    allowed = {
        ANNOTATION_MANAGED_BY: ["pulumi"],
        ANNOTATION_PINNED: ["true", "false"],
        ANNOTATION_TRANSPORT: [t.value for t in Transport],
        ANNOTATION_POLICY: [p.value for p in Policy],
        ANNOTATION_SMOKE_TEST: ["true", "false"],
    }
    rules: list[dict[str, Any]] = [
        {
            "expression": (
                f"{notes}.all(k, !k.startsWith('{ANNOTATION_PREFIX}') || k in {_cel(known)})"
            ),
            "messageExpression": (
                f"'unknown annotation under {ANNOTATION_PREFIX}: ' + {notes}.filter(k, "
                f"k.startsWith('{ANNOTATION_PREFIX}') && !(k in {_cel(known)}))[0] + "
                f"' (the protocol defines {', '.join(known)})'"
            ),
            "reason": "Invalid",
        }
    ]
    for key, values in allowed.items():
        rules.append(
            {
                "expression": f"!('{key}' in {notes}) || {notes}['{key}'] in {_cel(values)}",
                "message": f"annotation {key} must be one of {', '.join(values)}",
                "reason": "Invalid",
            }
        )
    for key, pattern, limit, what in (
        (ANNOTATION_API_KEY_SECRET, _SECRET_REF, 507, "SECRET-NAME/KEY"),
        (ANNOTATION_OPERATION, _OPERATION, 40, "update@<RFC3339 UTC> or delete@<RFC3339 UTC>"),
        (ANNOTATION_MAX_UNAVAILABLE, _PODS, 4, "a whole number of pods, 1 to 1000"),
        (ANNOTATION_DRAIN_SECONDS, _SECONDS, 20, "seconds, 0 to 600"),
    ):
        rules.append(
            {
                "expression": (
                    f"!('{key}' in {notes}) || (size({notes}['{key}']) <= {limit} && "
                    f"{notes}['{key}'].matches('{pattern}'))"
                ),
                "message": f"annotation {key} must be {what}",
                "reason": "Invalid",
            }
        )
    return rules


def admission_policies(
    name: str,
    *,
    workload_creators: Sequence[str] = (),
    namespace_selector: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Pure: three ValidatingAdmissionPolicies and their bindings (``Deny``), named
    ``{name}-adapter-targets``, ``{name}-service-label`` and ``{name}-adapter-annotations``.

    - **adapter-targets**: a LoRAAdapter may name an InferenceService in another namespace
      (``spec.inferenceServiceRef.namespace``) only if that namespace is labelled
      :data:`ACCEPT_FOREIGN_ADAPTERS_LABEL` ``=true``. Admission sees the request's namespace,
      not the target's, so the policy takes Namespaces as params: its binding selects every
      namespace *without* the label, and the CR passes only if its target is none of them (the
      apiserver ANDs the results over the selected params; none selected: allowed).
    - **service-label**: a pod carrying :data:`SERVICE_LABEL` must be controlled by an
      ``apps/v1`` ReplicaSet (the first link of an InferenceService's Deployment → ReplicaSet →
      Pod chain; admission sees only the pod's own ownerReferences). With ``workload_creators``
      (user names, e.g. ``system:serviceaccount:kube-system:replicaset-controller``), only they
      may create such a pod or set or change the label on one.
    - **adapter-annotations**: a LoRAAdapter's annotations under ``pulumi-lora.dev/`` are only
      the protocol's keys, each with a value it defines (docs/protocol.md).

    ``namespace_selector`` limits the bindings to the namespaces it selects (of the request:
    the CR's or the pod's); default every namespace.
    """
    selector = dict(namespace_selector or {})

    def policy(suffix: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": _VAP,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": f"{name}-{suffix}"},
            "spec": {"failurePolicy": "Fail", **spec},
        }

    def binding(suffix: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "policyName": f"{name}-{suffix}",
            "validationActions": ["Deny"],
            **(extra or {}),
        }
        if selector:
            spec["matchResources"] = {"namespaceSelector": selector}
        return {
            "apiVersion": _VAP,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"{name}-{suffix}"},
            "spec": spec,
        }

    ref = "object.spec.inferenceServiceRef"
    targets = policy(
        "adapter-targets",
        {
            "paramKind": {"apiVersion": "v1", "kind": "Namespace"},
            "matchConstraints": {"resourceRules": [_ADAPTER_RULE]},
            "variables": [
                {
                    "name": "target",
                    "expression": (
                        f"has({ref}.namespace) && {ref}.namespace != null && "
                        f"{ref}.namespace != '' ? {ref}.namespace : request.namespace"
                    ),
                }
            ],
            "validations": [
                {
                    "expression": (
                        "variables.target == request.namespace || "
                        "variables.target != params.metadata.name"
                    ),
                    "messageExpression": (
                        "'LoRAAdapter ' + request.namespace + '/' + request.name + ' targets an "
                        "InferenceService in namespace ' + variables.target + ', which does not "
                        f"accept adapters from other namespaces (label it "
                        f"{ACCEPT_FOREIGN_ADAPTERS_LABEL}=true to allow it)'"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    )
    targets_binding = binding(
        "adapter-targets",
        {
            "paramRef": {
                "selector": {
                    "matchExpressions": [
                        {
                            "key": ACCEPT_FOREIGN_ADAPTERS_LABEL,
                            "operator": "NotIn",
                            "values": ["true"],
                        }
                    ]
                },
                "parameterNotFoundAction": "Allow",
            }
        },
    )
    label = f"object.metadata.labels['{SERVICE_LABEL}']"
    label_checks: list[dict[str, Any]] = [
        {
            "expression": (
                "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists("
                "r, has(r.controller) && r.controller && r.apiVersion == 'apps/v1' && "
                "r.kind == 'ReplicaSet')"
            ),
            "message": (
                f"a pod carrying the label {SERVICE_LABEL} must be controlled by an apps/v1 "
                "ReplicaSet (an InferenceService's workload)"
            ),
            "reason": "Forbidden",
        }
    ]
    if workload_creators:
        label_checks.append(
            {
                "expression": (
                    f"!variables.labelSet || request.userInfo.username in {_cel(workload_creators)}"
                ),
                "messageExpression": (
                    "'user ' + request.userInfo.username + ' may not create a pod carrying, or "
                    f"set, the label {SERVICE_LABEL} (allowed: {', '.join(workload_creators)})'"
                ),
                "reason": "Forbidden",
            }
        )
    service_label = policy(
        "service-label",
        {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "carries-the-service-label",
                    "expression": (
                        "has(object.metadata.labels) && "
                        f"'{SERVICE_LABEL}' in object.metadata.labels"
                    ),
                }
            ],
            "variables": [
                {
                    "name": "labelSet",
                    "expression": (
                        "request.operation == 'CREATE' || !has(oldObject.metadata.labels) || "
                        f"!('{SERVICE_LABEL}' in oldObject.metadata.labels) || "
                        f"oldObject.metadata.labels['{SERVICE_LABEL}'] != {label}"
                    ),
                }
            ],
            "validations": label_checks,
        },
    )
    annotations = policy(
        "adapter-annotations",
        {
            "matchConstraints": {"resourceRules": [_ADAPTER_RULE]},
            "variables": [
                {
                    # A one-entry map of the same type when there are none: an empty CEL map
                    # literal has no element type to check the expressions against.
                    "name": "notes",
                    "expression": (
                        "has(object.metadata.annotations) ? object.metadata.annotations : {'': ''}"
                    ),
                }
            ],
            "validations": _annotation_rules(),
        },
    )
    return [
        targets,
        targets_binding,
        service_label,
        binding("service-label"),
        annotations,
        binding("adapter-annotations"),
    ]


COEXISTENCE_SUFFIX = "llmkube-coexistence"
"""What follows the given name in the coexistence policy's and binding's names."""


def coexistence_policy(
    name: str,
    *,
    llmkube_user: str = LLMKUBE_CONTROLLER_USER,
    managed_only: bool = True,
    namespace_selector: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Pure: a ValidatingAdmissionPolicy and its binding (``Deny``), ``{name}-llmkube-coexistence``,
    that hold LLMKube's own LoRA controller off the LoRAAdapters pulumi-lora serves.

    LLMKube's controller (every LLMKube install runs it; it cannot be switched off) first adds its
    finalizer to a CR and returns; it loads through the Service only on a later pass, and writes
    its conditions with ``Status().Update``. For requests by ``llmkube_user`` on the CRs this
    policy covers, it refuses adding :data:`LLMKUBE_FINALIZER` and every status write, and lets
    everything else through (removing the finalizer included, so deletion never waits on it).
    The controller's reconcile then fails before any request to a pod and backs off on its own.

    ``managed_only`` (the default, for clusters where the provider runs without the loop) covers
    the CRs carrying pulumi-lora's ``managed-by`` annotation, leaving LLMKube every other CR;
    ``False`` covers every LoRAAdapter in the bound namespaces (the re-sync loop serves them
    all). ``namespace_selector`` limits the binding to the namespaces it selects.
    """
    conditions: list[dict[str, Any]] = [
        {
            "name": "llmkube-controller",
            "expression": f"request.userInfo.username == '{llmkube_user}'",
        }
    ]
    if managed_only:
        conditions.append(
            {
                "name": "managed-by-pulumi-lora",
                "expression": (
                    "has(oldObject.metadata.annotations) && "
                    f"'{ANNOTATION_MANAGED_BY}' in oldObject.metadata.annotations"
                ),
            }
        )
    subject = "'LoRAAdapter ' + request.namespace + '/' + request.name"
    policy = {
        "apiVersion": _VAP,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{name}-{COEXISTENCE_SUFFIX}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": [PLURAL, f"{PLURAL}/status"],
                    }
                ]
            },
            "matchConditions": conditions,
            "variables": [
                {
                    "name": "adds",
                    "expression": (
                        f"has(object.metadata.finalizers) && '{LLMKUBE_FINALIZER}' in "
                        "object.metadata.finalizers && !(has(oldObject.metadata.finalizers) && "
                        f"'{LLMKUBE_FINALIZER}' in oldObject.metadata.finalizers)"
                    ),
                }
            ],
            "validations": [
                {
                    # A request on the object itself has no subResource key at all: reading
                    # it unguarded is an error, which failurePolicy Fail turns into a denial of
                    # every update (the finalizer's removal too: deletion would wait forever).
                    "expression": "!has(request.subResource) || request.subResource != 'status'",
                    "messageExpression": (
                        f"{subject} + ' is served by pulumi-lora: the LLMKube LoRA "
                        "controller may not write its status (pulumi-lora coexistence policy)'"
                    ),
                    "reason": "Forbidden",
                },
                {
                    "expression": "!variables.adds",
                    "messageExpression": (
                        f"{subject} + ' is served by pulumi-lora: the LLMKube LoRA "
                        f"controller may not add {LLMKUBE_FINALIZER} (pulumi-lora coexistence "
                        "policy)'"
                    ),
                    "reason": "Forbidden",
                },
            ],
        },
    }
    spec: dict[str, Any] = {
        "policyName": f"{name}-{COEXISTENCE_SUFFIX}",
        "validationActions": ["Deny"],
    }
    if namespace_selector:
        spec["matchResources"] = {"namespaceSelector": dict(namespace_selector)}
    binding = {
        "apiVersion": _VAP,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"{name}-{COEXISTENCE_SUFFIX}"},
        "spec": spec,
    }
    return [policy, binding]
