"""The provider while the apiserver is down: a clear, retryable error, and nothing left behind.

A testbed of its own (its apiserver is stopped and started here), pods that keep serving.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pulumi_lora import AdapterNotLoaded, ClusterError
from pulumi_lora._errors import ApiserverUnreachable
from pulumi_lora._kube._objects import get_adapter
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed
from tests.e2e.conftest import emulator_post, emulator_state, served


@pytest.fixture(scope="module")
def own(testbed_binaries: object) -> Iterator[Testbed]:
    bed = Testbed(audit=False).start()
    yield bed
    bed.stop()


@pytest.fixture(scope="module")
def pods(own: Testbed) -> InferenceServiceHandle:
    handle = own.deploy_inference_service(own.create_namespace("outage"), "llama", replicas=2)
    handle.wait_ready(timeout=30)
    return handle


def provider_for(own: Testbed) -> LoRAAdapterProvider:
    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kube=KubeSource(str(own.kubeconfig_path)))
    return provider


def inputs(own: Testbed, pods: InferenceServiceHandle, name: str) -> dict[str, str]:
    return {
        "adapter_name": name,
        "path": own.make_adapter(name),
        "inference_service": "llama",
        "namespace": pods.namespace,
    }


def test_create_with_the_apiserver_down_fails_clearly_and_touches_no_pod(
    own: Testbed, pods: InferenceServiceHandle
) -> None:
    props = inputs(own, pods, "while-down")
    own.stop_apiserver()
    try:
        start = time.monotonic()
        with pytest.raises(ApiserverUnreachable) as caught:
            provider_for(own).create(props)
        took = time.monotonic() - start
    finally:
        own.start_apiserver()
    message = str(caught.value)
    assert message.startswith("cannot reach the Kubernetes apiserver (ConnectError:")
    assert "check the kubeconfig and context" in message and caught.value.retryable
    assert isinstance(caught.value, ClusterError) and took < 15
    assert get_adapter(own.client(), pods.namespace, "while-down") is None
    assert all("while-down" not in adapters for adapters in served(pods).values())


def test_an_apiserver_restart_in_the_middle_of_a_create_leaves_nothing_half_done(
    own: Testbed, pods: InferenceServiceHandle
) -> None:
    """Loads take 2 s; the apiserver goes away meanwhile and comes back 3 s later.

    Either the create finished before the apiserver stopped answering (then it is complete),
    or it fails and leaves neither the CR nor the adapter on any pod: the rollback unloads
    from the pods (which still answer), the CR's removal waits for the apiserver to return.
    """
    for pod in pods.ready_pods():
        armed = emulator_post(pod.url, "/_emulator/faults", {"latency": {"/load_lora_adapter": 2}})
        assert armed.status_code < 300, armed.text
    props = inputs(own, pods, "mid-create")

    def outage() -> None:
        # The loads are in flight (each takes 2 s): now the apiserver goes away, for 3 s.
        wait_until(
            lambda: any(emulator_state(pod.url)["updating"] for pod in pods.ready_pods()),
            timeout=15,
            interval=0.02,
            what="a load in flight",
        )
        own.stop_apiserver()
        time.sleep(3)
        own.start_apiserver()

    thread = threading.Thread(target=outage)
    thread.start()
    try:
        try:
            provider_for(own).create(props)
            completed = True
        except (ApiserverUnreachable, AdapterNotLoaded) as exc:
            completed = False
            assert "apiserver" in str(exc) or "pod" in str(exc)
    finally:
        thread.join()
        for pod in pods.ready_pods():
            emulator_post(pod.url, "/_emulator/faults", {"latency": {"/load_lora_adapter": 0}})
    cr = get_adapter(own.client(), pods.namespace, "mid-create")
    where = [adapters.get("mid-create") for adapters in served(pods).values()]
    if completed:
        assert cr is not None and where == [props["path"]] * 2
    else:
        assert cr is None and where == [None, None]
