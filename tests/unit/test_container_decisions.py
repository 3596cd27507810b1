"""The testbed kubelet's container decisions (pure): the podman command line a pod's container
becomes, the kubelet's ``runAsNonRoot`` verification with its own messages, and the image
tool's wheel platforms."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pulumi_lora.deploy import resync_manifests
from pulumi_lora.testing.testbed import loop_image
from pulumi_lora.testing.testbed._container_spec import (
    ContainerRefusedError,
    Mounts,
    container_kind,
    image_uid,
    non_root_refusal,
    run_argv,
)
from pulumi_lora.testing.testbed._incluster import SERVICE_ACCOUNT_DIR, pod_hostname

ROOT = Path(__file__).resolve().parents[2]


def loop_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod as the ReplicaSet controller makes it from ``resync_manifests`` (and its container)."""
    (deployment,) = [
        m for m in resync_manifests("ops", "reg/pulumi-lora:1") if m["kind"] == "Deployment"
    ]
    template = deployment["spec"]["template"]
    pod = {
        "metadata": {"name": "loop-abc", "namespace": "ops", "uid": "u-1"},
        "spec": template["spec"],
    }
    return pod, pod["spec"]["containers"][0]


def flags(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_the_loops_container_becomes_a_locked_down_podman_run() -> None:
    pod, container = loop_pod()
    argv = run_argv(
        name="k8s_resync_loop-abc",
        pod=pod,
        container=container,
        env={"POD_NAME": "loop-abc"},
        network="/run/netns/n1",
        mounts=Mounts(Path("/state/sa"), {}),
        ulimits={"nofile": (1024, 1024)},
    )
    assert argv[:5] == ["podman", "--runtime", "runc", "run", "--rm"]
    assert flags(argv, "--network") == ["ns:/run/netns/n1"]
    assert flags(argv, "--pull") == ["never"]
    assert (
        "--read-only" in argv and "--read-only-tmpfs=false" in argv
    )  # no tmpfs it did not ask for
    assert flags(argv, "--cap-drop") == ["all"]
    assert flags(argv, "--security-opt") == [
        "no-new-privileges"
    ]  # RuntimeDefault seccomp: podman's
    assert "--user" not in argv  # the image's numeric USER is what runs
    assert flags(argv, "--memory") == [str(256 * 2**20)]
    assert flags(argv, "--volume") == [f"/state/sa:{SERVICE_ACCOUNT_DIR}:ro"]
    assert flags(argv, "--ulimit") == ["nofile=1024:1024"]
    assert flags(argv, "--env") == ["POD_NAME=loop-abc"]
    image_at = argv.index("reg/pulumi-lora:1")
    assert json.loads(flags(argv, "--entrypoint")[0]) == ["pulumi-lora", "resync"]
    assert argv[image_at + 1 :] == container["args"]


def test_security_context_fields_map_to_podman_and_pod_level_is_inherited() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
        "spec": {
            "securityContext": {"runAsUser": 1000, "runAsGroup": 2000},
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }
    container = {
        "name": "c",
        "image": "img",
        "args": ["--x"],
        "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
        "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
    }
    argv = run_argv(
        name="c", pod=pod, container=container, env={}, network="/n",
        mounts=Mounts(None, {"scratch": Path("/state/scratch")}), ulimits={},
    )  # fmt: skip
    assert flags(argv, "--user") == ["1000:2000"]
    assert flags(argv, "--cap-add") == ["net_bind_service"]
    assert flags(argv, "--security-opt") == ["seccomp=unconfined"]  # Kubernetes' default
    assert flags(argv, "--volume") == ["/state/scratch:/tmp"]
    assert "--read-only" not in argv and "--entrypoint" not in argv
    assert argv[-2:] == ["img", "--x"]  # no command: the image's ENTRYPOINT, args as its CMD


def test_volumes_other_than_empty_dir_and_claims_are_refused_by_name() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {"volumes": [{"name": "cfg", "configMap": {"name": "x"}}]},
    }
    container = {
        "name": "c",
        "image": "img",
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/x"}],
    }
    with pytest.raises(ContainerRefusedError) as refused:
        run_argv(
            name="c",
            pod=pod,
            container=container,
            env={},
            network="/n",
            mounts=Mounts(None, {}),
            ulimits={},
        )
    assert refused.value.reason == "CreateContainerConfigError"
    assert "emptyDir and PersistentVolumeClaim volumes only (volume 'cfg')" in refused.value.message


