"""The in-cluster sandbox: what a container of a played Deployment sees, and the real loop in it.

The relay is tested on its own first (host sockets, no root needed); then a process in the
sandbox checks its own files, hostname, env and identity; then two replicas of the real re-sync
loop run from the manifests ``resync_manifests`` renders, with nothing but their in-cluster
account, and load an adapter onto netns pods across the pod-to-pod routes.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pulumi_lora._core._llmkube import adapter_manifest
from pulumi_lora._kube._objects import apply_adapter
from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import Testbed
from pulumi_lora.testing.testbed._incluster import (
    InClusterError,
    InClusterProcess,
    in_cluster_unavailable_reason,
    mount_source,
    pod_environment,
    request_token,
    run_in_cluster_pod,
    service_account_user,
)
from pulumi_lora.testing.testbed._netns import PodNetwork, allocate_pod_network
from pulumi_lora.testing.testbed._process import live_descendants
from pulumi_lora.testing.testbed._relay import RELAY_THREAD_PREFIX, Relay, _Pipe

NODE = "testbed-node"
PROBE = httpx2.Client(trust_env=False, timeout=5, limits=httpx2.Limits(max_keepalive_connections=0))

_next_index = iter(range(900, 1000))  # netns link indices clear of the pod player's counter


# --- helpers ------------------------------------------------------------------------------------


def echo_server() -> tuple[socket.socket, threading.Thread]:
    """A loopback server echoing each connection until EOF, then closing it."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve_one(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def roundtrip(address: tuple[str, int], payload: bytes) -> bytes:
    """Send ``payload``, half-close, read until EOF."""
    with socket.create_connection(address, timeout=10) as conn:

        def send() -> None:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        got = bytearray()
        while data := conn.recv(65536):
            got.extend(data)
        sender.join()
    return bytes(got)


def relay_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(RELAY_THREAD_PREFIX)]


def sandbox_mounts() -> list[str]:
    """Every mount of this session's sandbox tmpfs that any process on the host still has."""
    found, source = [], f" {mount_source()} "
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "mountinfo").read_text()
            except OSError:
                continue
            found += [f"{entry.name}: {line}" for line in text.splitlines() if source in line]
    return found


@pytest.fixture
def sandbox_required() -> None:
    reason = in_cluster_unavailable_reason()
    if reason is not None:
        from pulumi_lora.testing.fixtures import missing_real_part  # noqa: PLC0415

        missing_real_part(f"in-cluster sandbox unavailable: {reason}")


@pytest.fixture
def networks(testbed: Testbed, netns_required: None) -> Iterator[list[PodNetwork]]:
    """Allocates pod networks on demand (``networks.append`` via ``new_network``)."""
    made: list[PodNetwork] = []
    yield made
    for net in made:
        net.teardown()


def new_network(testbed: Testbed, made: list[PodNetwork]) -> PodNetwork:
    net = allocate_pod_network(testbed.id, next(_next_index))
    made.append(net)
    return net


