"""The testbed's kubelet runs the loop's pods as real containers of the image users deploy
(built by ``python3 tools/image.py --local-base``, as the provisioner does): what a kubelet
refuses it refuses with the kubelet's words, and a deleted pod's loop gets SIGTERM and leaves
cleanly, releasing its Lease."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.fixtures import missing_real_part
from pulumi_lora.testing.loop import wait_until
from pulumi_lora.testing.testbed import (
    Testbed,
    container_runtime_unavailable_reason,
    image_present,
    loop_image,
    netns_unavailable_reason,
)

ROOT_IMAGE = "localhost/pulumi-lora-as-root:test"


@pytest.fixture(scope="module")
def runtime() -> None:
    for reason in (netns_unavailable_reason(), container_runtime_unavailable_reason()):
        if reason is not None:
            missing_real_part(f"the loop's pods as containers: {reason}")
    if not image_present(loop_image()):
        missing_real_part(f"the loop's image {loop_image()} (python3 tools/image.py --local-base)")


@pytest.fixture(scope="module")
def root_image(runtime: None) -> Iterator[str]:
    """The loop's image with ``USER 0``: what a user gets from a Dockerfile without ``USER``."""
    build = subprocess.run(
        ["podman", "build", "--quiet", "--network=none", "--tag", ROOT_IMAGE, "-"],
        input=f"FROM {loop_image()}\nUSER 0\n",
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    yield ROOT_IMAGE
    subprocess.run(["podman", "rmi", "--force", ROOT_IMAGE], capture_output=True, check=False)


def deploy_loop(testbed: Testbed, namespace: str, image: str) -> str:
    """The loop's manifests with ``image``, watching ``namespace`` only; returns the pod's name."""
    manifests = resync_manifests(
        namespace, image, watch_namespace=namespace, name=f"loop-{namespace}"[:50]
    )
    testbed.apply_manifests(m for m in manifests if "AdmissionPolicy" not in m["kind"])
    return str(wait_until(lambda: pod_names(testbed, namespace), 60, what="the loop's pod")[0])


def await_serving_replacement(testbed: Testbed, namespace: str, gone: tuple[str, ...]) -> None:
    """Wait until the Deployment's pod that replaced ``gone`` runs its loop.

    A test ends with it so that the teardown's SIGTERM is heard: one that lands in the
    interpreter's start is dropped (PID 1), and the teardown would sit out the 30 s grace period
    (test_a_loop_pod_deleted_as_it_appears_is_not_left_terminating is the test of that case)."""
    (replacement,) = wait_until(
        lambda: [p for p in pod_names(testbed, namespace) if p not in gone], 30
    )
    started = testbed.directory / "pods" / f"{namespace}_{replacement}.log"
    wait_until(lambda: started.exists() and '"serving"' in started.read_text(), 60)


def pod_names(testbed: Testbed, namespace: str) -> list[str]:
    done = testbed.kubectl("get", "pods", "-n", namespace, "-o", "json")
    assert done.returncode == 0, done.stderr
    return [p["metadata"]["name"] for p in json.loads(done.stdout)["items"]]


def waiting(testbed: Testbed, namespace: str, pod: str) -> dict[str, str]:
    done = testbed.kubectl("get", "pod", pod, "-n", namespace, "-o", "json")
    statuses = json.loads(done.stdout).get("status", {}).get("containerStatuses") or [{}]
    found: dict[str, str] = statuses[0].get("state", {}).get("waiting") or {}
    return found


def test_run_as_non_root_refuses_an_image_that_runs_as_root(
    testbed: Testbed, namespace: str, root_image: str
) -> None:
    pod = deploy_loop(testbed, namespace, root_image)
    state = wait_until(
        lambda: waiting(testbed, namespace, pod).get("message"), 60, what="a refusal"
    )
    uid = json.loads(testbed.kubectl("get", "pod", pod, "-n", namespace, "-o", "json").stdout)[
        "metadata"
    ]["uid"]
    assert waiting(testbed, namespace, pod)["reason"] == "CreateContainerConfigError"
    assert state == (
        "container has runAsNonRoot and image will run as root "
        f'(pod: "{pod}_{namespace}({uid})", container: resync)'
    )
    listed = testbed.kubectl("get", "pods", "-n", namespace)
    assert "CreateContainerConfigError" in listed.stdout  # what `kubectl get pods` shows a user
    assert testbed.pod_host_pid(namespace, pod) is None  # nothing ran


def test_an_image_the_node_lacks_names_how_to_build_it(
    testbed: Testbed, namespace: str, runtime: None
) -> None:
    pod = deploy_loop(testbed, namespace, "ghcr.io/acme/pulumi-lora:9.9.9")
    message = wait_until(
        lambda: waiting(testbed, namespace, pod).get("message"), 60, what="a refusal"
    )
    assert waiting(testbed, namespace, pod)["reason"] == "ErrImagePull"
    assert '"ghcr.io/acme/pulumi-lora:9.9.9" is not in the node\'s local storage' in message
    assert "python3 tools/image.py" in message


def test_a_deleted_loop_pod_gets_sigterm_and_releases_its_lease(
    testbed: Testbed, namespace: str, runtime: None
) -> None:
    pod = deploy_loop(testbed, namespace, loop_image())
    log = testbed.directory / "pods" / f"{namespace}_{pod}.log"
    wait_until(
        lambda: log.exists() and '"leadership_acquired"' in log.read_text(), 60, what="leadership"
    )
    pid = testbed.pod_host_pid(namespace, pod)
    assert pid is not None
    done = testbed.kubectl("delete", "pod", pod, "-n", namespace, "--wait=false")
    assert done.returncode == 0, done.stderr
    wait_until(lambda: '"stopped"' in log.read_text(), 30, what="the loop's clean stop")
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert names.index("shutting_down") < names.index("lease_released") < names.index("stopped")
    await_serving_replacement(testbed, namespace, gone=(pod,))


def test_the_loop_image_as_pid_one_ends_on_sigterm(runtime: None) -> None:
    """The kernel drops a signal sent to a PID namespace's init that has no handler for it. The
    CLI's first act, as PID 1 of the image's container, is to end on SIGTERM, so a loop told to
    stop while it still imports goes at once instead of sitting out its grace period."""
    name = f"pulumi-lora-pid-one-{os.getpid()}"
    code = (
        "import time; "
        "from pulumi_lora._commands._main import _die_on_sigterm_as_pid_one as arm; arm(); "
        "print('armed', flush=True); time.sleep(60)"
    )
    argv = [
        "podman", "--runtime", "runc", "run", "--rm", "--name", name, "--network", "none",
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
        "--entrypoint", "/opt/pulumi-lora/bin/python", loop_image(), "-c", code,
    ]  # fmt: skip
    container = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert container.stdout is not None
        assert container.stdout.readline().strip() == "armed"
        subprocess.run(["podman", "kill", "--signal", "TERM", name], check=True, timeout=30)
        assert container.wait(timeout=20) == 128 + signal.SIGTERM  # not the 60 s sleep
    finally:
        subprocess.run(["podman", "rm", "--force", "--ignore", name], check=False, timeout=60)
        container.kill()
        container.wait()


def test_a_loop_pod_deleted_as_it_appears_is_not_left_terminating(
    testbed: Testbed, namespace: str, runtime: None
) -> None:
    """Deleted before or while its container starts, a pod still goes: the kubelet finishes
    the deletion of a pod it never started (such a pod stayed Terminating for good), and stops
    a container only once it runs (a signal sent while it is being created is lost). Within its
    grace period: a SIGTERM that lands before the loop's first line is dropped, as it would be
    on any cluster."""
    pod = deploy_loop(testbed, namespace, loop_image())
    done = testbed.kubectl("delete", "pod", pod, "-n", namespace, "--wait=false")
    assert done.returncode == 0, done.stderr
    (replacement,) = wait_until(
        lambda: [p for p in pod_names(testbed, namespace) if p != pod], 30, interval=0.01
    )
    done = testbed.kubectl("delete", "pod", replacement, "-n", namespace, "--wait=false")
    assert done.returncode == 0, done.stderr
    grace = 30  # the loop's terminationGracePeriodSeconds
    for name in (pod, replacement):
        wait_until(lambda name=name: name not in pod_names(testbed, namespace), grace + 30)
    await_serving_replacement(testbed, namespace, gone=(pod, replacement))


def test_a_stopped_testbed_leaves_no_container_behind(runtime: None) -> None:
    """Stopped while its loop pods were still being created (a ``podman run`` cut short leaves
    a container in ``Created``, which ``--rm`` never removes): none of its containers remain."""
    with Testbed(llmkube_lora_controller=False) as bed:
        namespace = bed.create_namespace("leak")
        manifests = resync_manifests(
            namespace, loop_image(), watch_namespace=namespace, replicas=2, name="leak"
        )
        bed.apply_manifests(m for m in manifests if "AdmissionPolicy" not in m["kind"])
        wait_until(lambda: len(pod_names(bed, namespace)) == 2, 60, what="the loop's two pods")
    left = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}", "--filter", f"name=_{namespace}_"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert left.stdout.strip() == ""


def test_the_image_is_its_program_and_nothing_else(runtime: None) -> None:
    """``FROM scratch`` plus deploy/slim.py's gathering: no shell to run, yet CPython, TLS and
    the stager's S3 client import, and botocore knows the two services the stager calls."""
    podman = ["podman", "--runtime", "runc", "run", "--rm", "--network", "none"]
    podman += ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
    shell = subprocess.run(
        [*podman, "--entrypoint", "/bin/sh", loop_image(), "-c", "true"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert shell.returncode != 0 and "/bin/sh" in shell.stderr, shell.stderr
    code = (
        "import ssl, boto3, botocore.session, pulumi_lora._commands._stage;"
        "print(sorted(botocore.session.get_session().get_available_services()))"
    )
    python = subprocess.run(  # HOME as the staging Jobs set it
        [*podman, "--env", "HOME=/tmp", "--entrypoint", "/opt/pulumi-lora/bin/python",
         loop_image(), "-c", code],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert python.returncode == 0, python.stderr
    assert python.stdout.strip() == "['s3', 'sts']"
