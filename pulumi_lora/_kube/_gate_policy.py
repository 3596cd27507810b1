"""The readiness gate's admission policy: every new SGLang pod of an LLMKube InferenceService gets
``readinessGates: [{conditionType: pulumi-lora.dev/adapters-loaded}]`` (issue 54).

Pure manifests: a ``MutatingAdmissionPolicy`` and its binding (``admissionregistration.k8s.io/v1``,
GA and served by default from Kubernetes 1.36; CEL in the apiserver, no webhook server). A pod's
``readinessGates`` cannot change after creation, so the gate is added at admission:

- **which pods**: ``CREATE`` of pods labelled with LLMKube's ``inference.llmkube.dev/service``
  and ``inference.llmkube.dev/runtime: sglang`` (a llamacpp pod would never turn Ready), in the
  namespaces named (all, when none is);
- **how**: a JSONPatch (``readinessGates`` is an atomic list, which an apply configuration
  would replace): appended to the gates a pod already has, or the list made with map literals.
  A list of typed objects (``[Object.spec.readinessGates{...}]``) panics kube-apiserver 1.36.3's
  admission handler (cel-go cannot convert it), which would refuse every new SGLang pod;
- **a drain on stop**: the ``sglang`` container gets a ``preStop`` sleep of
  :data:`DRAIN_ON_STOP_SECONDS` unless it has a ``preStop`` already, so a deleted pod (a rolling
  restart's old one) keeps answering while kube-proxy takes its endpoint out of rotation;
- **never twice**: a ``matchCondition`` skips a pod that has the gate, also when reinvoked;
- ``reinvocationPolicy: IfNeeded``: a mutating webhook that runs after the policy and rewrites
  the list gets the gate put back; ``failurePolicy: Fail``: no silently ungated pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pulumi_lora._core._llmkube import GATE_CONDITION, SERVICE_LABEL

__all__ = ["GATE_CONDITION", "RUNTIME_LABEL", "readiness_gate_policy"]

#: LLMKube's label carrying an InferenceService's ``spec.runtime`` on its pods.
RUNTIME_LABEL = "inference.llmkube.dev/runtime"
API_VERSION = "admissionregistration.k8s.io/v1"

_MISSING = (
    "!has(object.spec.readinessGates) || "
    f"!object.spec.readinessGates.exists(g, g.conditionType == '{GATE_CONDITION}')"
)
_PATCH = (
    "has(object.spec.readinessGates) "
    "? [JSONPatch{op: 'add', path: '/spec/readinessGates/-', "
    f"value: Object.spec.readinessGates{{conditionType: '{GATE_CONDITION}'}}}}] "
    ": [JSONPatch{op: 'add', path: '/spec/readinessGates', "
    f"value: [{{'conditionType': '{GATE_CONDITION}'}}]}}]"
)


#: Seconds a stopping SGLang container keeps serving (``preStop`` sleep) after its pod was
#: deleted: the EndpointSlice controller marks a terminating pod's endpoint not ready at once,
#: and kube-proxy and gateways follow within a second or two; without it, requests routed in
#: that moment meet a closed port (a rolling restart's old pods). Within the default 30 s grace.
DRAIN_ON_STOP_SECONDS = 5
#: The index of the ``sglang`` container (-1 without one): a policy variable.
_SGLANG = "object.spec.containers.map(c, c.name).indexOf('sglang')"
_AT = "object.spec.containers[variables.sglang]"
_DRAIN_ON_STOP = (
    f"variables.sglang < 0 || (has({_AT}.lifecycle) && has({_AT}.lifecycle.preStop)) ? [] : "
    f"has({_AT}.lifecycle) "
    "? [JSONPatch{op: 'add', "
    "path: '/spec/containers/' + string(variables.sglang) + '/lifecycle/preStop', "
    f"value: {{'sleep': {{'seconds': {DRAIN_ON_STOP_SECONDS}}}}}}}] "
    ": [JSONPatch{op: 'add', path: '/spec/containers/' + string(variables.sglang) + '/lifecycle', "
    f"value: {{'preStop': {{'sleep': {{'seconds': {DRAIN_ON_STOP_SECONDS}}}}}}}}}]"
)


def readiness_gate_policy(
    name: str, namespaces: Sequence[str] = (), *, api_version: str = API_VERSION
) -> list[dict[str, Any]]:
    """Pure: the policy and its binding, both named ``name``; bound to ``namespaces`` (every
    namespace when empty). ``api_version`` ``admissionregistration.k8s.io/v1beta1`` for 1.34 and
    1.35 with the ``MutatingAdmissionPolicy`` feature gate and that API turned on."""
    policy = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "objectSelector": {
                    "matchExpressions": [
                        {"key": SERVICE_LABEL, "operator": "Exists"},
                        {"key": RUNTIME_LABEL, "operator": "In", "values": ["sglang"]},
                    ]
                },
            },
            "matchConditions": [{"name": "gate-missing", "expression": _MISSING}],
            "variables": [{"name": "sglang", "expression": _SGLANG}],
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": _PATCH}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression": _DRAIN_ON_STOP}},
            ],
        },
    }
    binding: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name},
    }
    if namespaces:
        selector = {"key": "kubernetes.io/metadata.name", "operator": "In"}
        binding["spec"]["matchResources"] = {
            "namespaceSelector": {"matchExpressions": [{**selector, "values": sorted(namespaces)}]}
        }
    return [policy, binding]
