"""SGLang 0.5.15's HTTP routes, handled as values: ``Request`` in, ``Response`` out.

The order per request is SGLang's (FastAPI middleware first): the API-key check, then routing
(404 for an unknown path, 405 for a known path with another method), then body validation, then
the handler.
"""

from __future__ import annotations

import secrets
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pulumi_lora.testing.emulator._bodies import (
    ChatBody,
    CompletionBody,
    GenerateBody,
    LoadBody,
    UnloadBody,
    parse_body,
)
from pulumi_lora.testing.emulator._config import EmulatorConfig
from pulumi_lora.testing.emulator._engine import Engine, Sleep
from pulumi_lora.testing.emulator._faults import FaultBook
from pulumi_lora.testing.emulator._http import (
    INTERNAL_SERVER_ERROR,
    Request,
    Response,
    empty_response,
    json_response,
)
from pulumi_lora.testing.emulator._state import DpSizeAssertionError, InferenceError, UpdateResult

__all__ = ["SGLANG_VERSION", "EmulatorApp", "Readiness", "method_not_allowed", "not_found"]

SGLANG_VERSION = "0.5.15"

_LORA_ROUTES = frozenset({"/load_lora_adapter", "/unload_lora_adapter"})
_MAX_NEW_TOKENS = 128
"""SGLang's default ``sampling_params.max_new_tokens``."""
_LOGPROB = -0.6931
"""The logprob of every emulated token (ln ½): finite, unless the adapter's weights are not."""
_KEYLESS_PREFIXES = ("/health", "/metrics")
_UNAUTHORIZED = json_response(401, {"error": "Unauthorized"})

_T = TypeVar("_T")

Handler = Callable[[Request, float], Response]
"""A route: the request and the latency to spend on it (where its real work happens)."""


def not_found() -> Response:
    """FastAPI's 404."""
    return json_response(404, {"detail": "Not Found"})


def method_not_allowed(methods: frozenset[str]) -> Response:
    """FastAPI's 405, with the ``allow`` header."""
    return json_response(
        405, {"detail": "Method Not Allowed"}, ("allow", ", ".join(sorted(methods)))
    )


class Readiness:
    """Whether ``/health`` answers 200 yet: not during the start-up delay."""

    def __init__(self, delay: float) -> None:
        self._ready_at = time.monotonic() + delay

    def ready(self) -> bool:
        """Whether the start-up delay is over."""
        return time.monotonic() >= self._ready_at

    def not_ready_for(self, seconds: float) -> None:
        """Start a new start-up delay of ``seconds`` from now."""
        self._ready_at = time.monotonic() + seconds


@dataclass(frozen=True)
class _Route:
    methods: frozenset[str]
    handler: Handler


