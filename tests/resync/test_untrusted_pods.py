"""The loop trusts a pod by who controls it, not by its label (docs/threat-model.md).

Labelled pods controlled by nobody (``pulumi_lora.testing.impostor``: Ready, answering like
SGLang), one there before the loop starts (its first listing) and one created while it runs (its
watch): neither gets a request (no ``/v1/models``, no load, never the API key) while the
InferenceService's own pods get the adapter; both are named in ``Available``'s message and in an
``UntrustedPodIgnored`` Event on the CR.
"""

from __future__ import annotations

import secrets

from _resync_harness import Cluster, wait_until
from conftest import LoopFactory

from pulumi_lora._models import ANNOTATION_API_KEY_SECRET
from pulumi_lora.testing.impostor import Impostor


def test_a_labelled_pod_the_service_does_not_control_gets_nothing_from_the_loop(
    cluster: Cluster, loops: LoopFactory
) -> None:
    key = f"sk-{secrets.token_hex(16)}"
    cluster.deploy(replicas=2, emulator_args=("--api-key", key))
    cluster.kubectl("create", "secret", "generic", "sglang-key", f"--from-literal=api-key={key}")
    path = cluster.tb.make_adapter("sql-owned")
    cluster.apply_cr(
        "sql-owned", path, annotations={ANNOTATION_API_KEY_SECRET: "sglang-key/api-key"}
    )

    def available() -> str:
        return str(cluster.conditions("sql-owned").get("Available", {}).get("message", ""))

    def warned(pod: str) -> bool:
        return any(
            e["reason"] == "UntrustedPodIgnored"
            and e["type"] == "Warning"
            and f"pod {pod} has no controller" in e["message"]
            and e["involvedObject"]["name"] == "sql-owned"
            for e in cluster.events()
        )

    with Impostor(cluster.tb, cluster.namespace, "llama", "llama-early") as early:
        loop = loops(cluster.namespace)
        wait_until(
            lambda: cluster.conditions("sql-owned").get("Loaded", {}).get("status") == "True", 20
        )
        wait_until(lambda: "pod llama-early has no controller" in available(), 10)
        wait_until(lambda: warned("llama-early"), 10, what="the Event naming llama-early")

        with Impostor(cluster.tb, cluster.namespace, "llama", "llama-late") as late:
            wait_until(lambda: "pod llama-late has no controller" in available(), 10)
            wait_until(lambda: warned("llama-late"), 10, what="the Event naming llama-late")
            sweeps = len(loop.events("verify_sweep"))
            wait_until(lambda: len(loop.events("verify_sweep")) >= sweeps + 2, 20)
            assert late.requests == [], f"llama-late was asked: {late.requests}"
        assert early.requests == [], f"llama-early was asked: {early.requests}"
        assert cluster.conditions("sql-owned")["Loaded"]["status"] == "True"
        assert loop.events("untrusted_pods")
    wait_until(lambda: "llama-early" not in available(), 10, what="the message cleared")
