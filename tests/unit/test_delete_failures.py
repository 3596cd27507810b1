"""A delete lets its CR go only when it knows what the pods serve (issue 38).

Only "the InferenceService is not there" (or is not an SGLang one) means nothing to unload; a
refused or unanswered read of it fails the step and keeps the CR, being deleted, held. And a
finalizer the apiserver refuses to remove is waited on, not patched in a busy loop.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from lightkube import ApiError

from pulumi_lora._args import AdapterArgs
from pulumi_lora._errors import (
    AdapterNotLoaded,
    ApiserverUnreachable,
    ClusterError,
    InferenceServiceNotFound,
    RuntimeMismatch,
)
from pulumi_lora._kube import _objects
from pulumi_lora._lifecycle import ProviderConfig, _steps
from pulumi_lora._models import UNLOAD_FINALIZER

ARGS = AdapterArgs(
    adapter_name="sql-lora", path="/adapters/sql", inference_service="llama", namespace="models"
)
CR = {
    "metadata": {"name": "sql-lora", "namespace": "models", "uid": "u1", "finalizers": []},
    "spec": {},
}


class FakeSession:
    """The session ``delete`` drives, its target read answering with ``error``."""

    error: Exception | None = None
    deleted: list[str] = []

    def __init__(self, args: AdapterArgs, config: ProviderConfig) -> None:
        self.kube = object()
        self.args = args

    def apply_cr(self, **_: Any) -> dict[str, Any]:
        return CR

    def resolve_target(self) -> Any:
        assert self.error is not None
        raise self.error

    def delete_cr(self) -> None:
        FakeSession.deleted.append(self.args.cr_name)


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> type[FakeSession]:
    FakeSession.deleted = []
    monkeypatch.setattr(_steps, "Session", FakeSession)
    monkeypatch.setattr(_objects, "get_adapter", lambda *_: CR)
    monkeypatch.setattr(_objects, "begin_delete", lambda *_: None)
    monkeypatch.setattr(_objects, "release_finalizer", lambda *_: True)
    return FakeSession


@pytest.mark.parametrize(
    "error",
    [
        ClusterError("reading InferenceService models/llama failed: HTTP 403 Forbidden: no"),
        ClusterError("reading InferenceService models/llama failed: HTTP 500 Internal"),
        ApiserverUnreachable("HTTP 429 TooManyRequests: still, after 10 retries"),
        ClusterError("the credential plugin `aws` failed: exit status 1"),
    ],
)
def test_a_failed_read_of_the_target_keeps_the_cr(
    session: type[FakeSession], error: Exception
) -> None:
    session.error = error
    with pytest.raises(AdapterNotLoaded) as failed:
        _steps.delete(ARGS, ProviderConfig())
    assert session.deleted == []
    message = str(failed.value)
    assert message.startswith(f"could not unload adapter 'sql-lora': {error}"), message
    assert "LoRAAdapter models/sql-lora stays, being deleted" in message, message
    assert "`pulumi-lora finish-delete models/sql-lora`" in message, message


@pytest.mark.parametrize(
    "error",
    [InferenceServiceNotFound("models", "llama"), RuntimeMismatch("models", "llama", "vllm")],
)
def test_a_target_that_is_gone_has_nothing_to_unload(
    session: type[FakeSession], error: Exception
) -> None:
    session.error = error
    _steps.delete(ARGS, ProviderConfig())
    assert session.deleted == ["sql-lora"]


class RefusingClient:
    """A CR whose finalizer every update is refused (409), as a webhook refusing them does."""

    def __init__(self) -> None:
        self.patches = 0

    def get(self, *_: Any, **__: Any) -> Any:
        return _Obj({"metadata": {"name": "a", "finalizers": [UNLOAD_FINALIZER]}})

    def patch(self, *_: Any, **__: Any) -> None:
        self.patches += 1
        if self.patches > 1000:
            raise AssertionError("spinning: a refused release is patched again at once")
        status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "refused"}
        raise ApiError(response=httpx2.Response(409, json=status))

    def delete(self, *_: Any, **__: Any) -> None:
        return


class _Obj:
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def to_dict(self) -> dict[str, Any]:
        return self._data


def test_a_refused_finalizer_release_is_waited_on_not_spun() -> None:
    client = RefusingClient()
    with pytest.raises(ClusterError) as held:
        _objects.delete_adapter(
            client,  # type: ignore[arg-type]
            "models",
            "a",
            timeout=0.2,
            poll=0.05,
            release=[UNLOAD_FINALIZER],
        )
    assert client.patches < 100, client.patches
    assert f"removing ['{UNLOAD_FINALIZER}'] was refused each time" in str(held.value)
