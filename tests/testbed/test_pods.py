"""The InferenceService player: pods as LLMKube makes them, a kubelet's readiness, restarts."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import ssl
import time
from collections.abc import Iterator
from typing import Any, cast

import httpx2
import pytest

from pulumi_lora.testing.testbed import (
    ANNOTATION_PROBE_TIME_SCALE,
    BENCH_NETWORK,
    ApiRequestError,
    InferenceServiceHandle,
    PodInfo,
    PodNotFoundError,
    Testbed,
)
from pulumi_lora.testing.testbed._kubelet import KubeletContext, PodRuntime
from pulumi_lora.testing.testbed._probes import PROBE_TIME_SCALE
from pulumi_lora.testing.testbed._process import alive

ISVC = "/apis/inference.llmkube.dev/v1alpha1/namespaces/{ns}/inferenceservices/{name}"


def pod_object(testbed: Testbed, namespace: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = testbed.rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return got


def container_status(testbed: Testbed, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = pod_object(testbed, namespace, name)["status"]["containerStatuses"][0]
    return status


def condition(pod: dict[str, Any], kind: str) -> str:
    return next(c["status"] for c in pod["status"]["conditions"] if c["type"] == kind)


def wait_for(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def models(url: str) -> list[str]:
    answer = httpx2.get(f"{url}/v1/models", timeout=5.0, trust_env=False)
    answer.raise_for_status()
    return [m["id"] for m in answer.json()["data"] if m.get("parent")]


def load(url: str, name: str, path: str) -> httpx2.Response:
    return httpx2.post(
        f"{url}/load_lora_adapter",
        json={"lora_name": name, "lora_path": path},
        timeout=30.0,
        trust_env=False,
    )


@pytest.fixture
def isvc(testbed: Testbed, namespace: str) -> Iterator[InferenceServiceHandle]:
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(30)
    yield handle
    testbed.delete_inference_service(namespace, "llama")  # frees the processes for later tests


def test_delete_stops_pods_and_removes_objects(testbed: Testbed, namespace: str) -> None:
    handle = testbed.deploy_inference_service(namespace, "brief", replicas=1)
    (info,) = handle.wait_ready(30)
    assert info.pid is not None and alive(info.pid)
    testbed.delete_inference_service(namespace, "brief")
    assert not alive(info.pid)
    with pytest.raises(ApiRequestError):
        pod_object(testbed, namespace, info.name)
    assert testbed.rest.get(ISVC.format(ns=namespace, name="brief"), allow=(404,)) is None
    with pytest.raises(KeyError):
        testbed.inference_service(namespace, "brief")


def test_pods_look_like_an_llmkube_deployment(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    infos = isvc.pods()
    assert len(infos) == 2 and len({i.ip for i in infos}) == 2  # each its own address
    listing = testbed.rest.get(
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=inference.llmkube.dev/service=llama"
    )
    assert {p["metadata"]["name"] for p in listing["items"]} == {i.name for i in infos}
    for info in infos:
        assert re.fullmatch(r"llama-[a-z0-9]{1,10}-[a-z0-9]{5}", info.name)
        pod = pod_object(testbed, namespace, info.name)
        assert pod["metadata"]["uid"] == info.uid
        labels = pod["metadata"]["labels"]
        assert labels["app"] == "llama"
        assert labels["inference.llmkube.dev/service"] == "llama"
        assert labels["inference.llmkube.dev/model"] == "llama-8b"
        assert labels["inference.llmkube.dev/runtime"] == "sglang"
        assert pod["spec"]["nodeName"] == "testbed-node"
        (container,) = pod["spec"]["containers"]
        assert container["name"] == "sglang"
        assert container["ports"][0]["name"] == "http"
        assert container["ports"][0]["containerPort"] == info.port
        assert container["readinessProbe"]["httpGet"]["path"] == "/health_generate"
        assert "--enable-lora" in container["args"]
        status = pod["status"]
        assert status["phase"] == "Running"
        assert status["podIP"] == info.ip and status["podIPs"] == [{"ip": info.ip}]
        assert info.ip.startswith("127.") and info.ip != "127.0.0.1" and info.port == 30000
        assert status["startTime"]
        for kind in ("Ready", "ContainersReady", "PodScheduled", "Initialized"):
            assert condition(pod, kind) == "True"
        (cs,) = status["containerStatuses"]
        assert cs["name"] == "sglang" and cs["ready"] and cs["started"]
        assert cs["restartCount"] == 0 and cs["state"]["running"]["startedAt"]
        assert cs["containerID"].startswith("containerd://") and cs["image"]
        assert httpx2.get(f"{info.url}/health_generate", trust_env=False).status_code == 200
        assert testbed.emulator_url(namespace, info.name) == info.url
    cr = testbed.rest.get(ISVC.format(ns=namespace, name="llama"))
    assert cr["spec"]["runtime"] == "sglang" and cr["spec"]["replicas"] == 2
    assert cr["spec"]["modelRef"] == "llama-8b"
    assert "--enable-lora" in cr["spec"]["extraArgs"]
    wait_for(
        lambda: (
            testbed.rest.get(ISVC.format(ns=namespace, name="llama"))
            .get("status", {})
            .get("readyReplicas")
            == 2
        ),
        what="isvc readyReplicas 2",
    )
    status = testbed.rest.get(ISVC.format(ns=namespace, name="llama"))["status"]
    assert status["phase"] == "Ready" and status["desiredReplicas"] == 2
    assert (
        status["endpoint"] == f"http://llama.{namespace}.svc.cluster.local:8080/v1/chat/completions"
    )


def test_ready_only_after_the_startup_delay(testbed: Testbed, namespace: str) -> None:
    started = time.monotonic()
    handle = testbed.deploy_inference_service(namespace, "slow", replicas=1, startup_delay=2.0)
    (info,) = handle.pods()
    # During the delay the emulator is up but answers 503, and the pod is not Ready.
    wait_for(lambda: _health(info.url) == 503, timeout=10.0, what="the emulator to answer 503")
    assert not handle.pod(info.name).ready
    pod = pod_object(testbed, namespace, info.name)
    assert condition(pod, "Ready") == "False"
    assert pod["status"]["containerStatuses"][0]["ready"] is False
    handle.wait_ready(20)
    assert time.monotonic() - started >= 2.0
    assert _health(info.url) == 200
    wait_for(
        lambda: condition(pod_object(testbed, namespace, info.name), "Ready") == "True",
        what="Ready=True in the apiserver",
    )
    testbed.delete_inference_service(namespace, "slow")


def test_probe_time_scale_sets_the_readiness_period(testbed: Testbed, namespace: str) -> None:
    """Pods probe ten times faster than declared unless their service asks for real time."""
    handle = testbed.deploy_inference_service(
        namespace, "realtime", replicas=1, probe_time_scale=1.0
    )
    handle.wait_ready(20)
    (info,) = handle.pods()
    pod = pod_object(testbed, namespace, info.name)
    assert pod["metadata"]["annotations"][ANNOTATION_PROBE_TIME_SCALE] == "1.0"
    declared = pod["spec"]["containers"][0]["readinessProbe"]["periodSeconds"]

    def period(annotations: dict[str, str]) -> float:
        meta = {**pod["metadata"], "annotations": annotations}
        runtime = PodRuntime(cast(KubeletContext, _Ctx()), {**pod, "metadata": meta})
        assert runtime.readiness is not None
        return runtime.readiness.period

    assert period(pod["metadata"]["annotations"]) == declared
    assert period({}) == pytest.approx(declared * PROBE_TIME_SCALE)
    testbed.delete_inference_service(namespace, "realtime")


class _Ctx:
    default_network = "loopback"


def _health(url: str) -> int | None:
    try:
        return httpx2.get(f"{url}/health_generate", timeout=1.0, trust_env=False).status_code
    except httpx2.HTTPError:
        return None


def test_restart_loses_state_and_bumps_restart_count(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    path = testbed.make_adapter("sql-lora", rank=8)
    assert path == "/adapters/sql-lora"
    assert (testbed.adapter_root / "adapters" / "sql-lora" / "adapter_config.json").is_file()
    before, other = isvc.pods()
    answer = load(before.url, "sql-lora", path)
    assert answer.status_code == 200, answer.text
    assert models(before.url) == ["sql-lora"]
    old = pod_object(testbed, namespace, before.name)["status"]["containerStatuses"][0]

    testbed.restart_pod(namespace, before.name)
    right_after = isvc.pod(before.name)
    assert not right_after.ready and right_after.restart_count == 1
    isvc.wait_ready(30)
    after = isvc.pod(before.name)
    assert (after.uid, after.ip, after.port) == (before.uid, before.ip, before.port)
    assert after.pid != before.pid
    assert models(after.url) == []  # state lost, as with SGLang
    assert isvc.pod(other.name).restart_count == 0

    wait_for(
        lambda: condition(pod_object(testbed, namespace, before.name), "Ready") == "True",
        what="Ready after restart",
    )
    new = pod_object(testbed, namespace, before.name)["status"]["containerStatuses"][0]
    assert new["restartCount"] == 1
    assert new["state"]["running"]["startedAt"] > old["state"]["running"]["startedAt"]
    assert new["containerID"] != old["containerID"]
    assert new["lastState"]["terminated"]["exitCode"] == 0


def test_restart_while_a_client_keeps_its_connection_open(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    # A re-sync loop keeps connections alive; SGLang (uvicorn, SO_REUSEADDR) rebinds its port
    # after a restart regardless, and the emulator must too.
    info = isvc.pods()[0]
    with httpx2.Client(trust_env=False, timeout=5.0) as client:
        assert client.get(f"{info.url}/v1/models").status_code == 200
        testbed.restart_pod(namespace, info.name)
        isvc.wait_ready(15)
        assert client.get(f"{info.url}/v1/models").status_code == 200


def test_restart_is_seen_as_not_ready_first(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    info = isvc.pods()[0]
    seen: list[tuple[int, str]] = []
    resource_version = pod_object(testbed, namespace, info.name)["metadata"]["resourceVersion"]
    testbed.restart_pod(namespace, info.name)
    isvc.wait_ready(30)
    wait_for(
        lambda: condition(pod_object(testbed, namespace, info.name), "Ready") == "True",
        what="Ready after restart",
    )
    # Replay the pod's history through a watch from before the restart.
    with httpx2.Client(
        base_url=testbed.server,
        verify=ssl.create_default_context(cafile=str(testbed.ca_path)),
        headers={"Authorization": f"Bearer {testbed.admin_token}"},
        trust_env=False,
        timeout=10.0,
    ) as http:
        url = (
            f"/api/v1/namespaces/{namespace}/pods?watch=1&timeoutSeconds=1"
            f"&fieldSelector=metadata.name={info.name}&resourceVersion={resource_version}"
        )
        with http.stream("GET", url) as stream:
            for line in stream.iter_lines():
                pod = json.loads(line)["object"]
                cs = pod["status"]["containerStatuses"][0]
                seen.append((cs["restartCount"], condition(pod, "Ready")))
    assert (0, "False") in seen and (1, "False") in seen and seen[-1] == (1, "True")
    assert seen.index((1, "False")) < seen.index((1, "True"))


def test_replace_pod_makes_a_new_pod(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    old, keep = isvc.pods()
    new_name = testbed.replace_pod(namespace, old.name)
    assert new_name != old.name and new_name.startswith("llama-")
    with pytest.raises(ApiRequestError) as gone:
        pod_object(testbed, namespace, old.name)
    assert gone.value.status == 404
    isvc.wait_ready(30)
    new = isvc.pod(new_name)
    assert new.uid != old.uid and new.restart_count == 0 and new.ip != old.ip
    assert {i.name for i in isvc.pods()} == {keep.name, new_name}
    assert pod_object(testbed, namespace, new_name)["metadata"]["uid"] == new.uid
    assert _health(old.url) is None  # the old process is gone


def test_scale_up_and_down(testbed: Testbed, namespace: str, isvc: InferenceServiceHandle) -> None:
    testbed.scale(namespace, "llama", 3)
    assert testbed.rest.get(ISVC.format(ns=namespace, name="llama"))["spec"]["replicas"] == 3
    infos = isvc.wait_ready(30)
    assert len(infos) == 3
    testbed.scale(namespace, "llama", 1)
    (left,) = isvc.pods()
    removed = [i for i in infos if i.name != left.name]
    for info in removed:
        with pytest.raises(ApiRequestError):
            pod_object(testbed, namespace, info.name)
        assert _health(info.url) is None
    wait_for(
        lambda: (
            testbed.rest.get(ISVC.format(ns=namespace, name="llama"))["status"]["desiredReplicas"]
            == 1
        ),
        what="isvc desiredReplicas 1",
    )


def test_kubectl_scale_and_delete_are_followed(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    out = testbed.kubectl(
        "scale", "inferenceservices.inference.llmkube.dev/llama", "--replicas=3", "-n", namespace
    )
    assert out.returncode == 0, out.stderr
    wait_for(lambda: len(isvc.pods()) == 3, what="a third pod")
    isvc.wait_ready(30)
    victim = isvc.pods()[0]
    out = testbed.kubectl("delete", "pod", victim.name, "-n", namespace, "--wait=false")
    assert out.returncode == 0, out.stderr
    wait_for(
        lambda: victim.name not in {i.name for i in isvc.pods()} and len(isvc.pods()) == 3,
        what="the deleted pod to be replaced",
    )
    isvc.wait_ready(30)
    out = testbed.kubectl(
        "wait", "--for=condition=Ready", "pod", "-l", "inference.llmkube.dev/service=llama",
        "-n", namespace, "--timeout=30s",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_crashes_make_pods_not_ready(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    killed, crashed = isvc.pods()
    testbed.kill_pod_process(namespace, killed.name)
    assert not isvc.pod(killed.name).ready
    # A process dying on its own is noticed by the prober.
    assert crashed.pid is not None
    os.kill(crashed.pid, signal.SIGKILL)
    wait_for(lambda: not isvc.pod(crashed.name).ready, what="the prober to notice the crash")
    for info in (killed, crashed):
        # Not ready first (a failed probe), then terminated (the process is gone).
        wait_for(
            lambda info=info: (
                "terminated" in container_status(testbed, namespace, info.name)["state"]
            ),
            what="state.terminated in the apiserver",
        )
        pod = pod_object(testbed, namespace, info.name)
        cs = pod["status"]["containerStatuses"][0]
        assert cs["state"]["terminated"]["exitCode"] != 0 and not cs["ready"]
        assert condition(pod, "Ready") == "False"
    wait_for(
        lambda: (
            testbed.rest.get(ISVC.format(ns=namespace, name="llama"))["status"]["readyReplicas"]
            == 0
        ),
        what="isvc readyReplicas 0",
    )
    # Reading what pods serve: the Ready ones (none now), or every pod, where one that does not
    # answer is named rather than read as serving nothing.
    assert isvc.served() == {}
    with pytest.raises(AssertionError, match=rf"pod {killed.name} \(.*\) did not answer"):
        isvc.served(every_pod=True, patience=0.5)
    # A restart brings a crashed pod back.
    testbed.restart_pod(namespace, killed.name)
    wait_for(lambda: isvc.pod(killed.name).ready, timeout=30, what="the restarted pod")
    assert isvc.pod(killed.name).restart_count == 1


def test_unknown_pod_is_a_clear_error(testbed: Testbed, namespace: str) -> None:
    with pytest.raises(PodNotFoundError, match="nope"):
        testbed.restart_pod(namespace, "nope")


@pytest.mark.usefixtures("netns_required")
def test_netns_pods_have_their_own_address(testbed: Testbed, namespace: str) -> None:
    handle = testbed.deploy_inference_service(namespace, "isolated", replicas=2, network="netns")
    try:
        infos: list[PodInfo] = handle.wait_ready(30)
        ips = {info.ip for info in infos}
        assert len(ips) == 2
        for info in infos:
            assert ipaddress.ip_address(info.ip) in BENCH_NETWORK
            assert info.port == 30000 and info.url == f"http://{info.ip}:30000"
            pod = pod_object(testbed, namespace, info.name)
            assert pod["status"]["podIP"] == info.ip
            assert pod["spec"]["containers"][0]["ports"][0]["containerPort"] == 30000
            # Reachable from the host directly ...
            assert models(info.url) == []
            # ... and through the apiserver's pod proxy.
            proxied = testbed.rest.get(
                f"/api/v1/namespaces/{namespace}/pods/{info.name}:30000/proxy/v1/models"
            )
            assert proxied["object"] == "list"
        # State is per pod: an adapter loaded on one pod is not on the other.
        path = testbed.make_adapter("netns-lora")
        first, second = infos
        assert load(first.url, "netns-lora", path).status_code == 200
        proxied = testbed.rest.get(
            f"/api/v1/namespaces/{namespace}/pods/{first.name}:30000/proxy/v1/models"
        )
        assert [m["id"] for m in proxied["data"] if m.get("parent")] == ["netns-lora"]
        assert models(second.url) == []
        # A restart keeps the address.
        testbed.restart_pod(namespace, first.name)
        handle.wait_ready(30)
        assert handle.pod(first.name).ip == first.ip and models(first.url) == []
    finally:
        testbed.delete_inference_service(namespace, "isolated")


def test_loopback_pods_are_refused_by_the_pod_proxy(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle
) -> None:
    info = isvc.pods()[0]
    with pytest.raises(ApiRequestError):
        testbed.rest.get(
            f"/api/v1/namespaces/{namespace}/pods/{info.name}:{info.port}/proxy/v1/models"
        )