class EmulatorApp:
    """The SGLang routes of one launch; ``handle`` may be called from many threads at once."""

    def __init__(
        self,
        config: EmulatorConfig,
        engine: Engine,
        faults: FaultBook,
        readiness: Readiness,
        sleep: Sleep,
        *,
        port: int,
        random_seed: int,
    ) -> None:
        self._config = config
        self._engine = engine
        self._faults = faults
        self._readiness = readiness
        self._sleep = sleep
        self._port = port
        self._random_seed = random_seed
        self._routes = self._route_table()

    def handle(self, request: Request) -> Response:
        """Answer one request as SGLang would."""
        if not self._authorized(request):
            return _UNAUTHORIZED
        route = self._routes.get(request.path)
        if route is None:
            return not_found()
        if request.method not in route.methods:
            return method_not_allowed(route.methods)
        try:
            return route.handler(request, self._faults.latency(request.path))
        except DpSizeAssertionError:
            return INTERNAL_SERVER_ERROR

    def _route_table(self) -> dict[str, _Route]:
        get, post = frozenset({"GET"}), frozenset({"POST"})
        server_info = _Route(get, self._simple(self._server_info))
        model_info = _Route(get, self._simple(self._model_info))
        return {
            "/load_lora_adapter": _Route(post, self._load),
            "/unload_lora_adapter": _Route(post, self._unload),
            "/v1/models": _Route(get, self._simple(self._models)),
            "/health": _Route(get, self._simple(self._health)),
            "/health_generate": _Route(get, self._simple(self._health)),
            "/server_info": server_info,
            "/get_server_info": server_info,
            "/model_info": model_info,
            "/get_model_info": model_info,
            "/generate": _Route(frozenset({"POST", "PUT"}), self._generate),
            "/v1/chat/completions": _Route(post, self._chat),
            "/v1/completions": _Route(post, self._completions),
        }

    def _simple(self, answer: Callable[[], Response]) -> Handler:
        """A route without real work: its latency passes before it answers."""

        def run(_request: Request, delay: float) -> Response:
            self._sleep(delay)
            return answer()

        return run

    def _authorized(self, request: Request) -> bool:
        """SGLang's API-key middleware, with 0.5.8's admin key for the LoRA routes."""
        if request.path.startswith(_KEYLESS_PREFIXES):
            return True
        admin_key, api_key = self._config.admin_api_key, self._config.api_key
        if request.path in _LORA_ROUTES and admin_key is not None:
            return _bearer_is(request.authorization, admin_key)
        return api_key is None or _bearer_is(request.authorization, api_key)

    # -- LoRA routes -----------------------------------------------------------------------

    def _load(self, request: Request, delay: float) -> Response:
        body = parse_body(LoadBody, request.body)
        if isinstance(body, Response):
            return body
        return _update_response(
            self._engine.load(body.lora_name, body.lora_path, body.pinned, delay)
        )

    def _unload(self, request: Request, delay: float) -> Response:
        body = parse_body(UnloadBody, request.body)
        if isinstance(body, Response):
            return body
        return _update_response(self._engine.unload(body.lora_name, delay))

    def _models(self) -> Response:
        created = int(time.time())
        name = self._config.model_name
        base = _model_entry(name, name, None, created, self._config.context_length)
        adapters = [
            _model_entry(ref.name, ref.path, name, created, None)
            for ref in self._engine.registered()
        ]
        return json_response(200, {"object": "list", "data": [base, *adapters]})

    # -- status routes ---------------------------------------------------------------------

    def _health(self) -> Response:
        return empty_response(200 if self._readiness.ready() else 503)

    def _server_info(self) -> Response:
        """Server args and ``version``. Echoes the API keys, as SGLang does: never log it."""
        config = self._config
        return json_response(
            200,
            {
                "model_path": config.model_path,
                "served_model_name": config.model_name,
                "host": config.host,
                "port": self._port,
                "api_key": config.api_key,
                "admin_api_key": config.admin_api_key,
                "enable_lora": config.lora_enabled,
                "lora_paths": [
                    {"lora_name": item.name, "lora_path": item.path, "pinned": item.pinned}
                    for item in config.lora_paths
                ],
                "max_lora_rank": config.max_lora_rank,
                "lora_target_modules": _sorted_or_none(config.pool_target_modules),
                "max_loras_per_batch": config.max_loras_per_batch,
                "max_loaded_loras": config.max_loaded_loras,
                "random_seed": self._random_seed,
                "tp_size": 1,
                "dp_size": config.dp_size,
                "context_length": config.context_length,
                "version": SGLANG_VERSION,
            },
        )

    def _model_info(self) -> Response:
        path = self._config.model_path
        return json_response(
            200,
            {
                "model_path": path,
                "tokenizer_path": path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
            },
        )

    # -- inference routes ------------------------------------------------------------------

    def _generate(self, request: Request, delay: float) -> Response:
        body = parse_body(GenerateBody, request.body)
        if isinstance(body, Response):
            return body
        try:
            prompts, names, batched = _generate_batch(body)
            broken = self._engine.infer(names, delay)
        except InferenceError as exc:
            return json_response(400, {"error": {"message": str(exc)}})
        results = [
            self._generate_result(
                prompt,
                name,
                max_new_tokens=_max_new_tokens(_nth(body.sampling_params, index)),
                logprob=bool(_nth(body.return_logprob, index)),
                finite=name not in broken,
            )
            for index, (prompt, name) in enumerate(zip(prompts, names, strict=True))
        ]
        return json_response(200, results if batched else results[0])

    def _chat(self, request: Request, delay: float) -> Response:
        body = parse_body(ChatBody, request.body)
        if isinstance(body, Response):
            return body
        adapter = _adapter_of(body.model, body.lora_path)
        try:
            self._engine.infer([adapter], delay)
        except InferenceError as exc:
            return _openai_error(str(exc))
        message = {"role": "assistant", "content": self._output(adapter), "tool_calls": None}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
        return json_response(200, self._openai_result("chat.completion", body.model, [choice]))

    def _completions(self, request: Request, delay: float) -> Response:
        body = parse_body(CompletionBody, request.body)
        if isinstance(body, Response):
            return body
        adapter = _adapter_of(body.model, body.lora_path)
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        try:
            self._engine.infer([adapter] * len(prompts), delay)
        except InferenceError as exc:
            return _openai_error(str(exc))
        choices = [
            {
                "index": index,
                "text": self._output(adapter),
                "logprobs": None,
                "finish_reason": "stop",
            }
            for index in range(len(prompts))
        ]
        return json_response(200, self._openai_result("text_completion", body.model, choices))

    def _output(self, adapter: str | None) -> str:
        """The emulated generation: it names the model and adapter that produced it."""
        text = f"emulated output of {self._config.model_name}"
        return f"{text} with LoRA adapter {adapter}" if adapter else text

    def _generate_result(
        self,
        prompt: str,
        adapter: str | None,
        *,
        max_new_tokens: int,
        logprob: bool,
        finite: bool,
    ) -> dict[str, object]:
        """One prompt's answer: a word per token, at most ``max_new_tokens``; with ``logprob``,
        each token's ``[logprob, token_id, null]`` as SGLang gives them, the logprob ``null``
        (orjson's NaN) when the adapter's weights are not ``finite``."""
        tokens = self._output(adapter).split()[:max_new_tokens]
        meta: dict[str, object] = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": len(tokens)},
            "prompt_tokens": len(prompt.split()),
        }
        if logprob:
            value = _LOGPROB if finite else None
            meta["input_token_logprobs"] = []  # from the last prompt token on: none
            meta["output_token_logprobs"] = [[value, _token_id(t), None] for t in tokens]
            meta["output_token_logprobs_length"] = len(tokens)
        meta.update(completion_tokens=len(tokens), cached_tokens=0)
        return {"text": " ".join(tokens), "meta_info": meta}

    def _openai_result(
        self, kind: str, model: str | None, choices: Sequence[Mapping[str, object]]
    ) -> dict[str, object]:
        return {
            "id": uuid.uuid4().hex,
            "object": kind,
            "created": int(time.time()),
            "model": model or self._config.model_name,
            "choices": list(choices),
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }


