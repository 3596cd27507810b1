"""The testbed's cluster acts on objects anyone creates (here: kubectl).

InferenceService → Deployment → ReplicaSet → Pod, each owned by the one before (controller
ownerReferences by UID): the played LLMKube operator makes the Deployment, the real
kube-controller-manager the ReplicaSets and Pods (as its controllers' own ServiceAccounts), the
played scheduler binds them and the played kubelet runs them; edits roll out, deletion is the
real garbage collector's, images the kubelet cannot run are reported on the pod.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import (
    CONTROLLER_USER,
    DEFAULT_EXTRA_ARGS,
    KUBELET_USER,
    OPERATOR_USER,
    SCHEDULER_USER,
    Testbed,
    container_runtime_unavailable_reason,
    image_present,
    loop_image,
)
from pulumi_lora.testing.testbed._container_spec import container_kind, emulator_args, resolve_env
from pulumi_lora.testing.testbed._incluster import in_cluster_unavailable_reason
from pulumi_lora.testing.testbed._process import alive

ISVCS = "/apis/inference.llmkube.dev/v1alpha1/namespaces/{ns}/inferenceservices"
APPS = "/apis/apps/v1/namespaces/{ns}/{plural}"
PODS = "/api/v1/namespaces/{ns}/pods"


GC_TIMEOUT = 90.0
"""How long a wait on the real garbage collector may take in a busy session."""


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def isvc_yaml(namespace: str, name: str, replicas: int, extra: list[str]) -> str:
    return json.dumps(
        {
            "apiVersion": "inference.llmkube.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "modelRef": "llama-8b",
                "runtime": "sglang",
                "replicas": replicas,
                "extraArgs": [*DEFAULT_EXTRA_ARGS, *extra],
            },
        }
    )


def items(testbed: Testbed, path: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = testbed.rest.get(path)["items"]
    return listed


def controller(obj: dict[str, Any]) -> dict[str, Any]:
    (ref,) = [r for r in obj["metadata"]["ownerReferences"] if r.get("controller")]
    return ref


def apply(testbed: Testbed, manifest: str) -> None:
    done = testbed.kubectl("apply", "-f", "-", input=manifest)
    assert done.returncode == 0, done.stderr


def test_kubectl_inference_service_gets_the_whole_chain(testbed: Testbed, namespace: str) -> None:
    apply(testbed, isvc_yaml(namespace, "chain", 2, []))
    isvc = wait_for(lambda: testbed.rest.get(f"{ISVCS.format(ns=namespace)}/chain"))
    handle = wait_for(lambda: _handle(testbed, namespace, "chain"), what="the operator")
    infos = handle.wait_ready(30)
    assert len(infos) == 2

    (deployment,) = items(testbed, APPS.format(ns=namespace, plural="deployments"))
    assert deployment["metadata"]["name"] == "chain"
    ref = controller(deployment)
    assert (ref["kind"], ref["uid"], ref["blockOwnerDeletion"]) == (
        "InferenceService",
        isvc["metadata"]["uid"],
        True,
    )
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert container["name"] == "sglang" and container["ports"][0]["name"] == "http"
    assert container["ports"][0]["containerPort"] == 30000  # no containerPort/endpoint: SGLang's
    assert container["readinessProbe"]["httpGet"]["path"] == "/health_generate"
    assert container["args"][-len(DEFAULT_EXTRA_ARGS) :] == list(DEFAULT_EXTRA_ARGS)
    assert template["metadata"]["labels"] == {
        "app": "chain",
        "inference.llmkube.dev/service": "chain",
        "inference.llmkube.dev/model": "llama-8b",
        "inference.llmkube.dev/runtime": "sglang",
    }

    (rs,) = items(testbed, APPS.format(ns=namespace, plural="replicasets"))
    pod_hash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"chain-{pod_hash}"
    assert controller(rs)["uid"] == deployment["metadata"]["uid"]
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] == "2"
    assert "deployment.kubernetes.io/max-replicas" in rs["metadata"]["annotations"]

    pods = items(testbed, PODS.format(ns=namespace))
    assert {p["metadata"]["name"] for p in pods} == {i.name for i in infos}
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"chain-{pod_hash}-")
        assert controller(pod)["uid"] == rs["metadata"]["uid"]
        assert pod["metadata"]["labels"]["pod-template-hash"] == pod_hash
        assert pod["metadata"]["labels"]["inference.llmkube.dev/service"] == "chain"
        assert pod["spec"]["nodeName"] == "testbed-node"
    for info in infos:
        answer = httpx2.get(f"{info.url}/v1/models", trust_env=False, timeout=5.0)
        assert answer.status_code == 200

    # Each part acts as itself: the audit log names who wrote what.
    assert writers(testbed, namespace, "create", "deployments") == {OPERATOR_USER}
    assert writers(testbed, namespace, "create", "replicasets") == {
        "system:serviceaccount:kube-system:deployment-controller"
    }
    assert writers(testbed, namespace, "create", "pods") == {CONTROLLER_USER}
    assert CONTROLLER_USER == "system:serviceaccount:kube-system:replicaset-controller"
    assert writers(testbed, namespace, "create", "pods", "binding") == {SCHEDULER_USER}
    assert writers(testbed, namespace, "patch", "pods", "status") == {KUBELET_USER}


def writers(
    testbed: Testbed, namespace: str, verb: str, resource: str, subresource: str | None = None
) -> set[str]:
    """Users the audit log shows sending ``verb`` on ``resource`` in ``namespace``."""
    audit = testbed.audit_log_path
    assert audit is not None
    return {
        event["user"]["username"]
        for event in map(json.loads, audit.read_text().splitlines())
        if event.get("verb") == verb
        and event.get("objectRef", {}).get("resource") == resource
        and event.get("objectRef", {}).get("namespace") == namespace
        and event.get("objectRef", {}).get("subresource") == subresource
    }


def _handle(testbed: Testbed, namespace: str, name: str) -> Any:
    try:
        return testbed.inference_service(namespace, name)
    except KeyError:
        return None


def test_kubectl_edits_scale_and_roll_out(testbed: Testbed, namespace: str) -> None:
    apply(testbed, isvc_yaml(namespace, "edit", 1, []))
    handle = wait_for(lambda: _handle(testbed, namespace, "edit"))
    (first,) = handle.wait_ready(30)

    apply(testbed, isvc_yaml(namespace, "edit", 3, []))
    assert len(handle.wait_ready(30)) == 3

    apply(testbed, isvc_yaml(namespace, "edit", 3, ["--context-length", "8192"]))
    wait_for(
        lambda: len(items(testbed, APPS.format(ns=namespace, plural="replicasets"))) == 2,
        what="a second ReplicaSet",
    )
    wait_for(lambda: not alive(first.pid or 0), what="the old pods to stop")
    rolled = handle.wait_ready(30)
    assert len(rolled) == 3 and not {i.name for i in rolled} & {first.name}
    sets = {
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs
        for rs in items(testbed, APPS.format(ns=namespace, plural="replicasets"))
    }
    wait_for(
        lambda: testbed.rest.get(f"{APPS.format(ns=namespace, plural='replicasets')}/"
                                 f"{sets['1']['metadata']['name']}")["spec"]["replicas"] == 0,
        what="the old ReplicaSet scaled to 0",
    )  # fmt: skip
    new_hash = sets["2"]["metadata"]["labels"]["pod-template-hash"]
    pods = items(testbed, PODS.format(ns=namespace))
    wait_for(lambda: len(items(testbed, PODS.format(ns=namespace))) == 3, what="old pods gone")
    pods = items(testbed, PODS.format(ns=namespace))
    for pod in pods:
        assert pod["metadata"]["labels"]["pod-template-hash"] == new_hash
        assert "--context-length" in pod["spec"]["containers"][0]["args"]
    deployment = testbed.rest.get(f"{APPS.format(ns=namespace, plural='deployments')}/edit")
    assert deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


def test_deleting_the_inference_service_collects_everything(
    testbed: Testbed, namespace: str
) -> None:
    apply(testbed, isvc_yaml(namespace, "doomed", 2, []))
    handle = wait_for(lambda: _handle(testbed, namespace, "doomed"))
    pids = [i.pid for i in handle.wait_ready(30)]
    # Foreground, as pulumi-kubernetes deletes: the service waits for its dependents.
    done = testbed.kubectl("delete", "inferenceservices.inference.llmkube.dev", "doomed",
                           "-n", namespace, "--cascade=foreground", "--wait=false")  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_collected(testbed, namespace, pids)
    wait_for(
        lambda: testbed.rest.get(f"{ISVCS.format(ns=namespace)}/doomed", allow=(404,)) is None,
        what="the InferenceService gone once its dependents are",
    )


def wait_collected(testbed: Testbed, namespace: str, pids: list[int | None]) -> None:
    """Wait for the real garbage collector to delete the Deployments, ReplicaSets and pods of
    ``namespace``, and for the kubelet to stop their emulators (``pids``).

    The collector works through a shared testbed's whole graph: under a full test session it
    once took over 30 s to reach these pods (alone: under a second).
    """
    for plural in ("deployments", "replicasets"):
        wait_for(
            lambda plural=plural: not items(testbed, APPS.format(ns=namespace, plural=plural)),
            timeout=GC_TIMEOUT,
            what=f"{plural} collected",
        )
    wait_for(
        lambda: not items(testbed, PODS.format(ns=namespace)),
        timeout=GC_TIMEOUT,
        what="pods collected",
    )
    wait_for(lambda: not any(pid and alive(pid) for pid in pids), what="emulators stopped")


def test_background_deletion_collects_the_chain(testbed: Testbed, namespace: str) -> None:
    apply(testbed, isvc_yaml(namespace, "gone", 2, []))
    handle = wait_for(lambda: _handle(testbed, namespace, "gone"))
    pids = [i.pid for i in handle.wait_ready(30)]
    done = testbed.kubectl("delete", "inferenceservices.inference.llmkube.dev", "gone",
                           "-n", namespace, "--cascade=background")  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The owner goes at once; the real garbage collector then deletes its dependents.
    assert testbed.rest.get(f"{ISVCS.format(ns=namespace)}/gone", allow=(404,)) is None
    wait_collected(testbed, namespace, pids)
    collector = "system:serviceaccount:kube-system:generic-garbage-collector"
    assert writers(testbed, namespace, "delete", "deployments") == {collector}
    assert writers(testbed, namespace, "delete", "replicasets") == {collector}


def test_orphaning_keeps_the_dependents(testbed: Testbed, namespace: str) -> None:
    apply(testbed, isvc_yaml(namespace, "kept", 1, []))
    handle = wait_for(lambda: _handle(testbed, namespace, "kept"))
    handle.wait_ready(30)
    done = testbed.kubectl("delete", "inferenceservices.inference.llmkube.dev", "kept",
                           "-n", namespace, "--cascade=orphan", "--timeout=60s")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (deployment,) = items(testbed, APPS.format(ns=namespace, plural="deployments"))
    assert not deployment["metadata"].get("ownerReferences")  # un-owned by the collector
    (pod,) = items(testbed, PODS.format(ns=namespace))
    assert "deletionTimestamp" not in pod["metadata"]
    assert handle.pods() and handle.pods()[0].pid is not None and alive(handle.pods()[0].pid)
    done = testbed.kubectl("delete", "deployment", "kept", "-n", namespace, "--timeout=60s")
    assert done.returncode == 0, done.stderr
    wait_for(
        lambda: not items(testbed, PODS.format(ns=namespace)),
        timeout=GC_TIMEOUT,
        what="pods collected",
    )


def test_an_image_the_testbed_cannot_run_stays_pending(testbed: Testbed, namespace: str) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "other", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "other"}},
            "template": {
                "metadata": {"labels": {"app": "other"}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
        },
    }
    apply(testbed, json.dumps(deployment))

    def waiting() -> dict[str, Any] | None:
        for pod in items(testbed, PODS.format(ns=namespace)):
            for status in pod.get("status", {}).get("containerStatuses", []):
                if "waiting" in status["state"]:
                    got: dict[str, Any] = status["state"]["waiting"]
                    if got.get("message"):
                        return got
        return None

    state = wait_for(waiting, what="a waiting container status")
    assert state == {
        "reason": "CreateContainerError",
        "message": "testbed cannot run image busybox:1.36",
    }
    (pod,) = items(testbed, PODS.format(ns=namespace))
    assert pod["status"]["phase"] == "Pending"
    status = wait_for(
        lambda: (
            testbed.rest.get(f"{APPS.format(ns=namespace, plural='deployments')}/other")
            .get("status", {})
            .get("conditions")
        ),
        what="deployment conditions",
    )
    available = next(c for c in status if c["type"] == "Available")
    assert (available["status"], available["reason"]) == ("False", "MinimumReplicasUnavailable")


def test_deployment_status_is_what_pulumi_kubernetes_awaits(
    testbed: Testbed, namespace: str
) -> None:
    handle = testbed.deploy_inference_service(namespace, "awaited", replicas=2)
    handle.wait_ready(30)
    path = f"{APPS.format(ns=namespace, plural='deployments')}/awaited"

    def settled() -> dict[str, Any] | None:
        deployment: dict[str, Any] = testbed.rest.get(path)
        status = deployment.get("status", {})
        return deployment if status.get("availableReplicas") == 2 else None

    deployment = wait_for(settled, what="2 available replicas")
    status = deployment["status"]
    assert status["observedGeneration"] == deployment["metadata"]["generation"]
    assert (status["replicas"], status["updatedReplicas"], status["readyReplicas"]) == (2, 2, 2)
    assert "unavailableReplicas" not in status  # zero: omitted, as the real controller does
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Available"]["status"] == "True"
    assert conditions["Available"]["reason"] == "MinimumReplicasAvailable"
    progressing = conditions["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("True", "NewReplicaSetAvailable")
    assert progressing["lastUpdateTime"] and progressing["lastTransitionTime"]
    revision = deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
    (rs,) = items(testbed, APPS.format(ns=namespace, plural="replicasets"))
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision
    assert rs["spec"]["replicas"] == 2 and rs["status"]["readyReplicas"] == 2
    assert rs["status"]["fullyLabeledReplicas"] == 2 and rs["status"]["availableReplicas"] == 2
    assert rs["status"]["observedGeneration"] == rs["metadata"]["generation"]


def test_an_idle_cluster_costs_no_request(testbed: Testbed, namespace: str) -> None:
    handle = testbed.deploy_inference_service(namespace, "idle", replicas=2)
    handle.wait_ready(30)
    player = testbed._require_player()
    time.sleep(1.0)  # let the last status writes land
    before = player.requests()
    time.sleep(3.0)
    after = player.requests()
    assert after == before, (before, after)


def test_the_resync_deployment_runs_as_containers_of_its_image(
    testbed: Testbed, namespace: str
) -> None:
    for reason in (in_cluster_unavailable_reason(), container_runtime_unavailable_reason()):
        if reason is not None:
            missing_real_part(f"the loop's pods as containers: {reason}")
    if not image_present(loop_image()):
        missing_real_part(f"the loop's image {loop_image()} (python3 tools/image.py --local-base)")
    # Its own name: the coexistence policy it renders is cluster-scoped, and other tests on this
    # testbed make one under the default name. A long one: the real ReplicaSet controller's
    # generateName keeps the pod name within 63 characters, so the hostname is the pod's name.
    manifests = resync_manifests(
        namespace, loop_image(), watch_namespace=namespace, name=f"loop-{namespace}"[:60]
    )
    apply(testbed, json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}))
    (name,) = [m["metadata"]["name"] for m in manifests if m["kind"] == "Deployment"]

    def ready_pod() -> dict[str, Any] | None:
        for pod in items(testbed, PODS.format(ns=namespace)):
            conditions = pod.get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return pod
        return None

    pod = wait_for(ready_pod, timeout=90, what="the loop's pod Ready (its /readyz probe)")
    rs = testbed.rest.get(
        f"{APPS.format(ns=namespace, plural='replicasets')}/{controller(pod)['name']}"
    )
    assert controller(rs)["kind"] == "Deployment" and controller(rs)["name"] == name
    pod_name = pod["metadata"]["name"]
    assert len(pod_name) == 63  # the apiserver cut the generated name to fit
    pid = testbed.pod_host_pid(namespace, pod_name)
    assert pid is not None
    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert "resync" in command
    environ = dict(
        item.split(b"=", 1)
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if item
    )
    assert environ[b"HOSTNAME"].decode() == pod_name[:63].rstrip("-.")
    assert environ[b"POD_NAME"].decode() == pod_name and b"KUBECONFIG" not in environ
    # A crashed loop comes back (restartPolicy Always), Ready again by its probe.
    testbed.crash_pod(namespace, pod_name)

    def restarted() -> bool:
        status = testbed.rest.get(f"{PODS.format(ns=namespace)}/{pod_name}").get("status", {})
        (container,) = status.get("containerStatuses", [{}])
        return container.get("restartCount") == 1 and container.get("ready") is True

    wait_for(restarted, timeout=60, what="a restart, Ready again")
    pid = testbed.pod_host_pid(namespace, pod_name)
    assert pid is not None
    done = testbed.kubectl("delete", "deployment", name, "-n", namespace, "--wait=false")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not items(testbed, PODS.format(ns=namespace)), what="the loop's pod gone")
    wait_for(lambda: not alive(pid), what="the loop's container stopped")


def test_the_kubelet_resolves_env_and_knows_what_it_can_run() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"serviceAccountName": "sa"}}
    container = {
        "name": "loop",
        "image": "pulumi-lora:1",
        "command": ["pulumi-lora", "resync"],
        "env": [
            {"name": "A", "value": "1"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
    }
    assert resolve_env(container, pod, "198.18.0.2") == {
        "A": "1",
        "POD": "p",
        "NS": "ns",
        "IP": "198.18.0.2",
    }
    assert container_kind(container) == "resync"
    assert container_kind({"name": "sglang", "image": "lmsysorg/sglang:v0.5"}) == "emulator"
    assert container_kind({"name": "main", "image": "busybox"}) == "unsupported"
    args = ["--model-path", "m", "--host", "0.0.0.0", "--port=30000", "--enable-lora"]
    assert emulator_args(args) == ["--enable-lora"]