def create_pod(testbed: Testbed, namespace: str, name: str, service_account: str) -> str:
    """A Pod object as the Deployment controller would create it; returns its UID."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "pulumi-lora-resync"}},
        "spec": {
            "serviceAccountName": service_account,
            "nodeName": NODE,
            "containers": [{"name": "resync", "image": "pulumi-lora:test"}],
        },
    }
    pod = testbed.rest.create(f"/api/v1/namespaces/{namespace}/pods", body)
    return str(pod["metadata"]["uid"])


_COLLECTIONS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


def apply_rbac(testbed: Testbed, manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """Create every object but the Deployment; return the Deployment.

    The LLMKube coexistence policy is left out: the session testbed holds LLMKube off every CR.
    """
    deployment = None
    for manifest in manifests:
        if manifest["kind"] == "Deployment":
            deployment = manifest
            continue
        if manifest["kind"].startswith("ValidatingAdmission"):
            continue
        path = _COLLECTIONS[manifest["kind"]].format(ns=manifest["metadata"].get("namespace"))
        testbed.rest.create(path, manifest)
    assert deployment is not None
    return deployment


def apiserver_port(testbed: Testbed) -> int:
    return int(testbed.server.rsplit(":", 1)[1])


# --- the relay on its own -----------------------------------------------------------------------


def test_a_pipe_dropped_by_one_side_ignores_the_other_sides_event() -> None:
    """Both sockets of a pipe ready in one ``select()``: the first event drops the pipe (a
    reset), the second must then do nothing (it re-registered closed sockets, and the relay
    thread died on ``Invalid file descriptor: -1``: a Hub fetch from a pod's four parallel
    stagings failed with ConnectError)."""
    relay = Relay(socket.create_server(("127.0.0.1", 0)), ("127.0.0.1", 9), name="unit")
    try:
        pod, host = socket.socketpair()
        pipe = _Pipe(pod, host)
        relay._pipes.add(pipe)
        relay._drop(pipe)
        relay._pump(pipe, 1, selectors.EVENT_READ | selectors.EVENT_WRITE)
        assert pipe.closed and pipe not in relay._pipes
    finally:
        relay.close()


def test_relay_copies_both_ways_half_closes_and_stops() -> None:
    server, _ = echo_server()
    listener = socket.create_server(("127.0.0.1", 0))
    relay = Relay(listener, server.getsockname(), name="unit").start()
    try:
        address = relay.address
        big = os.urandom(3 * 1024 * 1024)  # far more than one buffer: back-pressure both ways
        results: list[bytes] = []
        clients = [
            threading.Thread(target=lambda: results.append(roundtrip(address, big)))
            for _ in range(3)
        ]
        for client in clients:
            client.start()
        for client in clients:
            client.join(30)
        assert results == [big, big, big]
        assert roundtrip(address, b"") == b""  # a bare half-close is relayed too
        wait_until(lambda: relay.connections == 0, 5, what="relayed connections closed")
        assert relay.accepted == 4
    finally:
        relay.close()
        server.close()
    assert not relay.alive()
    assert not relay_threads()
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=2)


def test_relay_bounds_connections_and_refuses_a_dead_target() -> None:
    server, _ = echo_server()
    with socket.create_server(("127.0.0.1", 0)) as gone:
        dead = gone.getsockname()  # nothing listens there once closed: an apiserver that is down
    relay = Relay(
        socket.create_server(("127.0.0.1", 0)),
        server.getsockname(),
        name="bound",
        max_connections=1,
    ).start()
    down = Relay(socket.create_server(("127.0.0.1", 0)), dead, name="down").start()
    try:
        with socket.create_connection(relay.address, timeout=5) as first:
            first.sendall(b"hi")
            assert first.recv(2) == b"hi"
            with socket.create_connection(relay.address, timeout=5) as second:
                assert second.recv(1) == b""  # over the bound: closed at accept
        wait_until(lambda: relay.connections == 0, 5)
        assert relay.refused == 1
        for _ in range(2):  # the client is closed; the relay stays for when it is back
            with socket.create_connection(down.address, timeout=5) as conn:
                assert conn.recv(1) == b""
        assert down.alive()
        assert down.refused == 2
    finally:
        relay.close()
        down.close()
        server.close()


def test_relay_closes_when_its_process_exits() -> None:
    server, _ = echo_server()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    relay = Relay(
        socket.create_server(("127.0.0.1", 0)), server.getsockname(), name="pid", pid=child.pid
    ).start()
    try:
        with socket.create_connection(relay.address, timeout=5) as conn:
            child.kill()
            child.wait()
            wait_until(lambda: not relay.alive(), 5, what="the relay closed with its process")
            assert conn.recv(1) == b""
    finally:
        relay.close()
        server.close()
    assert not relay_threads()


def test_pod_environment_is_the_kubelets() -> None:
    env = pod_environment(
        {"POD_NAME": "p", "KUBECONFIG": "/x", "KUBERNETES_SERVICE_PORT": "1"},
        apiserver_port=6443,
        hostname="p",
    )
    assert "KUBECONFIG" not in env
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "1"  # the container's env wins, as in the kubelet
    assert env["KUBERNETES_SERVICE_PORT_HTTPS"] == "6443"
    assert env["KUBERNETES_PORT_6443_TCP_ADDR"] == "127.0.0.1"
    assert env["HOSTNAME"] == "p"


# --- the sandbox --------------------------------------------------------------------------------

_WHOAMI = """
import json, os, socket, ssl, urllib.request
d = "/var/run/secrets/kubernetes.io/serviceaccount"
files = {n: open(os.path.join(d, n)).read() for n in sorted(os.listdir(d))}
url = "https://%s:%s/apis/authentication.k8s.io/v1/selfsubjectreviews" % (
    os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
request = urllib.request.Request(url, data=body.encode(), headers={
    "Authorization": "Bearer " + files["token"], "Content-Type": "application/json"})
context = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
review = json.load(urllib.request.urlopen(request, context=context, timeout=10))
try:
    open(os.path.join(d, "token"), "a").close()
    writable = True
except OSError:
    writable = False
print(json.dumps({
    "files": sorted(files), "namespace": files["namespace"], "hostname": socket.gethostname(),
    "env": sorted(os.environ), "user": review["status"]["userInfo"]["username"],
    "cwd": os.getcwd(), "writable": writable,
}))
"""


def test_sandbox_sees_what_a_container_sees(
    testbed: Testbed,
    namespace: str,
    networks: list[PodNetwork],
    sandbox_required: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(testbed.kubeconfig_path))  # must not reach the pod
    sa = "whoami"
    testbed.rest.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}},
    )
    uid = create_pod(testbed, namespace, "whoami-0", sa)
    token = request_token(testbed.rest, namespace, sa, "whoami-0", uid)
    log = tmp_path / "whoami.log"
    process = run_in_cluster_pod(
        argv=[sys.executable, "-c", _WHOAMI],
        env={"POD_NAME": "whoami-0"},
        namespace=namespace,
        service_account_token=token,
        ca_pem=testbed.ca_path.read_bytes(),
        apiserver_port=apiserver_port(testbed),
        network=new_network(testbed, networks),
        log_path=log,
        name="whoami-0",
    )
    try:
        wait_until(lambda: not process.alive(), 30, what="the sandboxed process finished")
        assert process.returncode() == 0, log.read_text()
        seen = json.loads(log.read_text().splitlines()[-1])
        wait_until(lambda: process.relay is None or not process.relay.alive(), 5)
        process.start()  # a container restart: a new relay, the files written again
        wait_until(lambda: not process.alive(), 30, what="the restarted process finished")
        assert process.returncode() == 0, log.read_text()
        assert json.loads(log.read_text().splitlines()[-1]) == seen
    finally:
        process.stop()
    assert seen["user"] == service_account_user(namespace, sa)
    assert seen["files"] == ["ca.crt", "namespace", "token"]
    assert seen["namespace"] == namespace
    assert seen["hostname"] == "whoami-0"
    assert seen["cwd"] == "/"
    assert seen["writable"] is False  # read-only, as the kubelet's projected volume
    assert "KUBECONFIG" not in seen["env"]
    assert not any(name.startswith("PL_") for name in seen["env"])  # the set-up's inputs
    assert {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAME"} <= set(seen["env"])
    assert not Path("/run/secrets/kubernetes.io").exists()  # nothing on the host's file system
    assert not sandbox_mounts()
    assert not relay_threads()


# --- the real loop, two replicas ----------------------------------------------------------------


def _lease_holder(testbed: Testbed, namespace: str) -> str | None:
    lease = testbed.rest.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/x", allow=(404,)
    )
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


def _leader_gauge(url: str) -> float | None:
    try:
        text = PROBE.get(f"{url}/metrics").text
    except httpx2.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith("pulumi_lora_resync_leader "):
            return float(line.split()[1])
    return None


def _loaded_condition(testbed: Testbed, namespace: str, name: str) -> bool:
    cr = testbed.rest.get(
        f"/apis/inference.llmkube.dev/v1alpha1/namespaces/{namespace}/loraadapters/{name}"
    )
    conditions = (cr.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Loaded" and c["status"] == "True" for c in conditions)


def _ready_or_exited(process: InClusterProcess, url: str) -> bool:
    return _ready(url) or not process.alive()


def _ready(url: str) -> bool:
    try:
        return PROBE.get(f"{url}/readyz").status_code == 200
    except httpx2.HTTPError:
        return False


def test_resync_loop_runs_in_cluster(
    testbed: Testbed,
    namespace: str,
    networks: list[PodNetwork],
    sandbox_required: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(testbed.kubeconfig_path))  # must not reach the pods
    watched = namespace
    home = testbed.create_namespace("loop-home")
    manifests = resync_manifests(
        home, "pulumi-lora:test", watch_namespace=watched, replicas=2, lease_name="x",
        metrics_port=8080,
    )  # fmt: skip
    deployment = apply_rbac(testbed, manifests)
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    sa = template["spec"]["serviceAccountName"]
    argv = [*container["command"], *container["args"]]
    assert argv[:2] == ["pulumi-lora", "resync"]
    assert {"--namespace", watched, "--lease-name", "x", "--metrics-port", "8080"} <= set(argv)

    handle = testbed.deploy_inference_service(watched, "llama", replicas=2, network="netns")
    handle.wait_ready(timeout=60)

    replicas: dict[str, tuple[InClusterProcess, str]] = {}
    started: dict[str, float] = {}
    ready_after: dict[str, float] = {}
    try:
        for i in range(2):
            pod = f"resync-{i}"
            uid = create_pod(testbed, home, pod, sa)
            token = request_token(testbed.rest, home, sa, pod, uid)
            net = new_network(testbed, networks)
            started[pod] = time.monotonic()
            process = run_in_cluster_pod(
                argv=argv,
                env={"POD_NAME": pod, "POD_NAMESPACE": home},  # the container's fieldRefs
                namespace=home,
                service_account_token=token,
                ca_pem=testbed.ca_path.read_bytes(),
                apiserver_port=apiserver_port(testbed),
                network=net,
                log_path=tmp_path / f"{pod}.log",
                name=pod,
            )
            replicas[pod] = (process, f"http://{net.pod_ip}:8080")
        for pod, (process, url) in replicas.items():
            wait_until(partial(_ready_or_exited, process, url), 60, what=f"{pod} Ready")
            assert process.alive(), (tmp_path / f"{pod}.log").read_text()[-3000:]
            ready_after[pod] = time.monotonic() - started[pod]
            assert PROBE.get(f"{url}/healthz").status_code == 200
        print(f"process start -> Ready: {ready_after}")

        holder = wait_until(lambda: _lease_holder(testbed, home), 30, what="a Lease holder")
        leaders = [pod for pod in replicas if holder.startswith(f"{pod}-")]
        assert len(leaders) == 1, holder

        def gauges() -> dict[str, float | None] | None:
            seen = {pod: _leader_gauge(url) for pod, (_, url) in replicas.items()}
            return seen if sorted(v or 0.0 for v in seen.values()) == [0.0, 1.0] else None

        assert wait_until(gauges, 30, what="one leader gauge at 1")[leaders[0]] == 1.0

        path = testbed.make_adapter("incluster-lora")
        spec = {"name": "incluster-lora", "path": path, "inferenceServiceRef": {"name": "llama"}}
        apply_adapter(testbed.client(), adapter_manifest(watched, "incluster-lora", spec, {}))

        def loaded_everywhere() -> bool:
            pods = handle.ready_pods()
            return len(pods) == 2 and all(
                any(
                    m["id"] == "incluster-lora"
                    for m in PROBE.get(f"{p.url}/v1/models").json()["data"]
                )
                for p in pods
            )

        wait_until(loaded_everywhere, 60, what="the adapter loaded on every netns pod")
        wait_until(
            partial(_loaded_condition, testbed, watched, "incluster-lora"),
            30,
            what="the leader wrote Loaded=True",
        )

        user = service_account_user(home, sa)
        audit = testbed.audit_log_path
        assert audit is not None
        events = [json.loads(line) for line in audit.read_text().splitlines() if user in line]
        verbs = {(e["verb"], (e.get("objectRef") or {}).get("resource")) for e in events}
        assert ("watch", "pods") in verbs
        assert ("update", "leases") in verbs or ("create", "leases") in verbs
        assert ("patch", "loraadapters") in verbs  # the status write
        assert all(e["user"]["username"] == user for e in events)
    finally:
        pids = [process.pid for process, _ in replicas.values()]
        for process, _ in replicas.values():
            process.terminate()
        for process, _ in replicas.values():
            process.stop()
        testbed.kubectl("delete", "loraadapters.inference.llmkube.dev", "--all", "-n", watched)

    live = live_descendants()
    assert not [pid for pid in pids if pid in live]
    assert not relay_threads()
    assert not sandbox_mounts()
    assert not Path("/run/secrets/kubernetes.io").exists()


def test_a_missing_network_namespace_is_named(
    testbed: Testbed, sandbox_required: None, tmp_path: Path
) -> None:
    gone = PodNetwork("pulumi-lora-no-such-netns", "vhnone", "198.18.0.1", "198.18.0.2")
    with pytest.raises(InClusterError, match="pulumi-lora-no-such-netns does not exist"):
        run_in_cluster_pod(
            argv=["true"],
            env={},
            namespace="default",
            service_account_token="t",
            ca_pem=b"",
            apiserver_port=apiserver_port(testbed),
            network=gone,
            log_path=tmp_path / "x.log",
            name="x",
        )
    assert not relay_threads()