def _bearer_is(authorization: str | None, key: str) -> bool:
    return secrets.compare_digest((authorization or "").encode(), f"Bearer {key}".encode())


def _update_response(result: UpdateResult) -> Response:
    return json_response(200 if result.success else 400, result.body())


def _openai_error(message: str) -> Response:
    return json_response(
        400,
        {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    )


def _model_entry(
    model_id: str, root: str, parent: str | None, created: int, max_model_len: int | None
) -> dict[str, object]:
    return {
        "id": model_id,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": root,
        "parent": parent,
        "max_model_len": max_model_len,
    }


def _sorted_or_none(items: Sequence[str] | None) -> list[str] | None:
    return None if items is None else sorted(items)


def _adapter_of(model: str | None, lora_path: str | None) -> str | None:
    """SGLang's OpenAI routes: ``<base>:<adapter>``, else ``lora_path``; a bare name is base."""
    if model and ":" in model:
        return model.split(":", 1)[1]
    return lora_path


def _nth(value: _T | list[_T] | None, index: int) -> _T | None:
    """A per-prompt field of ``/generate``: one for every prompt, or a list of one each."""
    if isinstance(value, list):
        return value[index] if index < len(value) else None
    return value


def _max_new_tokens(sampling: Mapping[str, object] | None) -> int:
    """``sampling_params.max_new_tokens``, SGLang's default when absent or not a count."""
    value = (sampling or {}).get("max_new_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return _MAX_NEW_TOKENS


def _token_id(token: str) -> int:
    """A stable id for an emulated token (a 32k vocabulary, as Llama's)."""
    return zlib.crc32(token.encode()) % 32000


def _generate_batch(body: GenerateBody) -> tuple[list[str], list[str | None], bool]:
    """The prompts of a ``/generate``, the adapter of each, and whether it is a batch.

    ``InferenceError`` when there is no prompt or ``lora_path`` is not parallel to it.
    """
    prompts, batched = _prompts(body)
    if not isinstance(body.lora_path, list):
        return prompts, [body.lora_path] * len(prompts), batched
    if len(body.lora_path) != len(prompts):
        raise InferenceError(
            f"The length of lora_path ({len(body.lora_path)}) does not match the batch size "
            f"({len(prompts)})."
        )
    return prompts, list(body.lora_path), batched


def _prompts(body: GenerateBody) -> tuple[list[str], bool]:
    if isinstance(body.text, str):
        return [body.text], False
    if body.text is not None:
        return list(body.text), True
    if body.input_ids is None:
        raise InferenceError("Either text, input_ids or input_embeds should be provided.")
    rows = [row for row in body.input_ids if isinstance(row, list)]
    if rows:
        return [" ".join(map(str, row)) for row in rows], True
    return [" ".join(map(str, body.input_ids))], False