def test_a_staging_jobs_claim_and_termination_log_are_mounted() -> None:
    """A claim's directory at its mount path (under its ``subPath``) and the termination-log
    file at ``/dev/termination-log``, where the stager writes its result."""
    pod = {
        "metadata": {"name": "stage-x", "namespace": "n"},
        "spec": {"volumes": [{"name": "adapters", "persistentVolumeClaim": {"claimName": "a"}}]},
    }
    container = {
        "name": "stage",
        "image": "img",
        "args": ["stage"],
        "volumeMounts": [{"name": "adapters", "mountPath": "/staging", "subPath": "loras"}],
    }
    argv = run_argv(
        name="c",
        pod=pod,
        container=container,
        env={},
        network="/n",
        mounts=Mounts(None, {"adapters": Path("/pv/a")}, Path("/state/termination-log")),
        ulimits={},
    )
    assert "/pv/a/loras:/staging" in argv
    assert "/state/termination-log:/dev/termination-log" in argv
    assert container_kind(container) == "stage"


def test_run_as_non_root_is_verified_with_the_kubelets_messages() -> None:
    pod, container = loop_pod()
    where = '(pod: "loop-abc_ops(u-1)", container: resync)'
    assert non_root_refusal(pod, container, "65532:65532") is None
    assert non_root_refusal(pod, container, "") == (
        f"container has runAsNonRoot and image will run as root {where}"
    )
    assert non_root_refusal(pod, container, "0:0") == (
        f"container has runAsNonRoot and image will run as root {where}"
    )
    assert non_root_refusal(pod, container, "app") == (
        "container has runAsNonRoot and image has non-numeric user (app), "
        f"cannot verify user is non-root {where}"
    )
    explicit = {**container, "securityContext": {**container["securityContext"], "runAsUser": 0}}
    assert non_root_refusal(pod, explicit, "65532") == (
        f"container's runAsUser breaks non-root policy {where}"
    )
    named_but_set = {
        **container,
        "securityContext": {**container["securityContext"], "runAsUser": 7},
    }
    assert non_root_refusal(pod, named_but_set, "app") is None
    relaxed = {**container, "securityContext": {}}
    pod_relaxed = {**pod, "spec": {**pod["spec"], "securityContext": {}}}
    assert non_root_refusal(pod_relaxed, relaxed, "") is None


def test_image_users_read_as_the_cri_reports_them() -> None:
    assert image_uid("") == (0, "")
    assert image_uid("65532:65532") == (65532, "")
    assert image_uid("root") == (None, "root")


def test_hostnames_are_cut_as_the_kubelet_cuts_them() -> None:
    assert pod_hostname("short") == "short"
    long = "a" * 62 + "-bcd"
    assert pod_hostname(long) == "a" * 62  # cut to 63, the trailing dash dropped
    assert len(pod_hostname("x" * 80)) == 63


def test_the_image_tool_names_every_manylinux_tag_a_bookworm_base_runs() -> None:
    spec = importlib.util.spec_from_file_location("image", ROOT / "tools" / "image.py")
    assert spec is not None and spec.loader is not None
    image = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(image)
    tags = image.manylinux_platforms("x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert image.default_tag() == f"localhost/pulumi-lora:{image.version()}"


def test_the_platform_examples_default_image_is_what_the_image_tool_tags() -> None:
    config = yaml.safe_load((ROOT / "examples" / "platform" / "Pulumi.yaml").read_text())["config"]
    assert config["loopImage"]["default"] == loop_image()
