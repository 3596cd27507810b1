"""``pulumi-lora testbed up|status|down``: click's runner for the quick paths, a real process for
the full cycle."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx2
import pytest
import yaml
from click.testing import CliRunner

from pulumi_lora.testing.testbed import container_runtime_unavailable_reason, find_binary
from pulumi_lora.testing.testbed._cli import default_state_dir
from pulumi_lora.testing.testbed._cli import testbed_group as group
from pulumi_lora.testing.testbed._process import alive
from tests._testbed_cli import cli


def test_group_lists_its_commands() -> None:
    result = CliRunner().invoke(group, ["--help"])
    assert result.exit_code == 0
    for command in ("up", "down", "status"):
        assert command in result.output


def test_default_state_dir_follows_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULUMI_LORA_CACHE", "/somewhere")
    assert default_state_dir() == Path("/somewhere/testbed")


def test_status_and_down_without_a_testbed(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(group, ["status", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1 and "no testbed running" in result.output
    result = runner.invoke(group, ["status", "--state-dir", str(tmp_path), "-o", "json"])
    assert json.loads(result.output) == {"running": False, "state_dir": str(tmp_path)}
    result = runner.invoke(group, ["down", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0


@pytest.mark.usefixtures("testbed_binaries")
def containers_expected() -> bool:
    return container_runtime_unavailable_reason() is None or os.environ.get("CI") == "true"


def test_up_status_down(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    up = cli("up", "--state-dir", str(state_dir), "--isvc", "demo", "--replicas", "2",
             "--namespace", "cli", "--startup-delay", "0.2",
             "--adapter-claim", "adapters")  # fmt: skip
    assert up.returncode == 0, up.stderr
    kubeconfig = Path(up.stdout.strip())
    assert kubeconfig == state_dir / "kubeconfig" and kubeconfig.is_file()
    assert f"export KUBECONFIG={kubeconfig}" in up.stderr
    assert "ready" in up.stderr  # progress went to stderr
    try:
        status = cli("status", "--state-dir", str(state_dir), "--output", "json")
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["running"] and report["healthy"] and report["phase"] == "ready"
        assert report["health"]["etcd"] and report["health"]["kube-apiserver"]
        assert report["health"]["kube-controller-manager"]
        assert report["pids"]["kube-controller-manager"]
        pods = report["health"]["pods"]
        assert len(pods) == 2 and all(p["alive"] and p["ready"] for p in pods)
        for pod in pods:
            assert httpx2.get(f"{pod['url']}/health_generate", trust_env=False).status_code == 200
        text = cli("status", "--state-dir", str(state_dir))
        assert text.returncode == 0 and "testbed: running" in text.stdout
        assert "kube-controller-manager: alive" in text.stdout
        # The loop's pods run as containers of their image on the defaults where podman works
        # (always under CI=true), else as processes; status says which.
        runs = "containers" if containers_expected() else "processes"
        assert report["loop_pods"] == runs, report["loop_pods"]
        assert f"re-sync loop pods run as: {runs}" in text.stdout
        # The kubeconfig works for the real kubectl, from another process.
        kubectl = find_binary("kubectl").path
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        got = subprocess.run(
            [str(kubectl), "get", "pods", "-n", "cli", "-o", "json"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        items = json.loads(got.stdout)["items"]
        assert len(items) == 2 and all(i["status"]["phase"] == "Running" for i in items)
        # --adapter-claim: a bound claim, mounted read-only at /adapters in every SGLang pod
        for item in items:
            claims = [v["persistentVolumeClaim"]["claimName"]
                      for v in item["spec"]["volumes"] if "persistentVolumeClaim" in v]  # fmt: skip
            assert claims == ["adapters"]
            (mount,) = [m for m in item["spec"]["containers"][0]["volumeMounts"]
                        if m["name"] == "adapters"]  # fmt: skip
            assert mount["mountPath"] == "/adapters" and mount["readOnly"] is True
        bound = subprocess.run(
            [str(kubectl), "get", "pvc", "adapters", "-n", "cli", "-o", "jsonpath={.status.phase}"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert bound.stdout == "Bound", bound.stderr
        # As in every LLMKube install, LLMKube's LoRA controller acts there, as its own account,
        # and the played operator made the InferenceService's Service.
        acts = subprocess.run(
            [str(kubectl), "auth", "can-i", "update",
             "loraadapters.inference.llmkube.dev/finalizers",
             "--as=system:serviceaccount:llmkube-system:llmkube-controller-manager"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert acts.stdout.strip() == "yes", acts.stdout + acts.stderr
        service = subprocess.run(
            [str(kubectl), "get", "service", "demo", "-n", "cli",
             "-o", "jsonpath={.spec.ports[0].port}"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert service.stdout == "8080", service.stdout + service.stderr  # LLMKube's default
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        assert server == report["server"]
        again = cli("up", "--state-dir", str(state_dir))
        assert again.returncode != 0 and "already running" in again.stderr
    finally:
        down = cli("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    pids = [report["supervisor_pid"], *report["pids"].values()]
    assert not [p for p in pids if alive(p)]
    assert not Path(report["dir"]).exists()
    assert not kubeconfig.exists() and not (state_dir / "state.json").exists()
    gone = cli("status", "--state-dir", str(state_dir))
    assert gone.returncode == 1 and "no testbed running" in gone.stdout
