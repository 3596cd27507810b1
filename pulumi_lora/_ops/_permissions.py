"""Which of the permissions the provider needs the identity running ``doctor`` lacks.

One SelfSubjectAccessReview per rule of ``_kube._rbac.provider_rules``. The verdict is pure: it
names each denied verb and resource, and the command that grants it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_lora._kube._rbac import provider_rules
from pulumi_lora._models import Transport
from pulumi_lora._ops._checks import Check, CheckStatus

Ask = tuple[str, str, str]
"""(verb, API group, resource[/subresource]) of one permission."""


def asks(transport: Transport, *, keyed: bool, gated: bool = False) -> list[Ask]:
    """Pure: every permission the provider needs on an InferenceService's namespace for
    ``transport`` (staging left out: doctor checks a target, not a declaration; ``gated``: its
    pods carry the readiness gate, which a swap writes pod by pod)."""
    return [
        (verb, group, resource)
        for rule in provider_rules(transport, keyed=keyed, staging=False, gated=gated)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


def named(ask: Ask) -> str:
    """Pure: ``create loraadapters.inference.llmkube.dev`` (the core group unnamed)."""
    verb, group, resource = ask
    return f"{verb} {resource}.{group}" if group else f"{verb} {resource}"


def check_permissions(
    denied: Sequence[Ask], namespace: str, transport: Transport, *, keyed: bool, gated: bool = False
) -> Check:
    """Pure: pass when nothing the provider needs was denied, else name each by verb and
    resource with the command that prints the Role (``gated``: the pods carry the readiness
    gate, which the provider writes in a swap unless the transport is delegated)."""
    swaps = gated and transport != Transport.DELEGATED  # delegated: the loop writes the gate
    if not denied:
        return Check(
            "permissions",
            CheckStatus.OK,
            f"this identity may do all the provider does ({transport}) in {namespace}"
            + (", the rolling swap on gated pods included" if swaps else ""),
        )
    flags = " --api-key-secrets" if keyed else ""
    if swaps:
        flags += " --readiness-gate"
    if transport == Transport.DELEGATED:  # and the loop's Lease where the loop runs
        flags += " --loop-namespace LOOP_NAMESPACE"
    return Check(
        "permissions",
        CheckStatus.FAIL,
        f"this identity may not, in {namespace}: " + ", ".join(named(a) for a in denied),
        f"pulumi-lora rbac --transport {transport}{flags} -n {namespace} --subject ... "
        "| kubectl apply -f - (as a cluster admin)",
    )
