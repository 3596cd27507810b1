"""The testbed package exports exactly its public names, each documented."""

from __future__ import annotations

import pulumi_lora.testing.testbed as testbed

EXPECTED = {
    "ANNOTATION_EMULATOR_ARGS",
    "ANNOTATION_NETWORK",
    "ANNOTATION_PROBE_TIME_SCALE",
    "ANNOTATION_STARTUP_DELAY",
    "CONTROLLER_USER", "KUBELET_USER", "OPERATOR_USER", "SCHEDULER_USER",
    "ADMIN_USER", "AUDIT_POLICY", "BENCH_NETWORK", "BINARIES", "CONTAINER_NAME",
    "DEFAULT_EXTRA_ARGS", "NETNS_PORT", "NETNS_PREFIX", "NODE_NAME", "PROVISION_COMMAND",
    "ApiRequestError", "Binary", "BinaryNotFoundError", "CertificateError",
    "CrdNotEstablishedError", "InferenceServiceHandle", "LLMKubeLoRAController", "LLMKubeStats",
    "LLMKUBE_CONTROLLER_USER", "SentRequest", "NetnsError", "Network", "PodInfo",
    "PodNotFoundError", "ProcessStartError", "StaticToken", "Testbed", "TestbedError",
    "existing_namespaces", "find_binary", "netns_available", "netns_unavailable_reason",
    "new_token", "ContainerRuntime", "container_runtime_unavailable_reason", "image_present",
    "loop_image",
}  # fmt: skip


def test_exports() -> None:
    assert set(testbed.__all__) == EXPECTED
    assert testbed.__all__ == sorted(testbed.__all__, key=lambda n: (not n.isupper(), n))
    for name in testbed.__all__:
        assert hasattr(testbed, name), name


def test_public_classes_and_functions_are_documented() -> None:
    for name in testbed.__all__:
        obj = getattr(testbed, name)
        if callable(obj) and not isinstance(obj, type(testbed.Network)):
            assert obj.__doc__, name
    for method in (
        "start",
        "stop",
        "deploy_inference_service",
        "restart_pod",
        "replace_pod",
        "scale",
        "kill_pod_process",
        "make_adapter",
        "create_namespace",
        "release_namespace",
        "emulator_pids",
        "kubectl",
        "apply_manifests",
    ):
        assert getattr(testbed.Testbed, method).__doc__, method
