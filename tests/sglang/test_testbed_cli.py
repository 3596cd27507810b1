"""``pulumi-lora testbed up --server sglang`` as its help shows it: a detached testbed whose pod
runs the real SGLang server, which loads an adapter from the testbed's adapter folder (seen in the
pod at ``/adapters``) and generates through it; ``status`` and ``down`` as for the emulator."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2

from pulumi_lora.testing.fixtures import require_real_sglang_pods
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.sglang import generate
from pulumi_lora.testing.testbed._process import alive
from tests._testbed_cli import cli


def test_testbed_up_with_the_real_server(tmp_path: Path) -> None:
    require_real_sglang_pods()
    assert "--server [emulator|sglang]" in cli("up", "--help").stdout

    state_dir = tmp_path / "state"
    up = cli("up", "--state-dir", str(state_dir), "--isvc", "llama", "--server", "sglang",
             "--timeout", "240", timeout=400)  # fmt: skip
    assert up.returncode == 0, up.stderr
    try:
        status = cli("status", "--state-dir", str(state_dir), "--output", "json")
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["running"] and report["healthy"], report
        (pod,) = report["health"]["pods"]
        assert pod["alive"] and pod["ready"], pod

        # The real server names the tiny model, and loads what is written under the testbed's
        # adapter folder by the path a LoRAAdapter CR would carry.
        info = httpx2.get(f"{pod['url']}/get_model_info", trust_env=False, timeout=30)
        assert info.status_code == 200 and info.json()["model_path"], info.text
        write_adapter(Path(report["dir"]) / "fsroot" / "adapters" / "cli-v1", seed="cli")
        load = httpx2.post(
            f"{pod['url']}/load_lora_adapter",
            json={"lora_name": "cli", "lora_path": "/adapters/cli-v1"},
            trust_env=False,
            timeout=60,
        )
        assert load.status_code == 200, load.text
        assert generate(pod["url"], "cli") != generate(pod["url"])
    finally:
        down = cli("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert not [p for p in (report["supervisor_pid"], *report["pids"].values()) if alive(p)]
    assert not Path(report["dir"]).exists()
