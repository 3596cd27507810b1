"""docs/managed-clusters.md's CI drift check, ``examples/drift-check/drift-check.sh``, run as
written against a stack on the testbed: the kubeconfig comes only from the script's ``aws eks
update-kubeconfig`` (a stand-in on ``PATH`` that writes the testbed's), the stack's virtualenv is
the one a cache restored, and the refreshing preview passes clean and fails on drift, in words.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx2

from pulumi_lora.testing.testbed import Testbed

from .conftest import EXAMPLES, ROOT, Project, served

STAND_IN_AWS = """#!/bin/sh
# aws eks update-kubeconfig --name NAME --kubeconfig PATH, as the real CLI writes one
while [ $# -gt 0 ]; do
  if [ "$1" = "--kubeconfig" ]; then cp "$TESTBED_KUBECONFIG" "$2"; exit 0; fi
  shift
done
exit 2
"""


def test_the_ci_script_passes_clean_and_fails_on_drift_in_words(
    project: Project, testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    path = testbed.make_adapter("sql-lora")  # the quickstart's default adapterPath
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2)
    handle.wait_ready(timeout=60)
    runner = project(EXAMPLES / "quickstart", stack="prod", init=False)
    runner.pulumi("stack", "init", "prod")
    runner.pulumi("config", "set", "namespace", namespace)
    runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
    runner.pulumi("up", "--yes")
    runner.pulumi("config", "rm", "pulumi-lora:kubeconfig")  # from here, only the script's
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "aws").write_text(STAND_IN_AWS, encoding="utf-8")
    (tools / "aws").chmod(0o755)
    script = tmp_path / "drift-check.sh"
    shutil.copy(ROOT / "examples" / "drift-check" / "drift-check.sh", script)
    env = {
        **runner.env,
        "PATH": os.pathsep.join([str(tools), runner.env["PATH"]]),
        "CLUSTER": "prod",
        "INFRA": str(runner.path),
        "RUNNER_TEMP": str(tmp_path),
        "TESTBED_KUBECONFIG": str(testbed.kubeconfig_path),
    }
    env.pop("KUBECONFIG", None)

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(script)], env=env, capture_output=True, text=True, timeout=300, check=False
        )

    try:
        clean = check()
        assert clean.returncode == 0, clean.stdout + clean.stderr
        first = handle.ready_pods()[0]
        httpx2.post(f"{first.url}/unload_lora_adapter", json={"lora_name": "sql-lora"}, timeout=10)
        drifted = check()
        assert drifted.returncode != 0, drifted.stdout
        said = f"drift: LoRAAdapter {namespace}/sql-lora: pod {first.name}: sql-lora not loaded"
        assert said in drifted.stdout + drifted.stderr, drifted.stdout
    finally:
        runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
    assert all(a.get("sql-lora") in (None, path) for a in served(handle).values())
