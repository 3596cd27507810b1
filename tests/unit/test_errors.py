"""The exception tree: one root, retry policy and condition reason as data, safe messages."""

from __future__ import annotations

import ast
import copy
import inspect
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from pulumi_lora import _errors
from pulumi_lora._errors import (
    AdapterNotLoaded,
    ClusterError,
    ConfigurationError,
    InferenceServiceNotFound,
    LoRADisabled,
    NameCollision,
    NoReadyPods,
    PartialReach,
    PermanentSGLangError,
    PulumiLoRAError,
    RuntimeMismatch,
    SGLangError,
    SGLangTimeout,
    SwapRolledBack,
    TransientSGLangError,
    TransportUnavailable,
)

REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
CLASSES = [getattr(_errors, name) for name in _errors.__all__]
SGLANG: dict[str, Any] = {"target": "llama-0", "route": "/load_lora_adapter", "status_code": 400}


def example(cls: type[PulumiLoRAError]) -> PulumiLoRAError:
    """An instance of ``cls`` built with its own constructor."""
    if issubclass(cls, SGLangError):
        return cls(**SGLANG, server_message="nope", body=b'{"success": false}')
    examples: dict[type[PulumiLoRAError], PulumiLoRAError] = {
        InferenceServiceNotFound: InferenceServiceNotFound("models", "llama"),
        RuntimeMismatch: RuntimeMismatch("models", "llama", "vllm"),
        PartialReach: PartialReach("models", "llama", "--tokenizer-worker-num 2: ..."),
        NoReadyPods: NoReadyPods("models", "llama", ["llama-0: Pending"]),
        TransportUnavailable: TransportUnavailable("no route to pods"),
        NameCollision: NameCollision("sql", "models", "llama", "LoRAAdapter models/other"),
        AdapterNotLoaded: AdapterNotLoaded("sql", "loaded on 1/3 Ready pods", "wait"),
        SwapRolledBack: SwapRolledBack("sql", "swapping sql to '/bad' failed", "fix it"),
    }
    return examples.get(cls) or cls("misused")


def test_all_is_sorted_and_complete() -> None:
    defined = {
        name
        for name, value in vars(_errors).items()
        if inspect.isclass(value) and issubclass(value, Exception) and not name.startswith("_")
    }
    assert set(_errors.__all__) == defined
    assert _errors.__all__ == sorted(_errors.__all__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_class_is_documented_and_declares_policy(cls: type[PulumiLoRAError]) -> None:
    assert issubclass(cls, PulumiLoRAError)
    assert cls.__doc__ and cls.__doc__.strip()
    assert isinstance(cls.retryable, bool)
    assert REASON.fullmatch(cls.reason), cls.reason


def test_reasons_are_unique() -> None:
    reasons = [cls.reason for cls in CLASSES]
    assert len(reasons) == len(set(reasons))


def test_branches_carry_the_retry_policy() -> None:
    for cls in CLASSES:
        if issubclass(cls, TransientSGLangError):
            assert cls.retryable, cls
        elif issubclass(cls, PermanentSGLangError | ConfigurationError):
            assert not cls.retryable, cls
    assert NoReadyPods.retryable
    assert not InferenceServiceNotFound.retryable
    assert not RuntimeMismatch.retryable


def test_sglang_error_says_where_and_what() -> None:
    error = LoRADisabled(**SGLANG, server_message="LoRA is not enabled.")
    text = str(error)
    assert "--enable-lora" in text
    assert "spec.extraArgs" in text
    assert "llama-0 /load_lora_adapter: HTTP 400" in text
    assert "SGLang said: LoRA is not enabled." in text
    assert error.reason == "LoRANotEnabled"


def test_sglang_error_without_response_or_message() -> None:
    error = SGLangTimeout("no answer within 3 s", target="http://x:1", route="/health")
    assert str(error) == "no answer within 3 s [http://x:1 /health: no response]"
    assert error.status_code is None
    assert error.body_excerpt == ""


def test_body_and_server_message_are_truncated() -> None:
    error = SGLangError(
        target="t", route="/r", status_code=500, server_message="m" * 10_000, body=b"b" * 10**6
    )
    assert error.server_message is not None
    assert len(error.server_message) < 520
    assert len(error.body_excerpt) < 520
    assert error.body_excerpt.endswith("[truncated]")
    assert len(str(error)) < 1100


def test_short_body_is_kept_whole_and_invalid_utf8_is_tolerated() -> None:
    assert SGLangError(target="t", route="/r", body=b"\xff ok").body_excerpt == "\ufffd ok"


def test_cluster_messages() -> None:
    assert str(RuntimeMismatch("models", "llama", "vllm")).startswith(
        'InferenceService models/llama has runtime="vllm", expected sglang'
    )
    assert "llama-0: Pending" in str(NoReadyPods("models", "llama", ["llama-0: Pending"]))
    assert "no pods found" in str(NoReadyPods("models", "llama", []))
    assert str(InferenceServiceNotFound("models", "llama")) == (
        "InferenceService models/llama not found"
    )
    assert isinstance(TransportUnavailable("x"), ClusterError)
    assert TransportUnavailable("why").detail == "why"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_errors_survive_pickle_and_copy(cls: type[PulumiLoRAError]) -> None:
    error = example(cls)
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(clone) is cls
        assert str(clone) == str(error)
        assert vars(clone) == vars(error)


def test_foundations_import_no_io_library() -> None:
    for module in ("_errors.py", "_settings.py"):
        tree = ast.parse((Path(_errors.__file__).parent / module).read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert not imported & {"httpx2", "lightkube", "pulumi", "pulumi_kubernetes"}, module
        assert "pulumi_lora" not in imported, f"{module} must stay independent of its siblings"
