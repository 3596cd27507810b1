"""The one exception tree of pulumi-lora: every failure it raises is a `PulumiLoRAError`.

Each class says as data whether to retry (``retryable``) and the condition ``reason``. Errors
never carry request headers, so an API key cannot reach a log.
"""

# The names say what happened (`Unauthorized`, `NoReadyPods`), as in httpx2 and kopf; an "Error"
# suffix on each would only add noise to the `reason`-like vocabulary.
# ruff: noqa: N818

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AdapterNotLoaded",
    "ApiserverUnreachable",
    "BadRequest",
    "ClusterError",
    "ConfigurationError",
    "EvictionImpossible",
    "Forbidden",
    "IncompatibleAdapter",
    "IncompleteUnload",
    "InferenceServiceNotFound",
    "InvalidAdapterPath",
    "LoRADisabled",
    "NameCollision",
    "NoReadyPods",
    "PartialReach",
    "PermanentSGLangError",
    "PinStarvation",
    "PulumiLoRAError",
    "RuntimeMismatch",
    "SGLangConnectionError",
    "SGLangError",
    "SGLangProtocolError",
    "SGLangServerError",
    "SGLangTimeout",
    "ServerStarting",
    "SmokeFailed",
    "SwapRolledBack",
    "TransientSGLangError",
    "TransportUnavailable",
    "Unauthorized",
    "UnsupportedServer",
]

EXCERPT_CHARS = 500
"""Longest body excerpt or server message an error keeps: enough to read, too little to flood."""


