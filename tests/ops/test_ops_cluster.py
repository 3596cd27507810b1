"""`status` and `doctor` on the testbed: real apiserver, real pods' /v1/models and /server_info.

Adapters are set up with the provider's own operations (``_lifecycle.create``), which is what
``pulumi up`` runs, without paying for an engine per test.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from pulumi_lora._args import AdapterArgs
from pulumi_lora._commands._operator import doctor_command, status_command
from pulumi_lora._core._llmkube import adapter_manifest
from pulumi_lora._kube._objects import apply_adapter
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import ProviderConfig, create
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed


def run(command: click.Command, testbed: Testbed, *args: str) -> Result:
    return CliRunner().invoke(command, [*args, "--kubeconfig", str(testbed.kubeconfig_path)])


def as_json(result: Result) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.output)
    return data


def declare(testbed: Testbed, namespace: str, adapter: str, isvc: str, **kw: Any) -> str:
    """Load ``adapter`` on every Ready pod of ``isvc`` as `pulumi up` would; return its path."""
    path = testbed.make_adapter(adapter)
    args = AdapterArgs.parse(
        {"adapter_name": adapter, "path": path, "inference_service": isvc, "namespace": namespace}
        | kw
    )
    create(args, ProviderConfig(kube=KubeSource(str(testbed.kubeconfig_path))))
    return path


def deploy(testbed: Testbed, namespace: str, name: str, **kw: Any) -> InferenceServiceHandle:
    handle = testbed.deploy_inference_service(namespace, name, **kw)
    handle.wait_ready(timeout=30)
    return handle


def checks(result: Result) -> dict[str, list[str]]:
    """Check name → the statuses it got (sglang-server appears once per Ready pod)."""
    found: dict[str, list[str]] = {}
    for check in as_json(result)["checks"]:
        found.setdefault(check["name"], []).append(check["status"])
    return found


def test_status_reads_every_pod_and_reports_drift(
    testbed: Testbed, namespace: str, unload: Callable[[str, str], None]
) -> None:
    handle = deploy(testbed, namespace, "llama", replicas=3)
    sql = declare(testbed, namespace, "sql-ops", "llama")
    declare(testbed, namespace, "chat-ops", "llama")

    clean = run(status_command, testbed, "-n", namespace, "-o", "json")
    assert clean.exit_code == 0, clean.output
    data = as_json(clean)
    assert data["summary"] == {"adapters": 2, "ok": 2, "drift": 0, "error": 0, "deleting": 0}
    by_name = {a["name"]: a for a in data["adapters"]}
    assert by_name["sql-ops"]["path"] == sql
    assert by_name["sql-ops"]["last_loaded_at"]  # from the CR's status
    pods = {p.name for p in handle.ready_pods()}
    assert {p["pod"] for p in by_name["sql-ops"]["pods"]} == pods
    assert all(p["state"] == "ok" and p["path"] == sql for p in by_name["sql-ops"]["pods"])

    victim = handle.ready_pods()[1]
    unload(victim.url, "chat-ops")
    drifted = run(status_command, testbed, "-n", namespace, "-o", "json")
    assert drifted.exit_code == 1
    lines = {a["name"]: a for a in as_json(drifted)["adapters"]}
    assert lines["sql-ops"]["verdict"] == "ok"
    assert lines["chat-ops"]["verdict"] == "drift"
    assert {p["pod"]: p["state"] for p in lines["chat-ops"]["pods"]} == {
        name: "missing" if name == victim.name else "ok" for name in pods
    }

    table = run(status_command, testbed, "-n", namespace)
    assert table.exit_code == 1
    victim_row = next(
        line.split() for line in table.output.splitlines() if victim.name in line and "chat" in line
    )
    assert victim_row[5] == "no"
    assert table.output.splitlines()[-1] == "2 LoRAAdapter(s): 1 ok, 1 drift, 0 error"

    everywhere = run(status_command, testbed, "--all-namespaces", "-o", "json")
    assert everywhere.exit_code in (0, 1)  # other tests' CRs are there too
    mine = [a["name"] for a in as_json(everywhere)["adapters"] if a["namespace"] == namespace]
    assert sorted(mine) == ["chat-ops", "sql-ops"]


def test_status_reports_a_cr_whose_target_is_gone(testbed: Testbed, namespace: str) -> None:
    spec = {"name": "orphan", "path": "/adapters/orphan", "inferenceServiceRef": {"name": "ghost"}}
    apply_adapter(testbed.client(), adapter_manifest(namespace, "orphan", spec, {}))
    result = run(status_command, testbed, "-n", namespace, "-o", "json")
    assert result.exit_code == 1
    (line,) = as_json(result)["adapters"]
    assert line["verdict"] == "error"
    assert line["error"] == f"InferenceService {namespace}/ghost not found"


def test_keyed_servers_use_the_secret_and_never_print_the_key(
    testbed: Testbed, namespace: str
) -> None:
    key = "sk-ops-" + secrets.token_hex(8)
    deploy(testbed, namespace, "keyed", replicas=2, emulator_args=("--api-key", key))
    secret = Secret(
        metadata=ObjectMeta(name="sglang-key", namespace=namespace), stringData={"api-key": key}
    )
    testbed.client().create(secret)
    declare(testbed, namespace, "keyed-lora", "keyed", api_key_secret_name="sglang-key")

    outputs: list[str] = []
    status = run(status_command, testbed, "-n", namespace, "-o", "json")
    outputs.append(status.output)
    assert status.exit_code == 0, status.output  # the CR's annotation names the Secret

    keyless = run(doctor_command, testbed, "keyed", "-n", namespace, "-o", "json")
    outputs.append(keyless.output)
    assert keyless.exit_code == 1
    server = [c for c in as_json(keyless)["checks"] if c["name"] == "sglang-server"]
    assert len(server) == 2 and all(c["status"] == "fail" for c in server)
    assert all("--api-key-secret" in c["fix"] for c in server)

    keyed = run(doctor_command, testbed, "keyed", "-n", namespace, "--api-key-secret", "sglang-key")
    outputs.append(keyed.output)
    assert keyed.exit_code == 0, keyed.output
    assert sum(1 for line in keyed.output.splitlines() if "SGLang 0.5.15" in line) == 2
    for text in (*outputs, run(status_command, testbed, "-n", namespace).output):
        assert key not in text


def test_doctor_passes_a_good_and_fails_a_broken_inference_service(
    testbed: Testbed, namespace: str
) -> None:
    good = deploy(testbed, namespace, "llama", replicas=2)
    result = run(doctor_command, testbed, "llama", "-n", namespace, "-o", "json")
    assert result.exit_code == 0, result.output
    found = checks(result)
    assert found == {
        "runtime": ["ok"],
        "enable-lora": ["ok"],
        "lora-pool": ["ok"],
        "data-parallel": ["ok"],
        "load-reach": ["ok"],
        "adapter-volumes": ["warn"],  # the testbed's pods read adapters from the host
        "ports": ["warn"],  # no endpoint: Service 8080, container 30000
        "pods": ["ok"],
        "readiness-gate": ["ok"],  # the testbed's 1.36.3 serves MutatingAdmissionPolicy v1
        "transport": ["ok"],  # direct reaches the pods from here: nothing to set
        "permissions": ["ok"],  # the testbed's admin may do everything
        "sglang-server": ["ok"] * len(good.ready_pods()),
    }

    broken_args = ("--dp-size", "2", "--tokenizer-worker-num", "2")
    deploy(testbed, namespace, "broken", replicas=1, runtime="vllm", extra_args=broken_args)
    broken = run(doctor_command, testbed, "broken", "-n", namespace, "-o", "json")
    assert broken.exit_code == 1
    failed = {name for name, statuses in checks(broken).items() if "fail" in statuses}
    assert failed == {
        "runtime",
        "enable-lora",
        "lora-pool",
        "data-parallel",
        "load-reach",
        "sglang-server",
    }
    text = run(doctor_command, testbed, "broken", "-n", namespace).output
    assert "fix: add --enable-lora to spec.extraArgs" in text
    assert "fix: set spec.runtime: sglang" in text

    missing = run(doctor_command, testbed, "ghost", "-n", namespace)
    assert missing.exit_code == 1
    assert f"InferenceService {namespace}/ghost not found" in missing.output


def proxy_states(result: Result) -> Sequence[str]:
    return [p["state"] for a in as_json(result)["adapters"] for p in a["pods"]]


@pytest.mark.usefixtures("netns_required")
def test_status_and_doctor_through_the_apiserver_pod_proxy(
    testbed: Testbed, namespace: str
) -> None:
    deploy(testbed, namespace, "netted", replicas=2, network="netns")
    declare(testbed, namespace, "proxied", "netted", transport="proxy")
    status = run(status_command, testbed, "-n", namespace, "-o", "json")
    assert status.exit_code == 0, status.output
    assert proxy_states(status) == ["ok", "ok"]
    assert as_json(status)["adapters"][0]["transport"] == "proxy"
    doctor = run(doctor_command, testbed, "netted", "-n", namespace, "--transport", "proxy")
    assert doctor.exit_code == 0, doctor.output
    assert sum(1 for line in doctor.output.splitlines() if "SGLang 0.5.15" in line) == 2


def test_doctor_on_the_testbed_says_the_gate_can_be_installed(
    testbed: Testbed, namespace: str
) -> None:
    """The testbed's kube-apiserver (1.36.3) serves MutatingAdmissionPolicy v1; its pods are
    not gated: doctor's line says the gate can be installed, as printed."""
    testbed.deploy_inference_service(namespace, "llama", replicas=1).wait_ready(timeout=30)
    kubeconfig = ["--kubeconfig", str(testbed.kubeconfig_path)]
    result = CliRunner().invoke(doctor_command, ["llama", "-n", namespace, *kubeconfig])
    (line,) = [line for line in result.output.splitlines() if " readiness-gate " in line]
    assert line.split(maxsplit=2) == [
        "ok",
        "readiness-gate",
        "the cluster serves MutatingAdmissionPolicy in admissionregistration.k8s.io/v1: the "
        "readiness gate can be installed (ResyncDeployment(readiness_gate=True), or pulumi-lora "
        "readiness-gate); no pod here carries it",
    ]
    assert "gate-held" not in result.output  # no pod carries the gate
