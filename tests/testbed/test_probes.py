"""The testbed's prober keeps a probe's declared ``timeoutSeconds``; only its periods are scaled.

No cluster here: the probe LLMKube's operator declares for SGLang (``render_deployment``), read
by the kubelet's ``Probe.of`` and run by a pod's prober against a stand-in for SGLang's
``/health_generate``, which answers only after its one-token generation: never within a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from pulumi_lora.testing.testbed import _probes
from pulumi_lora.testing.testbed._kubelet import KubeletContext, PodRuntime
from pulumi_lora.testing.testbed._probes import PROBE_TIME_SCALE, Probe
from pulumi_lora.testing.testbed._workloads import (
    ANNOTATION_PROBE_TIME_SCALE,
    ANNOTATION_SERVER,
    render_deployment,
)

SGLANG_ANSWERS_AFTER = 1.0
"""SGLang's ``/health_generate`` waits a second (``asyncio.sleep(1)``) before it first looks
whether its generation came back: a probe that waits no longer than this never sees it."""


def sglang_pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as the Deployment LLMKube's operator writes for an sglang InferenceService."""
    isvc = {
        "apiVersion": "inference.llmkube.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {
            "name": "llama",
            "namespace": "real",
            "uid": "isvc-uid",
            "annotations": {ANNOTATION_SERVER: "sglang", **(annotations or {})},
        },
        "spec": {"modelRef": "llama-8b", "runtime": "sglang", "replicas": 1},
    }
    template = render_deployment(isvc)["spec"]["template"]
    meta = {**template["metadata"], "name": "llama-0", "namespace": "real", "uid": "pod-uid"}
    return {"metadata": meta, "spec": template["spec"]}


def readiness(pod: dict[str, Any]) -> dict[str, Any]:
    declared: dict[str, Any] = pod["spec"]["containers"][0]["readinessProbe"]
    return declared


@pytest.mark.parametrize("scale", [PROBE_TIME_SCALE, 1.0, 0.01])
def test_the_declared_timeout_is_kept_and_only_the_periods_are_scaled(scale: float) -> None:
    declared = {**readiness(sglang_pod()), "initialDelaySeconds": 10}
    probe = Probe.of(declared, {"http": 30000}, scale)
    assert probe is not None
    assert probe.timeout == declared["timeoutSeconds"] == 5
    assert probe.period == pytest.approx(max(0.05, declared["periodSeconds"] * scale))
    assert probe.initial_delay == pytest.approx(10 * scale)
    assert probe.failure_threshold == declared["failureThreshold"]
    assert (probe.port, probe.path) == (30000, "/health_generate")


@pytest.mark.parametrize(
    ("declared", "timeout"),
    [
        pytest.param({}, 1.0, id="undeclared-is-a-kubelets-second"),
        pytest.param({"timeoutSeconds": 0}, 1.0, id="zero-is-the-default"),
        pytest.param({"timeoutSeconds": 3}, 3.0, id="three"),
        pytest.param({"timeoutSeconds": 30}, 30.0, id="thirty"),
    ],
)
def test_a_timeout_is_what_the_probe_declares(declared: dict[str, Any], timeout: float) -> None:
    spec = {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 5, **declared}
    probe = Probe.of(spec, {}, PROBE_TIME_SCALE)
    assert probe is not None and probe.timeout == timeout and probe.period == 0.5


# --- a pod's prober, probing an SGLang that answers after a second -------------------------------


class _Rest:
    """The apiserver as the prober sees it: every status patch it sends, kept."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def strategic_merge_patch(self, _path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(body)
        return body

    merge_patch = strategic_merge_patch


@dataclass
class _Ctx:
    rest: _Rest = field(default_factory=_Rest)
    default_network: str = "loopback"

    def note_pod(self, _pod: dict[str, Any]) -> None:
        return None


class _Running:
    """A container's process that runs (the prober asks only that)."""

    def alive(self) -> bool:
        return True

    def returncode(self) -> int | None:
        return None


def ready_published(rest: _Rest) -> list[str]:
    """The Ready condition of every status the kubelet published, in order."""
    return [
        next(c["status"] for c in patch["status"]["conditions"] if c["type"] == "Ready")
        for patch in rest.patches
    ]


def test_an_sglang_pod_probed_at_the_default_scale_stays_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prober waits the declared 5 s for each ``/health_generate``: a server that answers
    after a second is Ready at the first probe and stays Ready probe after probe (failureThreshold
    is 1: one probe cut short at a second would take it out)."""
    waits: list[float] = []

    def sglang_health_generate(_host: str, _port: int, path: str, timeout: float) -> bool:
        assert path == "/health_generate"
        waits.append(timeout)
        return timeout > SGLANG_ANSWERS_AFTER

    monkeypatch.setattr(_probes, "http_probe", sglang_health_generate)
    ctx = _Ctx()
    runtime = PodRuntime(cast(KubeletContext, ctx), sglang_pod())
    assert runtime.server == "sglang"
    assert runtime.readiness is not None
    assert runtime.readiness.period == pytest.approx(PROBE_TIME_SCALE)  # the default scale
    runtime.process = cast(Any, _Running())
    runtime.running = True
    failures = {"readiness": 0, "liveness": 0}
    for _ in range(20):
        runtime._probe_once(failures)
    assert ready_published(ctx.rest) == ["True"]  # one transition, to Ready, and no other
    assert runtime.ready
    assert waits == [5.0] * 20


def test_a_pod_asking_for_real_time_probes_with_the_same_timeout() -> None:
    """``probe-time-scale`` changes how often a pod is probed, never how long a probe waits."""
    fast = PodRuntime(cast(KubeletContext, _Ctx()), sglang_pod())
    real = PodRuntime(
        cast(KubeletContext, _Ctx()), sglang_pod({ANNOTATION_PROBE_TIME_SCALE: "1.0"})
    )
    assert fast.readiness is not None and real.readiness is not None
    assert fast.readiness.period == pytest.approx(0.1) and real.readiness.period == 1.0
    assert fast.readiness.timeout == real.readiness.timeout == 5.0
