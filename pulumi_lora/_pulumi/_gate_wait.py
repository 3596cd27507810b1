"""``ResyncDeployment(readiness_gate=True)``'s last child: it waits until the gate's admission
policy is in force (``_kube._gate_probe``), so the InferenceService a program declares after the
component (``depends_on``) gets gated pods from its first one.

A dynamic resource: its provider is pickled by reference (this module's path), as
``LoRAAdapterProvider`` is, and does its work at create only; an update or delete changes
nothing in the cluster.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

#: How long the create waits for the policy to be in force.
TIMEOUT_SECONDS = 60.0
#: The inputs whose change means another policy or namespace: waited for again (replace).
_REPLACE_KEYS = ("policy", "namespace")


class GateInForceProvider(ResourceProvider):
    """Waits at create until new SGLang pods in a namespace the policy binds are gated."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        """Wait (up to ``TIMEOUT_SECONDS``); the outputs say how long it took."""
        from pulumi_lora._kube._gate_probe import await_in_force  # noqa: PLC0415 - at create
        from pulumi_lora._kube._source import KubeSource  # noqa: PLC0415

        source = KubeSource(props.get("kubeconfig") or None, props.get("context") or None)
        seconds = await_in_force(source, str(props["namespace"]), TIMEOUT_SECONDS)
        outs = {k: v for k, v in props.items() if k != "kubeconfig"}
        return CreateResult(
            id_=f"{props['namespace']}/{props['policy']}",
            outs={**outs, "seconds": round(seconds, 3)},
        )

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        """Another policy or namespace is waited for again; anything else changes nothing."""
        replaces = [k for k in _REPLACE_KEYS if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=False)


class GateInForce(Resource):
    """Created once the readiness gate's policy ``policy`` gates new SGLang pods in
    ``namespace`` (one the binding covers), with the cluster of ``kubeconfig`` (content or path;
    None: the default kubeconfig) and ``context``."""

    seconds: pulumi.Output[float]

    def __init__(
        self,
        name: str,
        *,
        policy: str,
        namespace: str,
        kubeconfig: pulumi.Input[str] | None,
        context: str | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "policy": policy,
            "namespace": namespace,
            "kubeconfig": None if kubeconfig is None else pulumi.Output.secret(kubeconfig),
            "context": context,
            "seconds": None,
        }
        super().__init__(GateInForceProvider(), name, props, opts)