def _excerpt(text: bytes | str) -> str:
    """The first `EXCERPT_CHARS` characters of a body, decoded leniently, marked when cut."""
    if isinstance(text, bytes):
        # Decode only what can appear: a 1 MiB body is not decoded to keep 500 characters.
        text = text[: EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
        cut = len(text) > EXCERPT_CHARS
    else:
        cut = len(text) > EXCERPT_CHARS
    return text[:EXCERPT_CHARS] + ("…[truncated]" if cut else "")


def _restore(cls: type[PulumiLoRAError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """Rebuild a pickled error without calling ``__init__`` (whose signature varies by class)."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class PulumiLoRAError(Exception):
    """Root of every error pulumi-lora raises; catch it to catch them all."""

    retryable: ClassVar[bool] = False
    """Whether the same operation may succeed if retried later (with backoff)."""
    reason: ClassVar[str] = "Error"
    """CamelCase Kubernetes condition reason for this failure."""

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and copy by state: the subclasses' keyword-only constructors can't be replayed."""
        return (_restore, (type(self), self.args, self.__dict__))


# --- SGLang -------------------------------------------------------------------------------------


class SGLangError(PulumiLoRAError):
    """An SGLang server answered with a failure, or gave no usable answer.

    ``target`` names the server (pod or URL), ``route`` the path called, ``status_code`` the HTTP
    status (``None`` when no response came back), ``server_message`` the text SGLang gave (if
    any) and ``body_excerpt`` the start of the raw body; the last two are truncated.
    ``maybe_applied`` is True when the request was sent but no complete answer came back (a read
    timeout, a connection broken mid-exchange): the server may have acted on it, or still may.
    """

    reason = "SGLangError"
    default_message: ClassVar[str] = "SGLang request failed"
    """The explanation used when the raiser gives none: what happened and what to do."""

    def __init__(
        self,
        message: str | None = None,
        *,
        target: str,
        route: str,
        status_code: int | None = None,
        server_message: str | None = None,
        body: bytes | str = b"",
        maybe_applied: bool = False,
    ) -> None:
        self.message = message or self.default_message
        self.maybe_applied = maybe_applied
        self.target = target
        self.route = route
        self.status_code = status_code
        self.server_message = None if server_message is None else _excerpt(server_message)
        self.body_excerpt = _excerpt(body)
        super().__init__(self.message)

    def __str__(self) -> str:
        status = "no response" if self.status_code is None else f"HTTP {self.status_code}"
        text = f"{self.message} [{self.target} {self.route}: {status}]"
        if self.server_message:
            return f"{text} SGLang said: {self.server_message}"
        if self.body_excerpt:
            return f"{text} body: {self.body_excerpt}"
        return text


class TransientSGLangError(SGLangError):
    """A failure that may pass by itself: retry with backoff."""

    retryable = True
    reason = "SGLangUnavailable"
    default_message = "SGLang is temporarily unavailable"


class ServerStarting(TransientSGLangError):
    """HTTP 503: SGLang is starting up (loading weights) or shutting down."""

    reason = "ServerStarting"
    default_message = "SGLang is starting or shutting down (HTTP 503); retry once it is ready"


class SGLangTimeout(TransientSGLangError):
    """No complete answer within the route's timeout (connect, read, or a stalled body)."""

    reason = "Timeout"
    default_message = "SGLang did not answer in time"


class SGLangConnectionError(TransientSGLangError):
    """No connection to the server: refused, reset, unresolvable, or a proxy in between failed."""

    reason = "ConnectionFailed"
    default_message = "could not connect to SGLang"


class SGLangProtocolError(TransientSGLangError):
    """An answer outside the contract: malformed JSON, wrong types, a body over the size cap.

    Retryable because a half-written or proxied answer is usually a passing fault; a server that
    always answers like this keeps failing with the same message, which is the signal to look.
    """

    reason = "InvalidResponse"
    default_message = "SGLang's answer does not follow its LoRA HTTP contract"


class SGLangServerError(TransientSGLangError):
    """A 5xx other than 503: SGLang (or a proxy in front of it) failed while handling the call."""

    reason = "ServerError"
    default_message = "SGLang failed while handling the request"


class PermanentSGLangError(SGLangError):
    """SGLang refused the request for a reason retrying can't fix: change spec, flags or keys."""

    reason = "SGLangRejected"
    default_message = "SGLang refused the request"


class LoRADisabled(PermanentSGLangError):
    """The server was started without ``--enable-lora`` (and without ``--lora-paths``)."""

    reason = "LoRANotEnabled"
    default_message = (
        "LoRA is not enabled on this SGLang server: add `--enable-lora` (with `--max-lora-rank` "
        "and `--lora-target-modules`) to the InferenceService's spec.extraArgs"
    )


class InvalidAdapterPath(PermanentSGLangError):
    """The adapter path can't be loaded: not a directory, no adapter_config.json, no weights
    file, or a Hub id that can't be fetched (offline). SGLang passes the underlying error text
    on."""

    reason = "InvalidAdapterPath"
    default_message = (
        "SGLang could not read the adapter at this path: it must be a directory inside the "
        "SGLang container holding adapter_config.json and the weights (adapter_model."
        "safetensors), or a Hub id reachable from the pod"
    )


class IncompatibleAdapter(PermanentSGLangError):
    """The adapter's rank or target modules exceed ``--max-lora-rank``/``--lora-target-modules``."""

    reason = "IncompatibleAdapter"
    default_message = (
        "the adapter does not fit SGLang's LoRA memory pool: its rank (`r`) must be at most "
        "`--max-lora-rank` and its target_modules within `--lora-target-modules`"
    )


class PinStarvation(PermanentSGLangError):
    """Pinning would leave no unpinned slot: pinned adapters must stay below max_loras_per_batch."""

    reason = "PinStarvation"
    default_message = (
        "pinning this adapter would starve unpinned ones: at most `--max-loras-per-batch` - 1 "
        "adapters can be pinned; unpin one or raise the flag"
    )


class EvictionImpossible(PermanentSGLangError):
    """``--max-loaded-loras`` is reached and nothing can be evicted to make room.

    SGLang ≥ 0.5.6 evicts the least recently used unpinned adapter and only fails when all are
    pinned ("Didn't find any LoRA adapters when trying to evict"); SGLang ≤ 0.5.5 never evicts and
    refuses any load over the limit ("Maximum number of loaded LoRA adapters"). Both are a capacity
    problem, reported the same way instead of being retried into a thrash.
    """

    reason = "CapacityExhausted"
    default_message = (
        "SGLang holds `--max-loaded-loras` adapters and can evict none of them: raise the flag, "
        "unpin or unload adapters"
    )


class IncompleteUnload(PermanentSGLangError):
    """SGLang 0.5.23: an earlier unload of this name failed in the backend; it can't be reloaded."""

    reason = "IncompleteUnload"
    default_message = (
        "an earlier unload of this adapter did not complete inside SGLang, which refuses to load "
        "the name again until the server restarts"
    )


class Unauthorized(PermanentSGLangError):
    """401/403: the credentials were refused. The message says which ones; it never holds them."""

    reason = "Unauthorized"
    default_message = "the server refused the credentials"


class BadRequest(PermanentSGLangError):
    """A 400/422 about the request's shape (missing or ill-typed field): a client bug."""

    reason = "BadRequest"
    default_message = "SGLang rejected the request body as malformed"


class SmokeFailed(PermanentSGLangError):
    """The one-token generation through a just-loaded adapter did not answer 200 with a finite
    logprob: SGLang refused it (its 400 says why), or the adapter's weights give NaN or infinite
    logits (SGLang writes those as ``null``). The adapter loads, but would not serve."""

    reason = "SmokeFailed"
    default_message = "the smoke generation through the adapter failed"


MIN_SGLANG_VERSION = (0, 5, 5)
"""The oldest supported SGLang: from 0.5.5 on its ``/v1/models`` lists the loaded adapters, which
is where drift is read. The one place this fact is written; messages quote the two below."""
MIN_SGLANG = ".".join(map(str, MIN_SGLANG_VERSION))
""":data:`MIN_SGLANG_VERSION` as written: ``0.5.5``."""
SUPPORTED_SGLANG = f">= {MIN_SGLANG}"
"""The supported SGLang versions, as fixes and advice quote them: ``>= 0.5.5``."""


class UnsupportedServer(PermanentSGLangError):
    """The server lacks the runtime-LoRA API this client needs (see :data:`SUPPORTED_SGLANG`)."""

    reason = "UnsupportedSGLangVersion"
    default_message = (
        "this server does not provide SGLang's runtime LoRA API: pulumi-lora supports SGLang "
        f"≥ {MIN_SGLANG} (< 0.4.9 has no LoRA routes, < {MIN_SGLANG} lists no adapters in "
        "/v1/models)"
    )


# --- Kubernetes ---------------------------------------------------------------------------------


#: What the OS says when no route leads to an address (errno ENETUNREACH, EHOSTUNREACH).
UNROUTABLE = ("Network is unreachable", "No route to host")


def unroutable(error: str) -> bool:
    """Pure: whether a connection error's text says the address has no route from here (a pod
    IP seen from outside the cluster network), as opposed to nothing listening there."""
    return any(words in error for words in UNROUTABLE)


class ClusterError(PulumiLoRAError):
    """The Kubernetes side can't be used: the target is missing, wrong, or unreachable."""

    reason = "ClusterError"


class Forbidden(ClusterError):
    """The apiserver refused the identity running this (HTTP 403): a permission its RBAC lacks
    (``pulumi-lora rbac`` prints what it needs)."""

    reason = "Forbidden"


class ApiserverUnreachable(ClusterError):
    """No usable answer from the Kubernetes apiserver: refused, reset or timed out, or 429/503/504
    while it starts, restarts or sheds load. Retry later."""

    retryable = True
    reason = "ApiserverUnreachable"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(
            f"cannot reach the Kubernetes apiserver ({detail}); check the kubeconfig and context, "
            "and run again once the apiserver answers"
        )


class InferenceServiceNotFound(ClusterError):
    """The referenced InferenceService does not exist."""

    reason = "InferenceServiceNotFound"

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        super().__init__(f"InferenceService {namespace}/{name} not found")


class PartialReach(ClusterError):
    """The InferenceService's SGLang runs so that one runtime load cannot reach every request
    of a pod (several tokenizer workers, several data-parallel replicas): refused before
    anything is loaded (``_core._topology``)."""

    reason = "PartialReach"

    def __init__(self, namespace: str, name: str, why: str) -> None:
        self.namespace = namespace
        self.name = name
        super().__init__(f"InferenceService {namespace}/{name}: {why}")


class RuntimeMismatch(ClusterError):
    """The InferenceService runs another runtime than SGLang, whose LoRA API this speaks."""

    reason = "RuntimeMismatch"

    def __init__(self, namespace: str, name: str, runtime: str) -> None:
        self.namespace = namespace
        self.name = name
        self.runtime = runtime
        super().__init__(
            f'InferenceService {namespace}/{name} has runtime="{runtime}", expected sglang: '
            "pulumi-lora loads adapters through SGLang's runtime LoRA API only"
        )


class NoReadyPods(ClusterError):
    """The InferenceService has no Ready pod to load into (yet): retry until the readiness timeout.

    ``pod_states`` describes each pod seen (e.g. ``"llama-0: Pending"``) for the message.
    """

    retryable = True
    reason = "NoReadyPods"

    def __init__(self, namespace: str, name: str, pod_states: list[str]) -> None:
        self.namespace = namespace
        self.name = name
        self.pod_states = list(pod_states)
        seen = ", ".join(self.pod_states) if self.pod_states else "no pods found"
        super().__init__(f"InferenceService {namespace}/{name} has no Ready pods ({seen})")


class TransportUnavailable(ClusterError):
    """No configured way reaches the pods, e.g. a keyed SGLang behind the apiserver pod proxy
    (which strips the Authorization header). ``detail`` says why."""

    reason = "TransportUnavailable"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"cannot reach the SGLang pods: {detail}")


class NameCollision(ClusterError):
    """The adapter name on this InferenceService is already claimed by someone else (another
    LoRAAdapter, another stack, LLMKube's controller); pulumi-lora won't silently fight it."""

    reason = "NameCollision"

    def __init__(
        self, adapter_name: str, namespace: str, inference_service: str, owner: str
    ) -> None:
        self.adapter_name = adapter_name
        self.namespace = namespace
        self.inference_service = inference_service
        self.owner = owner
        super().__init__(
            f'adapter name "{adapter_name}" on InferenceService {namespace}/{inference_service} '
            f"is already claimed by {owner}"
        )


# --- Misuse -------------------------------------------------------------------------------------


class ConfigurationError(PulumiLoRAError):
    """pulumi-lora was called or configured wrongly (bad URL, timeouts, header clash): fix the
    calling code or its settings."""

    reason = "InvalidConfiguration"


# --- The outcome of a whole operation -----------------------------------------------------------


class AdapterNotLoaded(PulumiLoRAError):
    """An adapter could not be loaded (or unloaded) as the readiness policy requires.

    ``detail`` carries the per-pod story (``loaded on 1/3 Ready pods; pod x: ...``) and
    ``advice`` what to do about it, so the one error a user sees is enough to act on.
    """

    retryable = True
    reason = "LoadUnsuccessful"

    def __init__(
        self, adapter_name: str, detail: str, advice: str, *, unloading: bool = False
    ) -> None:
        self.adapter_name = adapter_name
        self.detail = detail
        self.advice = advice
        verb = "unload" if unloading else "load"
        super().__init__(f"could not {verb} adapter {adapter_name!r}: {detail} ({advice})")


class SwapRolledBack(AdapterNotLoaded):
    """A swap (a ``path`` or ``source`` change) failed on a pod and the old revision was put back
    on every pod it had reached; the CR names the old revision again, so nothing changed but the
    error. ``detail`` names the pods and SGLang's words (``_core._rollout.rollback_message``)."""

    retryable = False
    reason = "SwapRolledBack"

    def __init__(self, adapter_name: str, detail: str, advice: str) -> None:
        self.adapter_name = adapter_name
        self.detail = detail
        self.advice = advice
        PulumiLoRAError.__init__(
            self, f"could not swap adapter {adapter_name!r}: {detail} ({advice})"
        )
