"""Which LoRAAdapter inputs replace, update or matter to ``create``, and the outputs.

Pure data, shared by the resource classes, the providers and the schema.
"""

from __future__ import annotations

#: Inputs whose change means a different CR or a different target: replace, old one first.
REPLACE_KEYS = (
    "adapter_name",
    "inference_service",
    "inference_service_namespace",
    "namespace",
    "resource_name",
    "kube_context",
    "kubeconfig_path",
)
#: Inputs changed in place (a path change is a swap on every pod; a source, digest, endpoint or
#: claim change stages the new content beside the old, then swaps; a new ``kubeconfig`` is the
#: same cluster's credentials, kept for the next operation; ``smoke_test`` alone reloads nothing,
#: it changes the CR's annotation, which later loads follow; ``max_unavailable`` and
#: ``drain_seconds`` only pace later swaps).
UPDATE_KEYS = (
    "path",
    "source",
    "digests",
    "source_endpoint",
    "volume_claim",
    "pinned",
    "readiness_policy",
    "ready_timeout_seconds",
    "transport",
    "api_key_secret_name",
    "api_key_secret_key",
    "kubeconfig",
    "smoke_test",
    "max_unavailable",
    "drain_seconds",
)
#: Inputs that matter only when something is created or staged (a change alone changes nothing:
#: the content staged with other credentials is the same content).
CREATE_KEYS = (
    "adopt",
    "allow_mutable",
    "source_secret_name",
    "source_service_account",
    "source_public",
)
INPUT_KEYS = REPLACE_KEYS + UPDATE_KEYS + CREATE_KEYS
#: Inputs always echoed in the outputs, defaults included (what a program reads back).
ECHOED = ("adapter_name", "path", "inference_service", "namespace")
#: Output-only keys (declared on the resource so the engine knows them).
OUTPUT_KEYS = (
    "cr_name",
    "cr_uid",
    "generation",
    "conditions",
    "loaded",
    "available",
    "ready",
    "pods",
    "loaded_path",
    "last_loaded_at",
    "content_key",
)
#: The engine's placeholder for values unknown during preview.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
