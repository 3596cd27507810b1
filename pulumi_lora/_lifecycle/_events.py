"""What an operation says: advice for failed loads, and the Events it records on the CR."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_lora._core._ownership import UNTRUSTED_EVENT, untrusted_message
from pulumi_lora._core._reconcile import (
    PodOutcome,
)
from pulumi_lora._errors import (
    SUPPORTED_SGLANG,
    unroutable,
)
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._lifecycle._session import (
    Session,
)


def advice(outcomes: Sequence[PodOutcome]) -> str:
    """One line of what to do, fitting the class of the failures.

    What only a change of flags, spec or keys fixes comes first, then what may pass by itself;
    the first class present wins. A timeout says whether the connection or the answer was late
    (the SGLang clients' message for a connect timeout says "no connection within"); only a
    server that cannot list adapters is told about SGLang versions.
    """
    failed = [o for o in outcomes if o.error]
    by_class: dict[str, str] = {}
    for o in failed:
        kind = o.reason
        if kind == "Timeout" and "no connection within" in o.error:
            kind = "ConnectTimeout"
        if kind in ("ConnectionFailed", "ConnectTimeout") and unroutable(o.error):
            kind = "PodUnroutable"
        by_class.setdefault(kind, o.pod)
    logs = "kubectl logs {pod} -c sglang"
    advice = {
        "LoRANotEnabled": "add --enable-lora to the InferenceService's spec.extraArgs",
        "IncompatibleAdapter": (
            "raise --max-lora-rank or widen --lora-target-modules in spec.extraArgs, or use "
            "an adapter within them"
        ),
        "InvalidAdapterPath": (
            "the path must be a directory inside the sglang container holding adapter_config.json "
            "and adapter_model.safetensors"
        ),
        "Unauthorized": (
            "check the SGLang API key (api_key_secret_name or pulumi-lora:sglangApiKey)"
        ),
        "UnsupportedSGLangVersion": (
            "upgrade SGLang: this server cannot list adapters in /v1/models "
            f"(supported SGLang versions: {SUPPORTED_SGLANG})"
        ),
        "CapacityExhausted": (
            "the pod holds --max-loaded-loras adapters and can evict none: raise "
            "--max-loaded-loras (at least --max-loras-per-batch) in spec.extraArgs, or unpin or "
            "unload adapters"
        ),
        "PinStarvation": (
            "at most --max-loras-per-batch - 1 adapters can be pinned: unpin one or raise "
            "--max-loras-per-batch in spec.extraArgs"
        ),
        "IncompleteUnload": "restart the pod: SGLang refuses this adapter name until it restarts",
        "SmokeFailed": (
            "the adapter loads but a one-token generation through it failed, so it was unloaded: "
            "check its weights (NaN or infinite ones load without a word) and that it was "
            "trained for this base model; if the generation only timed out, raise "
            "pulumi-lora:smokeTimeoutSeconds; smoke_test=false loads it unchecked"
        ),
        "BadRequest": (
            f"SGLang refused the request's shape: report it with the pod's SGLang version ({logs})"
        ),
        "PodUnroutable": (
            "pod {pod}'s IP is not routable from where pulumi runs: set the adapter's transport "
            "to 'proxy' (through the apiserver; unkeyed SGLang) or 'delegated' (the in-cluster "
            "re-sync loop loads)"
        ),
        "ConnectTimeout": (
            "no connection within pulumi-lora:connectTimeoutSeconds: check that the pod is "
            "reachable from where pulumi runs (transport 'direct' needs the pod network routed "
            "there; from outside the cluster use 'proxy' or 'delegated') and that it is running"
        ),
        "ConnectionFailed": (
            "nothing accepted the connection: check that SGLang is up and listens on the pod's "
            f"container port named http (SGLang's --port) ({logs})"
        ),
        "Timeout": (
            "a pod did not answer within the SGLang client timeouts; raise "
            "pulumi-lora:loadTimeoutSeconds (unloadTimeoutSeconds, readTimeoutSeconds) if it is "
            "just slow"
        ),
        "ServerStarting": "SGLang is starting or stopping on the pod: run again once it serves",
        "ServerError": f"SGLang failed while handling the request: check its logs ({logs})",
        "InvalidResponse": (
            "the answer does not follow SGLang's LoRA HTTP contract: check what listens on the "
            f"pod's http port, and its logs ({logs})"
        ),
    }
    for kind, text in advice.items():
        if kind in by_class:
            return text.format(pod=by_class[kind])
    pod = failed[0].pod if failed else "POD"
    return f"see each pod's error above, and the SGLang logs ({logs.format(pod=pod)})"


#: Reason of the Warning Event naming labelled pods outside the controller chain.


def record_untrusted(session: Session, cr: Mapping[str, Any], untrusted: Mapping[str, str]) -> None:
    if untrusted:
        k8s.emit_event(
            session.kube,
            cr,
            reason=UNTRUSTED_EVENT,
            message=untrusted_message(session.args.inference_service, untrusted),
            warning=True,
        )


def record_outcomes(
    session: Session, cr: Mapping[str, Any], outcomes: Sequence[PodOutcome], verb: str
) -> None:
    changed = [o.pod for o in outcomes if o.did_load]
    if changed:
        k8s.emit_event(
            session.kube,
            cr,
            reason=f"Adapter{verb}",
            message=f"{verb.lower()} {session.args.adapter_name} from "
            f"{session.args.path} on {', '.join(changed)}",
        )
