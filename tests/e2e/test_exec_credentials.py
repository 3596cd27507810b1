"""A laptop outside the cluster, whose kubeconfig authenticates only through an exec plugin
with short-lived tokens: the ``proxy`` transport loads, reads and unloads across a token's
expiry, for ExecCredential v1beta1 and v1, with the pods' IPs not routable from where the
provider runs."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import Testbed
from tests.e2e.conftest import served
from tests.e2e.laptop import Laptop, exec_kubeconfig, laptop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def outside(testbed: Testbed, netns_required: None) -> Iterator[Laptop]:
    with laptop(testbed) as room:
        yield room


@pytest.mark.parametrize(
    "api_version", ["client.authentication.k8s.io/v1beta1", "client.authentication.k8s.io/v1"]
)
def test_proxy_with_an_exec_plugin_across_a_token_expiry(
    testbed: Testbed, namespace: str, outside: Laptop, tmp_path: Path, api_version: str
) -> None:
    handle = testbed.deploy_inference_service(namespace, "execpods", replicas=2, network="netns")
    handle.wait_ready(timeout=60)
    pod_url = handle.ready_pods()[0].url
    unroutable = outside.run(
        [sys.executable, "-c", f"import httpx2; httpx2.get({pod_url!r}, timeout=5)"], timeout=60
    )
    assert unroutable.returncode != 0 and "unreachable" in unroutable.stderr, unroutable.stderr
    user = exec_kubeconfig(testbed, tmp_path / "laptop", namespace, api_version, lifetime=6)
    path = testbed.make_adapter("laptop-lora")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **user.env)
    doctor = outside.run(
        [
            str(Path(sys.executable).with_name("pulumi-lora")),
            "doctor",
            "execpods",
            "-n",
            namespace,
            "--kubeconfig",
            str(user.kubeconfig),
        ],
        env=env,
    )
    assert "only transport 'proxy' reaches the pods from here" in doctor.stdout, (
        doctor.stdout + doctor.stderr
    )
    assert "pulumi config set transport proxy" in doctor.stdout, doctor.stdout
    done = outside.run(
        [
            sys.executable,
            "-m",
            "tests.e2e.laptop",
            str(user.kubeconfig),
            str(testbed.kubeconfig_path),
            namespace,
            path,
        ],
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["create"]["loaded"] is True, report
    assert report["stale_status"] == 401, report  # the rotation really revoked the old token
    assert report["read"]["loaded"] is True, report
    assert [p["loaded"] for p in report["read"]["pods"]] == [True, True], report
    issued = user.issued()
    assert len(issued) >= 2, issued  # the plugin ran again once the first token expired
    assert all("laptop-lora" not in adapters for adapters in served(handle).values())


def test_a_failed_step_shows_the_message_not_a_traceback(
    engine: LocalEngine, testbed: Testbed, namespace: str
) -> None:
    def program() -> None:
        args = LoRAAdapterArgs(
            adapter_name="lost",
            path="/adapters/lost",
            inference_service="absent",
            namespace=namespace,
        )
        LoRAAdapter("lost", args)

    stack = engine.inline_stack("lora-errors", "message", program)
    stack.set_config("pulumi-lora:kubeconfig", auto.ConfigValue(str(testbed.kubeconfig_path)))
    printed: list[str] = []
    with pytest.raises(auto.CommandError) as failed:
        stack.up(on_output=printed.append)
    text = "\n".join(printed) + str(failed.value)
    assert f"InferenceServiceNotFound: InferenceService {namespace}/absent not found" in text, text
    assert "Traceback" not in text, text
