"""A platform team's whole stack through the real CLI: `examples/platform` on the testbed.

One ``pulumi up`` declares an InferenceService (pulumi-kubernetes ``CustomResource``, served by
the built ``pulumi-resource-kubernetes`` plugin), three ``LoRAAdapter`` resources that depend on
it, and ``ResyncDeployment`` (two replicas) running the loop's image built from
``deploy/Dockerfile`` (``python3 tools/image.py --local-base``, as the provisioner does). Nothing
is played by hand that a cluster does by itself: the testbed's controllers turn the
InferenceService into Deployment → ReplicaSet → pods running emulators, and the loop's Deployment
into real podman containers in their own network namespaces, with the ServiceAccount a kubelet
would mount and the Deployment's security context enforced. The testbed is a ``Testbed()`` with
every default (its SGLang pods on loopback), as ``pulumi-lora testbed up`` starts it. Then, with no
further ``pulumi`` command, the deployed loop heals a restarted pod, survives its leader's crash,
and after ``replicas`` 2 → 3 and ``pulumi up`` the new pod has every adapter. ``destroy`` leaves
nothing, and the audit log shows the loop used only what its RBAC grants.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pulumi_lora._resync._settings import DEFAULT_LEASE_DURATION, DEFAULT_LEASE_NAME
from pulumi_lora.deploy import DEFAULT_NAME, RELEASE_RULE, WATCH_RULES, lease_rules
from pulumi_lora.testing.audit import audited, granted
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import (
    InferenceServiceHandle,
    Testbed,
    container_runtime_unavailable_reason,
    image_present,
    loop_image,
    netns_unavailable_reason,
)

from .conftest import EXAMPLES, Project, assert_clean_refresh, require_program, served

IMAGE_COMMAND = "python3 tools/image.py --local-base"

ADAPTERS = ("sql-lora", "chat-lora", "code-lora")


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``check`` until true; return the seconds it took (fails naming ``what``)."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.2)
    return time.monotonic() - start


def kubectl_json(testbed: Testbed, *args: str) -> dict:
    done = testbed.kubectl(*args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def holder(testbed: Testbed, namespace: str) -> str:
    """The Lease holder: a loop replica's identity, ``<pod name>-<pid>-<hex>``."""
    done = testbed.kubectl("get", "lease", DEFAULT_LEASE_NAME, "-n", namespace, "-o", "json")
    if done.returncode != 0:
        return ""
    return str(json.loads(done.stdout)["spec"].get("holderIdentity") or "")


def everywhere(handle: InferenceServiceHandle, expected: dict[str, str], replicas: int) -> bool:
    pods = served(handle)
    return len(pods) == replicas and all(adapters == expected for adapters in pods.values())


@pytest.fixture
def cluster() -> Iterator[Testbed]:
    """A testbed of its own with every default, that runs the loop's pods as containers."""
    for reason in (netns_unavailable_reason(), container_runtime_unavailable_reason()):
        if reason is not None:
            missing_real_part(f"the loop's pods as containers: {reason}")
    if not image_present(loop_image()):
        missing_real_part(f"the loop's image {loop_image()}: build it with `{IMAGE_COMMAND}`")
    with Testbed() as bed:
        assert bed.runs_containers
        yield bed


def loop_pods(testbed: Testbed, namespace: str) -> list[str]:
    """Names of the loop's pods."""
    pods = kubectl_json(
        testbed, "get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/name={DEFAULT_NAME}"
    )
    return sorted(p["metadata"]["name"] for p in pods["items"])


def assert_contained(testbed: Testbed, namespace: str, pod: str) -> None:
    """From ``/proc``, not from the spec: the loop runs as uid 65532, with no capabilities, no
    way to gain privileges, under seccomp, on a read-only root file system, in its own pid and
    network namespaces."""
    pid = testbed.pod_host_pid(namespace, pod)
    assert pid is not None, f"{pod} has no running container"
    proc = Path(f"/proc/{pid}")
    status = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines())
    assert status["Uid"].split() == ["65532"] * 4, status["Uid"]
    assert status["Gid"].split() == ["65532"] * 4, status["Gid"]
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"  # filter mode: podman's default profile
    root = next(
        line.split()
        for line in (proc / "mountinfo").read_text().splitlines()
        if line.split()[4] == "/"
    )
    assert root[5].split(",")[0] == "ro", root
    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    assert b"resync" in cmdline and any(part.endswith(b"pulumi-lora") for part in cmdline)
    for kind in ("pid", "net", "mnt"):
        assert os.readlink(proc / "ns" / kind) != os.readlink(f"/proc/self/ns/{kind}"), kind
    var_run = proc / "root" / "var" / "run"  # /var/run -> /run in Debian: resolve in the container
    if var_run.is_symlink():
        var_run = proc / "root" / os.readlink(var_run).lstrip("/")
    account = var_run / "secrets" / "kubernetes.io" / "serviceaccount"
    assert (account / "namespace").read_text() == namespace


