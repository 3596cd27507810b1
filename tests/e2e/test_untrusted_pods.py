"""The provider trusts a pod by who controls it, not by its label (docs/threat-model.md).

A tenant who may create pods in the InferenceService's namespace makes one labelled
``inference.llmkube.dev/service=NAME``, Ready, answering like SGLang, controlled by nobody
(``pulumi_lora.testing.impostor``). ``pulumi up``, refresh and destroy must send it nothing (no
``/v1/models``, no load, never the API key) and name it: in ``Available``'s message, in an
``UntrustedPodIgnored`` Event on the CR, and in the per-pod outputs.
"""

from __future__ import annotations

import json
import secrets

from pulumi_lora._kube._objects import get_adapter
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.impostor import Impostor
from pulumi_lora.testing.testbed import Testbed
from tests.e2e.conftest import drift_report, keyed_service
from tests.e2e.test_secrets import served_with
from tests.e2e.test_stack import stack_for


def test_a_labelled_pod_the_service_does_not_control_gets_nothing_from_the_provider(
    engine: LocalEngine, testbed: Testbed, namespace: str
) -> None:
    key = f"sk-{secrets.token_hex(16)}"
    handle = keyed_service(testbed, namespace, "llama", key)
    path = testbed.make_adapter("owned-only")
    declared = {
        "sql": {
            "adapter_name": "sql-lora",
            "path": path,
            "inference_service": "llama",
            "namespace": namespace,
            "api_key_secret_name": "sglang-key",
        }
    }
    with Impostor(testbed, namespace, "llama", "llama-impostor") as impostor:
        stack = stack_for(engine, testbed, declared, "impostor")
        up = stack.up()
        assert up.outputs["sql_loaded"].value is True
        assert served_with(handle, key) == [{"sql-lora": path}] * 2

        pods = {p["pod"]: p for p in up.outputs["sql_pods"].value}
        assert set(pods) == {p.name for p in handle.pods()} | {"llama-impostor"}
        ignored = pods["llama-impostor"]
        assert (ignored["ready"], ignored["loaded"], ignored["reason"]) == (
            False,
            False,
            "NotControlledByTarget",
        )
        assert "has no controller" in ignored["error"]

        cr = get_adapter(testbed.client(), namespace, "sql-lora")
        assert cr is not None
        available = next(c for c in cr["status"]["conditions"] if c["type"] == "Available")
        assert available["status"] == "True"
        assert "pod llama-impostor has no controller" in available["message"]
        events = json.loads(
            testbed.kubectl("get", "events", "-n", namespace, "-o", "json", check=True).stdout
        )["items"]
        warned = [e for e in events if e["reason"] == "UntrustedPodIgnored"]
        assert warned and all(e["type"] == "Warning" for e in warned)
        assert "pod llama-impostor has no controller" in warned[0]["message"]
        assert warned[0]["involvedObject"]["name"] == "sql-lora"

        assert drift_report(stack) is None  # the ignored pod is not drift either
        stack.destroy()
        assert served_with(handle, key) == [{}] * 2
        assert impostor.requests == [], f"the impostor was asked: {impostor.requests}"
