"""The local testbed cluster: real etcd, kube-apiserver and kube-controller-manager, LLMKube's
CRDs, emulated SGLang pods.

::

    from pulumi_lora.testing.testbed import Testbed

    with Testbed() as tb:                      # etcd, apiserver, controller-manager, CRDs
        ns = tb.create_namespace("demo")
        isvc = tb.deploy_inference_service(ns, "llama", replicas=2, network="loopback")
        for pod in isvc.wait_ready(timeout=30):
            print(pod.name, pod.url, pod.ready)
        tb.restart_pod(ns, pod.name)           # state lost, restartCount+1, Ready after 200
        tb.kubectl("get", "pods", "-n", ns)

The binaries are the project's own builds (``python3 tools/provision.py``), found in
``$PULUMI_LORA_BIN_DIR``, ``${PULUMI_LORA_CACHE:-~/.cache/pulumi-lora}/bin``, then ``PATH``.
pytest users register ``pulumi_lora.testing.fixtures``; shells use ``pulumi-lora testbed up``.
Public names are gathered here from private modules, each with its own ``__all__``.
"""

from pulumi_lora.testing.testbed._access import ADMIN_USER
from pulumi_lora.testing.testbed._apiserver import AUDIT_POLICY
from pulumi_lora.testing.testbed._binaries import (
    BINARIES,
    PROVISION_COMMAND,
    Binary,
    BinaryNotFoundError,
    find_binary,
)
from pulumi_lora.testing.testbed._certs import CertificateError, StaticToken, new_token
from pulumi_lora.testing.testbed._containers import (
    ContainerRuntime,
    container_runtime_unavailable_reason,
    image_present,
    loop_image,
)
from pulumi_lora.testing.testbed._crds import CrdNotEstablishedError
from pulumi_lora.testing.testbed._handles import (
    DEFAULT_EXTRA_ARGS,
    NETNS_PORT,
    InferenceServiceHandle,
    PodInfo,
    PodNotFoundError,
)
from pulumi_lora.testing.testbed._llmkube import LLMKUBE_CONTROLLER_USER, LLMKubeLoRAController
from pulumi_lora.testing.testbed._netns import (
    BENCH_NETWORK,
    NETNS_PREFIX,
    NetnsError,
    existing_namespaces,
    netns_available,
    netns_unavailable_reason,
)
from pulumi_lora.testing.testbed._pods import (
    ANNOTATION_EMULATOR_ARGS,
    ANNOTATION_NETWORK,
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_STARTUP_DELAY,
    CONTAINER_NAME,
    NODE_NAME,
    Network,
)
from pulumi_lora.testing.testbed._process import ProcessStartError
from pulumi_lora.testing.testbed._reconciler import LLMKubeStats, SentRequest
from pulumi_lora.testing.testbed._rest import ApiRequestError
from pulumi_lora.testing.testbed._testbed import (
    CONTROLLER_USER,
    KUBELET_USER,
    OPERATOR_USER,
    SCHEDULER_USER,
    Testbed,
    TestbedError,
)

__all__ = [
    "ADMIN_USER",
    "ANNOTATION_EMULATOR_ARGS",
    "ANNOTATION_NETWORK",
    "ANNOTATION_PROBE_TIME_SCALE",
    "ANNOTATION_STARTUP_DELAY",
    "AUDIT_POLICY",
    "BENCH_NETWORK",
    "BINARIES",
    "CONTAINER_NAME",
    "CONTROLLER_USER",
    "DEFAULT_EXTRA_ARGS",
    "KUBELET_USER",
    "LLMKUBE_CONTROLLER_USER",
    "NETNS_PORT",
    "NETNS_PREFIX",
    "NODE_NAME",
    "OPERATOR_USER",
    "PROVISION_COMMAND",
    "SCHEDULER_USER",
    "ApiRequestError",
    "Binary",
    "BinaryNotFoundError",
    "CertificateError",
    "ContainerRuntime",
    "CrdNotEstablishedError",
    "InferenceServiceHandle",
    "LLMKubeLoRAController",
    "LLMKubeStats",
    "NetnsError",
    "Network",
    "PodInfo",
    "PodNotFoundError",
    "ProcessStartError",
    "SentRequest",
    "StaticToken",
    "Testbed",
    "TestbedError",
    "container_runtime_unavailable_reason",
    "existing_namespaces",
    "find_binary",
    "image_present",
    "loop_image",
    "netns_available",
    "netns_unavailable_reason",
    "new_token",
]