@pytest.mark.timeout(900)
def test_the_platform_stack_runs_and_heals_itself(project: Project, cluster: Testbed) -> None:
    require_program("pulumi-resource-kubernetes")
    testbed = cluster
    assert testbed.audit_log_path is not None
    models = testbed.create_namespace("models")
    ops = testbed.create_namespace("ops")
    expected = {name: testbed.make_adapter(name) for name in ADAPTERS}

    runner = project(EXAMPLES / "platform", init=False)
    runner.pulumi("stack", "init", "dev")
    runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
    runner.pulumi("config", "set", "kubernetes:kubeconfig", str(testbed.kubeconfig_path))
    runner.pulumi("config", "set", "namespace", models)
    runner.pulumi("config", "set", "loopNamespace", ops)
    runner.pulumi("config", "set", "loopImage", loop_image())
    up = runner.pulumi("up", "--yes", "--skip-preview")
    assert "download" not in (up.stdout + up.stderr).lower()  # the plugin was found offline

    service = testbed.inference_service(models, "llama")
    assert everywhere(service, expected, 2)
    outputs = runner.outputs()
    assert outputs["loaded"] == dict.fromkeys(ADAPTERS, True)
    loop = kubectl_json(testbed, "get", "deployment", DEFAULT_NAME, "-n", ops)
    assert loop["status"]["availableReplicas"] == 2  # what pulumi-kubernetes awaited
    wait_until(lambda: bool(holder(testbed, ops)), 30, "a loop replica leads")
    for pod in loop_pods(testbed, ops):
        assert_contained(testbed, ops, pod)
    assert_clean_refresh(runner, whole_stack=False)  # the loop's status writes are no drift

    # A restarted pod lost its adapters: the deployed loop re-loads them, no pulumi command.
    victim = service.pods()[0].name
    testbed.restart_pod(models, victim)
    healed = wait_until(lambda: served(service).get(victim) == expected, 60, "the loop heals")
    print(f"platform: the deployed loop healed a restarted pod in {healed:.2f}s")

    # The leader crashes: the standby takes over within the Lease duration and keeps healing.
    first = holder(testbed, ops)
    leader = next(pod for pod in loop_pods(testbed, ops) if first.startswith(f"{pod}-"))
    testbed.crash_pod(ops, leader)  # SIGKILL: no chance to release the Lease
    took = wait_until(
        lambda: holder(testbed, ops) not in ("", first),
        DEFAULT_LEASE_DURATION + 15,
        "the standby takes the Lease",
    )
    assert took <= DEFAULT_LEASE_DURATION + 5
    print(f"platform: the standby took the Lease {took:.1f}s after the leader's crash")
    victim = service.pods()[1].name
    testbed.restart_pod(models, victim)
    wait_until(lambda: served(service).get(victim) == expected, 60, "the new leader heals")

    # Scale from the program: the new pod gets every adapter.
    runner.pulumi("config", "set", "replicas", "3")
    runner.pulumi("up", "--yes", "--skip-preview")
    wait_until(lambda: everywhere(service, expected, 3), 60, "three pods serve everything")

    runner.pulumi("destroy", "--yes", "--skip-preview")
    assert kubectl_json(testbed, "get", "loraadapters", "-n", models)["items"] == []
    for kind, where in (("deployment", ops), ("inferenceservice", models)):
        assert testbed.kubectl("get", kind, "-n", where, "-o", "name").stdout.strip() == "", kind
    # Only the ServiceAccount kube-controller-manager keeps in every namespace is left.
    accounts = testbed.kubectl("get", "serviceaccount", "-n", ops, "-o", "name").stdout.split()
    assert accounts == ["serviceaccount/default"], accounts
    for kind in ("clusterrole", "clusterrolebinding"):
        gone = testbed.kubectl("get", kind, DEFAULT_NAME)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, kind

    user = f"system:serviceaccount:{ops}:{DEFAULT_NAME}"
    used, denied = audited(testbed.audit_log_path, user)
    assert used, "the deployed loop never reached the apiserver as its ServiceAccount"
    assert not denied, [(e["verb"], e["requestURI"]) for e in denied]
    assert used <= granted([*WATCH_RULES, RELEASE_RULE, *lease_rules()])
