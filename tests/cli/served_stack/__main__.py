"""A platform stack behind the readiness gate (issue 54), as ``tests/cli/test_served.py`` runs it.

The re-sync loop first, with ``readiness_gate=True``: its admission policy is in force before
the InferenceService's first pod, so every SGLang pod carries the gate and turns Ready only once
its adapters are loaded. Then the InferenceService (its Service port is the container's, so
the Service reaches SGLang) and its adapters, whose paths and server flags come from stack
config: a swap, a bad revision and a flag change are ``pulumi config set`` and ``pulumi up``.

The ``testbed.pulumi-lora.dev/network`` annotation puts the testbed's pods in network namespaces
of their own, so they appear in the Service's EndpointSlices; a real cluster ignores it.
"""

import pulumi
import pulumi_kubernetes as kubernetes

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora.deploy import ResyncDeployment

ADAPTERS = ("sql-lora", "chat-lora", "code-lora")
FLAGS = ["--enable-lora", "--max-lora-rank", "64", "--lora-target-modules", "all"]

config = pulumi.Config()
namespace = config.require("namespace")
paths = {"sql-lora": config.get("sqlLoraPath") or "/adapters/sql-lora"}

loop = ResyncDeployment(
    "resync",
    namespace=config.require("loopNamespace"),
    image=config.require("loopImage"),
    replicas=1,
    name="served-resync",
    watch_namespace=namespace,  # the policy is bound to this namespace only
    readiness_gate=True,
)

service = kubernetes.apiextensions.CustomResource(
    "inference-service",
    api_version="inference.llmkube.dev/v1alpha1",
    kind="InferenceService",
    metadata={
        "name": "llama",
        "namespace": namespace,
        "annotations": {"testbed.pulumi-lora.dev/network": "netns"},
    },
    spec={
        "modelRef": "llama-8b",
        "runtime": "sglang",
        "replicas": config.require_int("replicas"),
        "containerPort": 30000,
        "endpoint": {"port": 30000},
        "extraArgs": FLAGS
        + ([f"--max-loras-per-batch={batch}"] if (batch := config.get("loraBatch")) else []),
    },
    opts=pulumi.ResourceOptions(depends_on=[loop]),
)

adapters = {
    name: LoRAAdapter(
        name,
        LoRAAdapterArgs(
            adapter_name=name,
            path=paths.get(name, f"/adapters/{name}"),
            inference_service="llama",
            namespace=namespace,
        ),
        opts=pulumi.ResourceOptions(depends_on=[service]),
    )
    for name in ADAPTERS
}

pulumi.export("loadedPaths", {name: adapter.loaded_path for name, adapter in adapters.items()})
