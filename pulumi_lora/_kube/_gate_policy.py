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
  ``drain_on_stop_seconds`` (:data:`DRAIN_ON_STOP_SECONDS` unless given; 0: none) unless it has
  a ``preStop`` already, so a deleted pod (a rolling restart's old one) keeps answering while
  kube-proxy and gateways take its endpoint out of rotation;
- **never twice**: a ``matchCondition`` skips a pod that has the gate, also when reinvoked;
- ``reinvocationPolicy: IfNeeded``: a mutating webhook that runs after the policy and rewrites
  the list gets the gate put back; ``failurePolicy: Fail``: no silently ungated pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pulumi_lora._core._llmkube import GATE_CONDITION, SERVICE_LABEL

__all__ = [
    "DRAIN_ON_STOP_SECONDS",
    "GATE_CONDITION",
    "MAX_DRAIN_ON_STOP_SECONDS",
    "RUNTIME_LABEL",
    "check_drain_on_stop",
    "readiness_gate_policy",
]

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
#: The longest drain on stop accepted (a pod's grace period must be raised to match past 30 s).
MAX_DRAIN_ON_STOP_SECONDS = 300
#: The index of the ``sglang`` container (-1 without one): a policy variable.
_SGLANG = "object.spec.containers.map(c, c.name).indexOf('sglang')"
_AT = "object.spec.containers[variables.sglang]"


def _drain_on_stop(seconds: int) -> str:
    """The mutation adding a ``preStop`` sleep of ``seconds`` to the ``sglang`` container, unless
    the pod has no such container or the container has a ``preStop`` of its own."""
    sleep = f"{{'sleep': {{'seconds': {seconds}}}}}"
    return (
        f"variables.sglang < 0 || (has({_AT}.lifecycle) && has({_AT}.lifecycle.preStop)) ? [] : "
        f"has({_AT}.lifecycle) "
        "? [JSONPatch{op: 'add', "
        "path: '/spec/containers/' + string(variables.sglang) + '/lifecycle/preStop', "
        f"value: {sleep}}}] "
        ": [JSONPatch{op: 'add', path: '/spec/containers/' + string(variables.sglang) + "
        f"'/lifecycle', value: {{'preStop': {sleep}}}}}]"
    )


def check_drain_on_stop(seconds: object) -> int:
    """``seconds`` as a drain on stop, or a ``ValueError`` saying what is accepted: a whole
    number of seconds, 0 (no ``preStop`` added) to :data:`MAX_DRAIN_ON_STOP_SECONDS`."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int)
        or not 0 <= seconds <= MAX_DRAIN_ON_STOP_SECONDS
    ):
        raise ValueError(
            f"drain_on_stop_seconds must be a whole number of seconds from 0 (no preStop sleep) "
            f"to {MAX_DRAIN_ON_STOP_SECONDS}, got {seconds!r}: a deleted pod keeps serving that "
            "long, within its terminationGracePeriodSeconds (30 by default), past which the "
            "kubelet stops it anyway"
        )
    return seconds


def readiness_gate_policy(
    name: str,
    namespaces: Sequence[str] = (),
    *,
    drain_on_stop_seconds: int = DRAIN_ON_STOP_SECONDS,
    api_version: str = API_VERSION,
) -> list[dict[str, Any]]:
    """Pure: the policy and its binding, both named ``name``; bound to ``namespaces`` (every
    namespace when empty). ``drain_on_stop_seconds`` is the ``preStop`` sleep given to the
    ``sglang`` container (0: none; a ``ValueError`` outside 0 to
    :data:`MAX_DRAIN_ON_STOP_SECONDS`). ``api_version``
    ``admissionregistration.k8s.io/v1beta1`` for 1.34 and 1.35 with the
    ``MutatingAdmissionPolicy`` feature gate and that API turned on."""
    drain = check_drain_on_stop(drain_on_stop_seconds)
    mutations = [{"patchType": "JSONPatch", "jsonPatch": {"expression": _PATCH}}]
    if drain:
        expression = _drain_on_stop(drain)
        mutations.append({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}})
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
            "mutations": mutations,
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
