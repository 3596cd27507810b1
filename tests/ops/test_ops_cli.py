"""`pulumi-lora status` and `doctor` as commands: options, output, exit codes (no cluster, but
for one line doctor prints of the testbed's apiserver)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pulumi_lora._commands._operator import doctor_command, render_table, status_command
from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import PodReport
from pulumi_lora._models import Transport
from pulumi_lora._ops import _gather
from pulumi_lora._ops._doctor import DoctorFacts, ServerProbe
from pulumi_lora._ops._status import StatusReport, adapter_line


def cr(name: str, path: str = "/adapters/x") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "models", "generation": 1},
        "spec": {"name": name, "path": path, "inferenceServiceRef": {"name": "llama"}},
        "status": {"lastLoadedAt": "2026-12-01T12:00:00Z"},
    }


@pytest.fixture
def fake_status(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """gather_status replaced by a fixed report: one CR fine, one drifted, one unreadable."""
    calls: list[tuple[Any, ...]] = []
    report = StatusReport(
        (
            adapter_line(cr("good"), [PodReport("llama-a", True, True, "/adapters/x")]),
            adapter_line(
                cr("drifted"),
                [
                    PodReport("llama-a", True, True, "/adapters/x"),
                    PodReport("llama-b", True, False),
                    PodReport("llama-c", False, False),
                ],
            ),
            adapter_line(cr("lost"), [], error="InferenceService models/llama not found"),
        )
    )

    def gather(
        source: KubeSource, namespace: str | None, transport: Transport | None = None
    ) -> StatusReport:
        calls.append((source, namespace, transport))
        return report

    monkeypatch.setattr(_gather, "gather_status", gather)
    return calls


def test_status_table_one_row_per_cr_and_pod(fake_status: list[tuple[Any, ...]]) -> None:
    result = CliRunner().invoke(status_command, ["-n", "models"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "NAMESPACE",
        "NAME",
        "ADAPTER",
        "TARGET",
        "POD",
        "LOADED",
        "PATH",
        "LAST",
        "LOADED",
        "ERROR",
    ]
    rows = [line.split() for line in lines[1:6]]
    assert rows[0][:7] == [
        "models",
        "good",
        "good",
        "models/llama",
        "llama-a",
        "yes",
        "/adapters/x",
    ]
    assert rows[2][4:6] == ["llama-b", "no"] and rows[2][-2:] == ["not", "loaded"]
    assert rows[3][4:7] == ["llama-c", "not", "ready"]
    assert "InferenceService models/llama not found" in lines[5]
    assert lines[-1] == "3 LoRAAdapter(s): 1 ok, 1 drift, 1 error"
    assert fake_status == [(KubeSource(None, None), "models", None)]


def test_status_json_and_scope_options(fake_status: list[tuple[Any, ...]]) -> None:
    result = CliRunner().invoke(status_command, ["-A", "-o", "json", "--transport", "proxy"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["summary"] == {"adapters": 3, "ok": 1, "drift": 1, "error": 1, "deleting": 0}
    assert [a["verdict"] for a in data["adapters"]] == ["ok", "drift", "error"]
    assert fake_status[0][1:] == (None, Transport.PROXY)


def test_status_exit_0_when_everything_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = StatusReport((adapter_line(cr("good"), [PodReport("a", True, True, "/adapters/x")]),))
    monkeypatch.setattr(_gather, "gather_status", lambda *a, **k: ok)
    result = CliRunner().invoke(status_command, ["-n", "models"])
    assert result.exit_code == 0
    assert result.output.splitlines()[-1] == "1 LoRAAdapter(s): 1 ok, 0 drift, 0 error"


def test_status_with_nothing_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_gather, "gather_status", lambda *a, **k: StatusReport(()))
    result = CliRunner().invoke(status_command, ["-n", "models"])
    assert (result.exit_code, result.output.strip()) == (0, "no LoRAAdapters in namespace models")


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    both = runner.invoke(status_command, ["-n", "a", "-A"])
    assert both.exit_code == 2 and "not both" in both.output
    missing = runner.invoke(status_command, ["--kubeconfig", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    bad_output = runner.invoke(doctor_command, ["llama", "-o", "yaml"])
    assert bad_output.exit_code == 2
    no_name = runner.invoke(doctor_command, [])
    assert no_name.exit_code == 2 and "INFERENCE_SERVICE" in no_name.output
    bad_secret = runner.invoke(doctor_command, ["llama", "-n", "m", "--api-key-secret", "/k"])
    assert bad_secret.exit_code == 2 and "NAME/KEY" in bad_secret.output


def test_unusable_kubeconfig_exits_2_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    for command, args in ((status_command, []), (doctor_command, ["llama"])):
        result = CliRunner().invoke(command, [*args, "--kubeconfig", str(broken)])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ")
        assert "Traceback" not in result.output


def test_help_documents_options_and_exit_codes() -> None:
    status = CliRunner().invoke(status_command, ["--help"])
    assert status.exit_code == 0
    for text in ("--all-namespaces", "--kubeconfig", "--context", "--output", "Exit 0"):
        assert text in status.output
    doctor = CliRunner().invoke(doctor_command, ["-h"])
    assert doctor.exit_code == 0
    for text in ("INFERENCE_SERVICE", "--namespace", "--api-key-secret", "--transport"):
        assert text in doctor.output


def test_doctor_prints_checks_with_fixes_and_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"runtime": "sglang", "extraArgs": ["--max-lora-rank", "8"], "containerPort": 30000}
    facts = DoctorFacts(
        "models",
        "llama",
        {"spec": spec},
        servers=(ServerProbe("llama-a", True, "0.5.15", True, 0),),
    )
    seen: list[dict[str, Any]] = []

    def gather(source: KubeSource, namespace: str, name: str, **kw: Any) -> DoctorFacts:
        seen.append({"namespace": namespace, "name": name, **kw})
        return facts

    monkeypatch.setattr(_gather, "gather_doctor", gather)
    args = ["llama", "-n", "models", "--api-key-secret", "sglang-key"]
    result = CliRunner().invoke(doctor_command, args)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == "InferenceService models/llama"
    fail = next(i for i, line in enumerate(lines) if "enable-lora" in line)
    assert lines[fail].split()[0] == "fail"
    assert lines[fail + 1].strip() == "fix: add --enable-lora to spec.extraArgs"
    assert any(line.split()[:3] == ["ok", "sglang-server", "(llama-a)"] for line in lines)
    assert lines[-1].endswith("fail")
    assert seen == [
        {
            "namespace": "models",
            "name": "llama",
            "transport": None,  # doctor tries the transports itself
            "api_key_secret": ("sglang-key", "api-key"),
        }
    ]
    as_json = CliRunner().invoke(doctor_command, [*args, "-o", "json"])
    data = json.loads(as_json.output)
    assert as_json.exit_code == 1 and data["ok"] is False
    assert {c["name"]: c["status"] for c in data["checks"]}["enable-lora"] == "fail"


def test_render_table_aligns_columns() -> None:
    text = render_table(("A", "LONGER"), [("xyz", "1"), ("p", "22")])
    assert text.splitlines() == ["A    LONGER", "xyz  1", "p    22"]


def test_doctor_prints_the_gate_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lines a user reads on a 1.36 cluster whose pods carry the gate, one held unready."""
    since = "2026-12-02T10:41:22Z"
    waiting = "waiting for 1 of 2 adapters: sql (/adapters/sql)"
    gate = {"type": "pulumi-lora.dev/adapters-loaded", "status": "False", "message": waiting}
    held = PodEndpoint(
        "llama-0",
        "models",
        "u",
        ready=True,  # its containers: a gated pod's ready
        ip="10.0.0.1",
        port=30000,
        state="Running, not Ready (ReadinessGatesNotReady)",
        gated=True,
        started_at=since,
        gate=gate | {"lastTransitionTime": since},
    )
    facts = DoctorFacts(
        "models",
        "llama",
        {"spec": {"runtime": "sglang"}},
        pods=(held,),
        gate_api=("v1",),
        now=datetime(2026, 12, 2, 10, 47, 30, tzinfo=UTC),
    )
    monkeypatch.setattr(_gather, "gather_doctor", lambda *a, **k: facts)
    result = CliRunner().invoke(doctor_command, ["llama", "-n", "models"])
    lines = result.output.splitlines()
    gate = next(i for i, line in enumerate(lines) if " readiness-gate " in line)
    assert lines[gate].split(maxsplit=2) == [
        "ok",
        "readiness-gate",
        "1/1 pods carry the readiness gate pulumi-lora.dev/adapters-loaded "
        "(MutatingAdmissionPolicy in admissionregistration.k8s.io/v1 is served)",
    ]
    assert lines[gate + 1].split(maxsplit=3) == [
        "warn",
        "gate-held",
        "(llama-0)",
        f"containers ready, held unready by the readiness gate since {since} (6 min): {waiting}",
    ]
    assert lines[gate + 2].strip() == (
        "fix: find why what it names is not loaded (pulumi-lora status, the re-sync loop's "
        "log); runbook of alert PulumiLoRAPodHeldUnready: "
        "docs/operations.md#pulumilorapodheldunready"
    )
