"""The traffic kit (``pulumi_lora.testing.traffic``) sends as kube-proxy sends: to the ready
endpoints of the Service's EndpointSlices, which the real kube-controller-manager writes from
the pods' Ready (issue 54, item 7). Pods in network namespaces appear in them; loopback pods
(127/8, invalid endpoint addresses) never do.
"""

from __future__ import annotations

import httpx2

from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import Testbed
from pulumi_lora.testing.traffic import Traffic

PORT = 30000  # spec.endpoint.port: the Service's port and targetPort, the container's port


def load(url: str, name: str, path: str) -> None:
    answer = httpx2.post(
        f"{url}/load_lora_adapter",
        json={"lora_name": name, "lora_path": path},
        timeout=10,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text


def test_requests_go_to_ready_endpoints_and_failures_are_counted_by_cause(
    testbed: Testbed, namespace: str
) -> None:
    path = testbed.make_adapter("sql-traffic")
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=2, network="netns", endpoint_port=PORT
    )
    pods = handle.wait_ready(60)
    load(pods[0].url, "sql-traffic", path)  # one pod of two serves the adapter
    client = testbed.client()
    expected = sorted(f"{p.ip}:{PORT}" for p in pods)
    with Traffic(client, namespace, "llama", ["sql-traffic"], rate=40, seed=7) as traffic:
        wait_until(lambda: traffic.endpoints == expected, 30, what="both pods in the slices")
        wait_until(lambda: len(traffic.report().outcomes) >= 40, 30, what="40 requests")
        load(pods[1].url, "sql-traffic", path)
        served = traffic.mark("served everywhere")
        wait_until(
            lambda: traffic.report().counts(served).total() >= 40,
            30,
            what="40 requests after the second load",
        )
    report = traffic.report()
    before = report.counts(0, served)
    assert before["ok"] > 0 and before["not_loaded"] > 0, before  # the pod without it answers 400
    assert {o.endpoint for o in report.failed(0, served)} == {f"{pods[1].ip}:{PORT}"}
    assert report.counts(served) == {"ok": report.counts(served).total()}
    assert report.window("served everywhere")[0] == served


def test_loopback_pods_never_appear_in_slices(testbed: Testbed, namespace: str) -> None:
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=1, endpoint_port=PORT)
    handle.wait_ready(30)
    with Traffic(testbed.client(), namespace, "llama", ["x"], rate=20) as traffic:
        wait_until(lambda: len(traffic.report().outcomes) >= 5, 30, what="5 requests")
    assert set(traffic.report().counts()) == {"no_endpoint"}
