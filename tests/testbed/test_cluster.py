"""The control plane: real binaries, verified TLS, tokens and RBAC, audit, restarts, errors."""

from __future__ import annotations

import json
import os
import signal
import ssl
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from pulumi_lora.testing.testbed import (
    PROVISION_COMMAND,
    BinaryNotFoundError,
    ProcessStartError,
    Testbed,
    find_binary,
)

VERSIONS = tomllib.loads((Path(__file__).parents[2] / "tools" / "versions.toml").read_text())


def test_versions_are_the_pinned_builds(testbed: Testbed) -> None:
    versions = testbed.versions
    assert versions["etcd"] == VERSIONS["etcd"]["version"]
    assert versions["kube-apiserver"] == f"v{VERSIONS['kubernetes']['version']}"
    assert versions["kubectl"] == f"v{VERSIONS['kubernetes']['version']}"
    assert versions["kube-controller-manager"] == f"v{VERSIONS['kubernetes']['version']}"
    out = testbed.kubectl("version", "-o", "json")
    assert out.returncode == 0, out.stderr
    server = json.loads(out.stdout)["serverVersion"]["gitVersion"]
    assert server == versions["kube-apiserver"]


def test_kubeconfig_verifies_tls_against_the_testbed_ca(testbed: Testbed) -> None:
    config = yaml.safe_load(testbed.kubeconfig_path.read_text())
    (cluster,) = config["clusters"]
    assert cluster["cluster"]["server"] == testbed.server
    assert testbed.server.startswith("https://127.0.0.1:")
    assert "insecure-skip-tls-verify" not in cluster["cluster"]
    assert cluster["cluster"]["certificate-authority-data"]
    assert config["users"][0]["user"]["token"] == testbed.admin_token
    assert testbed.kubeconfig_path.stat().st_mode & 0o077 == 0
    headers = {"Authorization": f"Bearer {testbed.admin_token}"}
    trusted = ssl.create_default_context(cafile=str(testbed.ca_path))
    assert (
        httpx2.get(f"{testbed.server}/version", verify=trusted, headers=headers).status_code == 200
    )
    # The system trust store does not know the testbed's CA: verification is really on.
    with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx2.get(f"{testbed.server}/version", headers=headers, trust_env=False)
    # lightkube and kubectl both work from the kubeconfig alone.
    names = {ns.metadata.name for ns in testbed.client().list(Namespace)}
    assert {"default", "kube-system"} <= names
    out = testbed.kubectl("get", "namespace", "default", "-o", "name")
    assert out.stdout.strip() == "namespace/default", out.stderr


def test_unauthenticated_and_wrong_tokens_are_refused(testbed: Testbed) -> None:
    trusted = ssl.create_default_context(cafile=str(testbed.ca_path))
    url = f"{testbed.server}/api/v1/namespaces"
    assert httpx2.get(url, verify=trusted).status_code == 403  # anonymous: no RBAC grant
    bad = {"Authorization": "Bearer not-a-token"}
    assert httpx2.get(url, verify=trusted, headers=bad).status_code == 401


def test_namespaces_are_unique(testbed: Testbed) -> None:
    first, second = testbed.create_namespace("Same_Prefix"), testbed.create_namespace("Same_Prefix")
    assert first != second and first.startswith("same-prefix-")


