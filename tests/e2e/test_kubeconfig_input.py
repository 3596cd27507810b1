"""The cluster's kubeconfig from the stack (issue 41): ``LoRAAdapter(kubeconfig=...)`` as
platform stacks pass ``cluster.kubeconfig`` on, with no stack config and no usable
``KUBECONFIG``: created, refreshed clean and destroyed through it, never in the state in
plaintext."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pulumi

from pulumi_lora import LoRAAdapter
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

from .conftest import served


def test_a_kubeconfig_output_from_the_program_creates_refreshes_and_destroys(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, tmp_path: Path
) -> None:
    content = testbed.kubeconfig_path.read_text()
    token = re.search(r"token: (\S+)", content)
    assert token is not None  # the testbed's admin user: a bearer token, CA embedded
    path = testbed.make_adapter("from-stack")
    # Nothing else can reach the cluster: no stack config, a KUBECONFIG naming no file.
    engine = LocalEngine(tmp_path / "engine", extra_env={"KUBECONFIG": str(tmp_path / "none")})

    def program() -> None:
        # as a cluster resource's output arrives: an Output, not yet known, not marked secret
        kubeconfig = pulumi.Output.from_input(content).apply(lambda text: text)
        adapter = LoRAAdapter(
            "from-stack",
            adapter_name="from-stack",
            path=path,
            inference_service=isvc.name,
            namespace=namespace,
            kubeconfig=kubeconfig,
        )
        pulumi.export("loaded", adapter.loaded)

    stack = engine.inline_stack("kubeconfig-input", "dev", program)
    try:
        up = stack.up()
        assert up.outputs["loaded"].value is True
        assert all(pod == {"from-stack": path} for pod in served(isvc).values())
        state = engine.stored_state("kubeconfig-input", "dev")
        assert token.group(1) not in state
        resources = json.loads(state)["checkpoint"]["latest"]["resources"]
        (adapter,) = [r for r in resources if r.get("id", "").endswith("/from-stack")]
        assert "ciphertext" in adapter["inputs"]["kubeconfig"]
        assert "ciphertext" in adapter["outputs"]["kubeconfig"]
        stack.refresh()
        stack.preview(refresh=True, expect_no_changes=True)
    finally:
        stack.destroy()
    assert all(pod == {} for pod in served(isvc).values())
    listed = testbed.kubectl("get", "loraadapters", "-n", namespace, "-o", "name")
    assert listed.returncode == 0 and listed.stdout.strip() == ""
