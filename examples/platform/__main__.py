"""A platform team's stack: an SGLang InferenceService, its adapters, and the re-sync loop.

One ``pulumi up`` declares everything the team owns for one model:

* the LLMKube ``InferenceService`` (pulumi-kubernetes ``CustomResource``), which LLMKube's
  operator turns into a Deployment of SGLang pods;
* three ``LoRAAdapter`` resources that depend on it: each is applied as a CR and loaded on every
  Ready pod once the pods exist (the provider waits for them, ``readyTimeoutSeconds``);
* ``ResyncDeployment``: the re-sync loop in the cluster (ServiceAccount, least-privilege RBAC,
  a Deployment of ``loopReplicas`` replicas electing one leader), which re-loads the adapters
  after a pod restarts, is replaced, or the service scales up, with no ``pulumi`` command.

Scaling is a config change: ``pulumi config set replicas 3 && pulumi up``; the new pod gets
every adapter from the loop (and from the ``up`` itself). The cluster comes from the two
kubeconfig settings (``kubernetes:kubeconfig`` and ``pulumi-lora:kubeconfig``).
"""

import pulumi
import pulumi_kubernetes as kubernetes

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora.deploy import ResyncDeployment

ADAPTERS = ("sql-lora", "chat-lora", "code-lora")
"""Adapter names; each directory (``/adapters/<name>``) is on the SGLang pods' volume."""


def program() -> None:
    """Declare the service, its adapters and the loop; export what each pod serves."""
    config = pulumi.Config()
    namespace = config.require("namespace")
    service_name = config.require("inferenceService")

    service = kubernetes.apiextensions.CustomResource(
        "inference-service",
        api_version="inference.llmkube.dev/v1alpha1",
        kind="InferenceService",
        metadata={"name": service_name, "namespace": namespace},
        spec={
            "modelRef": "llama-8b",
            "runtime": "sglang",
            "replicas": config.require_int("replicas"),
            "containerPort": 30000,
            "extraArgs": ["--enable-lora", "--max-lora-rank", "64", "--lora-target-modules", "all"],
        },
    )

    adapters = {
        name: LoRAAdapter(
            name,
            LoRAAdapterArgs(
                adapter_name=name,
                path=f"/adapters/{name}",
                inference_service=service_name,
                namespace=namespace,
            ),
            opts=pulumi.ResourceOptions(depends_on=[service]),
        )
        for name in ADAPTERS
    }

    # The servers here take no API key, so the loop reads no Secret. For keyed servers (adapters
    # with api_key_secret_name), add secret_namespaces=[namespace]: the loop may then get Secrets
    # in that namespace only (a Role there, never a ClusterRole).
    loop = ResyncDeployment(
        "resync",
        namespace=config.require("loopNamespace"),
        image=config.require("loopImage"),
        replicas=config.require_int("loopReplicas"),
    )

    pulumi.export("loaded", {name: adapter.loaded for name, adapter in adapters.items()})
    pulumi.export("pods", {name: adapter.pods for name, adapter in adapters.items()})
    pulumi.export("loopDeployment", loop.deployment)


if __name__ == "__main__":
    program()
