"""Request bodies, validated as FastAPI validates SGLang's, and its 400 for a malformed body.

SGLang overrides FastAPI's 422: a body that does not validate is a 400 with an OpenAI-style
``ErrorResponse`` whose message is the list of validation errors. Unknown keys are ignored.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from pulumi_lora.testing.emulator._http import Response, json_response

__all__ = [
    "ChatBody",
    "CompletionBody",
    "GenerateBody",
    "LoadBody",
    "UnloadBody",
    "parse_body",
]

_Body = TypeVar("_Body", bound="_Lenient")


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class LoadBody(_Lenient):
    """``POST /load_lora_adapter``."""

    lora_name: str
    lora_path: str
    pinned: bool = False


class UnloadBody(_Lenient):
    """``POST /unload_lora_adapter``."""

    lora_name: str


class GenerateBody(_Lenient):
    """``POST /generate``: ``lora_path`` holds adapter *names*, one per ``text`` when a list;
    ``sampling_params`` and ``return_logprob`` are one for all or one per prompt."""

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    lora_path: str | list[str | None] | None = None
    sampling_params: dict[str, object] | list[dict[str, object]] | None = None
    return_logprob: bool | list[bool] | None = None


class ChatBody(_Lenient):
    """``POST /v1/chat/completions``: the adapter is ``"model": "<base>:<adapter>"``."""

    model: str | None = None
    messages: list[dict[str, object]]
    lora_path: str | None = None


class CompletionBody(_Lenient):
    """``POST /v1/completions``: the adapter is ``"model": "<base>:<adapter>"``."""

    model: str | None = None
    prompt: str | list[str]
    lora_path: str | None = None


def parse_body(model: type[_Body], raw: bytes) -> _Body | Response:
    """The validated body, or the 400 SGLang answers for it."""
    if not raw.strip():
        errors: list[object] = [
            {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
        ]
    else:
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            errors = [
                {**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)
            ]
    return json_response(
        400,
        {
            "object": "error",
            "message": str(errors),
            "type": "Bad Request",
            "param": None,
            "code": 400,
        },
    )
