"""The advice a failed load ends with fits the class of the failure.

A user reads it at the end of ``could not load adapter 'x': loaded on 0/2 Ready pods; pod ...:
... (ADVICE)``: a connect timeout is about reaching the pod, not about load timeouts; a refused
connection about the port; capacity about the pool flags; a server error about its logs; only a
server that cannot list adapters about SGLang versions.
"""

from __future__ import annotations

import pytest

from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._errors import AdapterNotLoaded
from pulumi_lora._lifecycle import advice as _advice


def failed(reason: str, error: str = "it failed", pod: str = "llama-0") -> PodOutcome:
    return PodOutcome(pod, loaded=False, reason=reason, error=error)


CONNECT_TIMEOUT = "/load_lora_adapter: timed out: no connection within 3 s (ConnectTimeout: ...)"
ANSWER_TIMEOUT = "/load_lora_adapter: timed out: no complete answer within 300 s (ReadTimeout)"

ADVICE = {
    "LoRANotEnabled": "add --enable-lora to the InferenceService's spec.extraArgs",
    "IncompatibleAdapter": (
        "raise --max-lora-rank or widen --lora-target-modules in spec.extraArgs, or use an "
        "adapter within them"
    ),
    "InvalidAdapterPath": (
        "the path must be a directory inside the sglang container holding adapter_config.json "
        "and adapter_model.safetensors"
    ),
    "Unauthorized": "check the SGLang API key (api_key_secret_name or pulumi-lora:sglangApiKey)",
    "UnsupportedSGLangVersion": (
        "upgrade SGLang: this server cannot list adapters in /v1/models "
        "(supported SGLang versions: >= 0.5.5)"
    ),
    "CapacityExhausted": (
        "the pod holds --max-loaded-loras adapters and can evict none: raise --max-loaded-loras "
        "(at least --max-loras-per-batch) in spec.extraArgs, or unpin or unload adapters"
    ),
    "PinStarvation": (
        "at most --max-loras-per-batch - 1 adapters can be pinned: unpin one or raise "
        "--max-loras-per-batch in spec.extraArgs"
    ),
    "IncompleteUnload": "restart the pod: SGLang refuses this adapter name until it restarts",
    "SmokeFailed": (
        "the adapter loads but a one-token generation through it failed, so it was unloaded: "
        "check its weights (NaN or infinite ones load without a word) and that it was trained "
        "for this base model; if the generation only timed out, raise "
        "pulumi-lora:smokeTimeoutSeconds; smoke_test=false loads it unchecked"
    ),
    "BadRequest": (
        "SGLang refused the request's shape: report it with the pod's SGLang version "
        "(kubectl logs llama-0 -c sglang)"
    ),
    "ConnectionFailed": (
        "nothing accepted the connection: check that SGLang is up and listens on the pod's "
        "container port named http (SGLang's --port) (kubectl logs llama-0 -c sglang)"
    ),
    "ServerStarting": "SGLang is starting or stopping on the pod: run again once it serves",
    "ServerError": (
        "SGLang failed while handling the request: check its logs (kubectl logs llama-0 -c sglang)"
    ),
    "InvalidResponse": (
        "the answer does not follow SGLang's LoRA HTTP contract: check what listens on the "
        "pod's http port, and its logs (kubectl logs llama-0 -c sglang)"
    ),
}


@pytest.mark.parametrize("reason", sorted(ADVICE))
def test_each_failure_class_gets_its_own_advice(reason: str) -> None:
    assert _advice([failed(reason)]) == ADVICE[reason]


def test_a_connect_timeout_is_about_reaching_the_pod_not_the_load_timeout() -> None:
    advice = _advice([failed("Timeout", CONNECT_TIMEOUT)])
    assert advice == (
        "no connection within pulumi-lora:connectTimeoutSeconds: check that the pod is reachable "
        "from where pulumi runs (transport 'direct' needs the pod network routed there; from "
        "outside the cluster use 'proxy' or 'delegated') and that it is running"
    )
    assert "loadTimeoutSeconds" not in advice


def test_a_late_answer_is_about_the_timeouts() -> None:
    assert _advice([failed("Timeout", ANSWER_TIMEOUT)]) == (
        "a pod did not answer within the SGLang client timeouts; raise "
        "pulumi-lora:loadTimeoutSeconds (unloadTimeoutSeconds, readTimeoutSeconds) if it is just "
        "slow"
    )


def test_only_a_server_that_cannot_list_adapters_hears_about_versions() -> None:
    for reason in ADVICE:
        mentions = "0.5.5" in _advice([failed(reason)])
        assert mentions == (reason == "UnsupportedSGLangVersion"), reason
    assert "0.5.5" not in _advice([failed("Timeout", CONNECT_TIMEOUT)])
    assert "0.5.5" not in _advice([failed("LoadUnsuccessful")])


def test_an_unknown_class_points_at_the_pod_errors_and_the_first_failed_pods_logs() -> None:
    outcomes = [PodOutcome("llama-0", loaded=True), failed("LoadUnsuccessful", pod="llama-1")]
    assert _advice(outcomes) == (
        "see each pod's error above, and the SGLang logs (kubectl logs llama-1 -c sglang)"
    )


def test_what_only_a_change_fixes_comes_before_what_may_pass() -> None:
    outcomes = [failed("ServerError", pod="llama-0"), failed("LoRANotEnabled", pod="llama-1")]
    assert _advice(outcomes) == ADVICE["LoRANotEnabled"]
    logs = _advice([failed("Timeout", ANSWER_TIMEOUT), failed("ServerError", pod="llama-1")])
    assert logs.startswith("a pod did not answer")


def test_the_error_a_user_reads_ends_with_the_advice() -> None:
    error = AdapterNotLoaded(
        "sql-lora",
        "loaded on 0/1 Ready pods; pod llama-0: connection failed",
        _advice([failed("ConnectionFailed")]),
    )
    assert str(error) == (
        "could not load adapter 'sql-lora': loaded on 0/1 Ready pods; pod llama-0: connection "
        f"failed ({ADVICE['ConnectionFailed']})"
    )


def test_an_unroutable_pod_ip_names_the_transport_to_use_instead() -> None:
    unreachable = (
        "pod llama-0 (http://10.4.0.7:30000) /load_lora_adapter: connection failed "
        "(ConnectError: [Errno 101] Network is unreachable)"
    )
    assert _advice([failed("ConnectionFailed", unreachable)]) == (
        "pod llama-0's IP is not routable from where pulumi runs: set the adapter's transport "
        "to 'proxy' (through the apiserver; unkeyed SGLang) or 'delegated' (the in-cluster "
        "re-sync loop loads)"
    )
    refused = "connection failed (ConnectError: [Errno 111] Connection refused)"
    assert "port named http" in _advice([failed("ConnectionFailed", refused)])