def test_missing_binary_names_the_provisioning_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PULUMI_LORA_BIN_DIR", str(tmp_path / "bin"))
    monkeypatch.setenv("PULUMI_LORA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BinaryNotFoundError) as info:
        find_binary("kube-apiserver")
    assert info.value.name == "kube-apiserver"
    assert "kube-apiserver not found" in str(info.value)
    assert f"`{PROVISION_COMMAND}`" in str(info.value)
    assert str(tmp_path / "bin") in str(info.value)
    with pytest.raises(BinaryNotFoundError, match="etcd"):
        Testbed().start()


@pytest.mark.usefixtures("testbed_binaries")
def test_lookup_order_prefers_the_explicit_bin_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = find_binary("etcd").path
    explicit = tmp_path / "bin"
    explicit.mkdir()
    (explicit / "etcd").symlink_to(real)
    monkeypatch.setenv("PULUMI_LORA_BIN_DIR", str(explicit))
    assert find_binary("etcd").path == real.resolve()
    assert find_binary("etcd").version == VERSIONS["etcd"]["version"]


@pytest.mark.usefixtures("testbed_binaries")
def test_start_failure_reports_command_and_log(tmp_path: Path) -> None:
    directory = tmp_path / "bed"
    bed = Testbed(directory=directory, apiserver_args=["--no-such-flag=1"])
    with pytest.raises(ProcessStartError) as info:
        bed.start()
    message = str(info.value)
    assert info.value.what == "kube-apiserver"
    assert "command: " in message and "--etcd-servers=http://127.0.0.1:" in message
    assert "--no-such-flag=1" in message
    assert "unknown flag" in message  # the log's tail, from the real binary
    assert bed.admin_token not in message
    # Nothing keeps running after a failed start.
    assert bed.pids == {"etcd": None, "kube-apiserver": None, "kube-controller-manager": None}


@pytest.mark.usefixtures("testbed_binaries")
def test_a_crashed_controller_manager_is_reported_not_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with Testbed(llmkube_lora_controller=False) as bed:
        pid = bed.pids["kube-controller-manager"]
        assert pid is not None and bed.controller_manager_exit is None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while bed.controller_manager_exit is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bed.controller_manager_exit == -signal.SIGKILL
        assert bed.pids["kube-controller-manager"] is None
        deadline = time.monotonic() + 10
        while "is not restarted" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "kube-controller-manager exited with status -9 and is not restarted" in caplog.text
        assert str(bed.controller_manager_log_path) in caplog.text
        time.sleep(1.0)  # the watchdog's period, twice: still nobody started it again
        assert bed.pids["kube-controller-manager"] is None


REFLECTOR_BACKOFF_MAX = 60.0
"""client-go's longest wait between a reflector's attempts: ``NewExponentialBackoffManager(800ms,
30s, 2min, 2.0, 1.0)``, the 30 s cap with 100 % jitter."""


@pytest.fixture(scope="module")
def outage_bed(testbed_binaries: object) -> Iterator[Testbed]:
    """A testbed of this module's own for the tests that stop its apiserver.

    An outage makes every client-go reflector of the real controller-manager back off (800 ms
    doubling, up to 60 s with jitter, reset only after two healthy minutes): on the session's
    testbed the next modules would wait on it, and outages close together add up. The downtime
    test runs first here, so its controller-manager meets one short outage.
    """
    with Testbed(audit=False, llmkube_lora_controller=False) as bed:
        yield bed


def test_pod_status_catches_up_after_apiserver_downtime(outage_bed: Testbed) -> None:
    testbed = outage_bed
    namespace = testbed.create_namespace("patient")
    handle = testbed.deploy_inference_service(namespace, "patient", replicas=1)
    (info,) = handle.wait_ready(30)
    testbed.stop_apiserver(graceful=False)  # down, not draining: the outage is what matters
    try:
        testbed.kill_pod_process(namespace, info.name)  # status cannot be written now
        assert not handle.pod(info.name).ready
    finally:
        testbed.start_apiserver()
    path = f"/api/v1/namespaces/{namespace}/pods/{info.name}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = testbed.rest.get(path)["status"]["containerStatuses"][0]["state"]
        if "terminated" in state:
            break
        time.sleep(0.1)
    assert "terminated" in state, state
    # The ReplicaSet, Deployment and InferenceService statuses follow once the real
    # controller-manager's watches are back. Its reflectors backed off while the apiserver was
    # down; an attempt that meets the apiserver still finishing its start fails once more and
    # doubles again: at most two of client-go's longest waits, however unlucky the jitter.
    deadline = time.monotonic() + 2 * REFLECTOR_BACKOFF_MAX + 60
    isvc = f"/apis/inference.llmkube.dev/v1alpha1/namespaces/{namespace}/inferenceservices/patient"
    cr = testbed.rest.get(isvc)
    while cr["status"]["readyReplicas"] != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
        cr = testbed.rest.get(isvc)
    assert cr["status"]["readyReplicas"] == 0, cr["status"]  # status the chain wrote last


def test_apiserver_restart_keeps_data_port_and_credentials(outage_bed: Testbed) -> None:
    testbed = outage_bed
    namespace = testbed.create_namespace("survivor")
    client = testbed.client(namespace=namespace)
    client.create(ConfigMap(metadata=ObjectMeta(name="survivor"), data={"k": "v"}))
    server, pid = testbed.server, testbed.pids["kube-apiserver"]
    testbed.restart_apiserver(graceful=False)
    assert testbed.server == server and testbed.pids["kube-apiserver"] != pid
    assert client.get(ConfigMap, "survivor").data == {"k": "v"}
    out = testbed.kubectl("get", "configmap", "survivor", "-n", namespace, "-o", "name")
    assert out.stdout.strip() == "configmap/survivor", out.stderr


def test_apiserver_stop_and_start(outage_bed: Testbed) -> None:
    testbed = outage_bed
    testbed.stop_apiserver()  # SIGTERM and the drain, as a rolling restart
    assert testbed.pids["kube-apiserver"] is None
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(
            f"{testbed.server}/readyz",
            verify=ssl.create_default_context(cafile=str(testbed.ca_path)),
        )
    testbed.start_apiserver()
    assert testbed.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
