"""A platform team's whole stack through the real CLI: `examples/platform` on the testbed.

One ``pulumi up`` declares an InferenceService (pulumi-kubernetes ``CustomResource``, served by
the built ``pulumi-resource-kubernetes`` plugin), three ``LoRAAdapter`` resources that depend on
it, and ``ResyncDeployment`` (two replicas). Nothing is played by hand that a cluster does by
itself: the testbed's controllers turn the InferenceService into Deployment → ReplicaSet → pods
running emulators, and the loop's Deployment into ``pulumi-lora resync`` processes in their own
network namespaces with the in-cluster ServiceAccount a kubelet would mount. Then, with no
further ``pulumi`` command, the deployed loop heals a restarted pod, survives its leader's crash,
and after ``replicas`` 2 → 3 and ``pulumi up`` the new pod has every adapter. ``destroy`` leaves
nothing, and the audit log shows the loop used only what its RBAC grants.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from pulumi_lora._resync._settings import DEFAULT_LEASE_DURATION, DEFAULT_LEASE_NAME
from pulumi_lora.deploy import DEFAULT_NAME, RELEASE_RULE, WATCH_RULES, lease_rules
from pulumi_lora.testing.audit import audited, granted
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed, netns_unavailable_reason

from .conftest import EXAMPLES, Project, assert_clean_refresh, require_program, served

pytestmark = pytest.mark.full

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
    """The Lease holder: a loop replica's identity, ``<pod name>-<pid>``."""
    done = testbed.kubectl("get", "lease", DEFAULT_LEASE_NAME, "-n", namespace, "-o", "json")
    if done.returncode != 0:
        return ""
    return str(json.loads(done.stdout)["spec"].get("holderIdentity") or "")


def everywhere(handle: InferenceServiceHandle, expected: dict[str, str], replicas: int) -> bool:
    pods = served(handle)
    return len(pods) == replicas and all(adapters == expected for adapters in pods.values())


@pytest.fixture
def cluster() -> Iterator[Testbed]:
    """A testbed of its own whose pods all get their own network namespace (as in a cluster):
    the loop's pods, in theirs, reach the SGLang pods at their IPs."""
    reason = netns_unavailable_reason()
    if reason is not None:
        missing_real_part(f"pods in network namespaces: {reason}")
    with Testbed(default_network="netns") as bed:
        yield bed


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
    up = runner.pulumi("up", "--yes", "--skip-preview")
    assert "download" not in (up.stdout + up.stderr).lower()  # the plugin was found offline

    service = testbed.inference_service(models, "llama")
    assert everywhere(service, expected, 2)
    outputs = runner.outputs()
    assert outputs["loaded"] == dict.fromkeys(ADAPTERS, True)
    loop = kubectl_json(testbed, "get", "deployment", DEFAULT_NAME, "-n", ops)
    assert loop["status"]["availableReplicas"] == 2  # what pulumi-kubernetes awaited
    wait_until(lambda: bool(holder(testbed, ops)), 30, "a loop replica leads")
    assert_clean_refresh(runner, whole_stack=False)  # the loop's status writes are no drift

    # A restarted pod lost its adapters: the deployed loop re-loads them, no pulumi command.
    victim = service.pods()[0].name
    testbed.restart_pod(models, victim)
    wait_until(lambda: served(service).get(victim) == expected, 60, "the loop heals a restart")

    # The leader crashes: the standby takes over within the Lease duration and keeps healing.
    first = holder(testbed, ops)
    os.kill(int(first.rsplit("-", 1)[1]), signal.SIGKILL)  # no chance to release the Lease
    took = wait_until(
        lambda: holder(testbed, ops) not in ("", first),
        DEFAULT_LEASE_DURATION + 15,
        "the standby takes the Lease",
    )
    assert took <= DEFAULT_LEASE_DURATION + 5
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
