"""Whether the readiness gate's admission policy is in force: a server-side dry run of a new
SGLang pod, which the apiserver admits (and mutates) as it would a real one, stores nothing.

A new policy and its binding take a moment to reach the apiserver's admission chain (its policy
informer); a pod created in that moment is not gated, and a pod's ``readinessGates`` never change
afterwards. So whatever creates SGLang pods right after the policy (the InferenceService in the
same ``pulumi up``) waits for this first (``_pulumi._gate_wait``).
"""

from __future__ import annotations

import time

from lightkube import ApiError, Client
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from pulumi_lora._core._llmkube import GATE_CONDITION, SERVICE_LABEL
from pulumi_lora._errors import ClusterError
from pulumi_lora._kube._gate_policy import RUNTIME_LABEL
from pulumi_lora._kube._objects import cluster_error
from pulumi_lora._kube._source import KubeSource, make_client

#: Seconds between two dry runs while the policy is not in force yet.
POLL_SECONDS = 0.25


def gated_at_admission(client: Client, namespace: str) -> bool:
    """Whether a new SGLang pod in ``namespace`` would be given the gate now (a dry run)."""
    labels = {SERVICE_LABEL: "pulumi-lora-gate-probe", RUNTIME_LABEL: "sglang"}
    probe = Pod(
        metadata=ObjectMeta(name="pulumi-lora-gate-probe", namespace=namespace, labels=labels),
        spec=PodSpec(containers=[Container(name="sglang", image="none")], nodeName="none"),
    )
    try:
        admitted = client.create(probe, namespace=namespace, dry_run=True)
    except ApiError as exc:
        raise cluster_error(f"a dry run of a new SGLang pod in namespace {namespace}", exc) from exc
    gates = (admitted.spec.readinessGates if admitted.spec else None) or []
    return any(g.conditionType == GATE_CONDITION for g in gates)


def await_in_force(source: KubeSource, namespace: str, timeout: float) -> float:
    """Wait until new SGLang pods in ``namespace`` are gated; the seconds it took. Raises
    ``ClusterError`` saying so when they are not within ``timeout``."""
    client = make_client(source)
    started = time.monotonic()
    while not gated_at_admission(client, namespace):
        if time.monotonic() - started > timeout:
            raise ClusterError(
                f"the readiness gate's admission policy is not in force in namespace "
                f"{namespace} {timeout:.0f} s after it was applied: a new SGLang pod there is "
                "admitted without the gate (kubectl get mutatingadmissionpolicybinding; the "
                "apiserver's admission plugin MutatingAdmissionPolicy must be on)"
            )
        time.sleep(POLL_SECONDS)
    return time.monotonic() - started
