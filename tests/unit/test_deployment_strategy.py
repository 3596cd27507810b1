"""The Deployment the testbed's LLMKube player writes rolls as LLMKube's does (issue 54, item 7):
the default rolling update for a CPU InferenceService, ``Recreate`` for one asking for GPUs
(``deployment_builder.go``: a new pod could not schedule while the old holds the GPUs), so a
rolling restart can be tested only where LLMKube would roll."""

from __future__ import annotations

from typing import Any

from pulumi_lora.testing.testbed._played import pre_stop_seconds
from pulumi_lora.testing.testbed._workloads import render_deployment


def isvc(**spec: Any) -> dict[str, Any]:
    meta = {"name": "llama", "namespace": "models", "uid": "u"}
    return {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": meta,
        "spec": {"runtime": "sglang", "modelRef": "m", **spec},
    }


def test_a_cpu_inference_service_rolls_with_the_default() -> None:
    assert "strategy" not in render_deployment(isvc())["spec"]
    assert "strategy" not in render_deployment(isvc(resources={"gpu": 0}))["spec"]


def test_a_gpu_inference_service_is_recreated() -> None:
    spec = render_deployment(isvc(resources={"gpu": 1}))["spec"]
    assert spec["strategy"] == {"type": "Recreate"}


def test_the_played_kubelet_sleeps_a_deleted_pods_pre_stop_within_its_grace_period() -> None:
    def pod(seconds: int | None, grace: int | None = None, deleting: int | None = None) -> dict:
        lifecycle = {} if seconds is None else {"preStop": {"sleep": {"seconds": seconds}}}
        spec: dict = {"containers": [{"name": "sglang", "lifecycle": lifecycle}, {"name": "x"}]}
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        meta = {} if deleting is None else {"deletionGracePeriodSeconds": deleting}
        return {"metadata": meta, "spec": spec}

    assert pre_stop_seconds(pod(5)) == 5.0
    assert pre_stop_seconds(pod(None)) == 0.0
    assert pre_stop_seconds(pod(5, grace=2)) == 2.0  # the grace period bounds it
    assert pre_stop_seconds(pod(5, grace=60, deleting=1)) == 1.0  # as the deletion asked
