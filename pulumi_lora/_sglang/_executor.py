"""Drive the core's pod programs with a real SGLang client: sync (provider) or async (loop).

The only place SGLang outcomes and errors become the core's :class:`Reply` values.
"""

from __future__ import annotations

from typing import Protocol

from pulumi_lora._core._reconcile import (
    Call,
    ListCall,
    LoadCall,
    PodOutcome,
    PodProgram,
    Reply,
    ReplyKind,
    SmokeCall,
    UnloadCall,
)
from pulumi_lora._errors import PulumiLoRAError, SGLangError
from pulumi_lora._sglang import AlreadyLoaded, Loaded, ModelList, NotLoaded, Smoked, Unloaded

Outcome = Loaded | AlreadyLoaded | Unloaded | NotLoaded | ModelList | Smoked


class SyncLoRAClient(Protocol):
    """What the sync driver needs of a client (``SGLangClient`` satisfies it)."""

    def load_adapter(
        self, name: str, path: str, *, pinned: bool = False
    ) -> Loaded | AlreadyLoaded: ...
    def unload_adapter(self, name: str) -> Unloaded | NotLoaded: ...
    def list_models(self) -> ModelList: ...
    def smoke(self, name: str) -> Smoked: ...


class AsyncLoRAClient(Protocol):
    """What the async driver needs of a client (``AsyncSGLangClient`` satisfies it)."""

    async def load_adapter(
        self, name: str, path: str, *, pinned: bool = False
    ) -> Loaded | AlreadyLoaded: ...
    async def unload_adapter(self, name: str) -> Unloaded | NotLoaded: ...
    async def list_models(self) -> ModelList: ...
    async def smoke(self, name: str) -> Smoked: ...


def to_reply(outcome: Outcome) -> Reply:
    """Pure: an SGLang outcome as the core's reply."""
    if isinstance(outcome, Loaded):
        return Reply(ReplyKind.LOADED)
    if isinstance(outcome, AlreadyLoaded):
        return Reply(ReplyKind.ALREADY_LOADED, path=outcome.path)
    if isinstance(outcome, Unloaded):
        return Reply(ReplyKind.UNLOADED)
    if isinstance(outcome, NotLoaded):
        return Reply(ReplyKind.NOT_LOADED)
    if isinstance(outcome, Smoked):
        return Reply(ReplyKind.SMOKED)
    return Reply(ReplyKind.LISTED, adapters=dict(outcome.adapters))


def failure_reply(error: PulumiLoRAError) -> Reply:
    """Pure: a project error as a failed reply (its reason, message, retry flag, and whether the
    server may have acted on the request although its answer never came)."""
    return Reply(
        ReplyKind.FAILED,
        reason=error.reason,
        message=str(error),
        retryable=error.retryable,
        unknown=isinstance(error, SGLangError) and error.maybe_applied,
    )


def run_sync(program: PodProgram, client: SyncLoRAClient) -> PodOutcome:
    """Run one pod program to completion with a blocking client."""
    try:
        call = next(program)
        while True:
            call = program.send(_call_sync(client, call))
    except StopIteration as done:
        outcome: PodOutcome = done.value
        return outcome


async def run_async(program: PodProgram, client: AsyncLoRAClient) -> PodOutcome:
    """Run one pod program to completion with an asyncio client."""
    try:
        call = next(program)
        while True:
            call = program.send(await _call_async(client, call))
    except StopIteration as done:
        outcome: PodOutcome = done.value
        return outcome


def _call_sync(client: SyncLoRAClient, call: Call) -> Reply:
    try:
        if isinstance(call, LoadCall):
            return to_reply(client.load_adapter(call.name, call.path, pinned=call.pinned))
        if isinstance(call, UnloadCall):
            return to_reply(client.unload_adapter(call.name))
        if isinstance(call, SmokeCall):
            return to_reply(client.smoke(call.name))
        assert isinstance(call, ListCall)
        return to_reply(client.list_models())
    except PulumiLoRAError as error:
        return failure_reply(error)


async def _call_async(client: AsyncLoRAClient, call: Call) -> Reply:
    try:
        if isinstance(call, LoadCall):
            return to_reply(await client.load_adapter(call.name, call.path, pinned=call.pinned))
        if isinstance(call, UnloadCall):
            return to_reply(await client.unload_adapter(call.name))
        if isinstance(call, SmokeCall):
            return to_reply(await client.smoke(call.name))
        assert isinstance(call, ListCall)
        return to_reply(await client.list_models())
    except PulumiLoRAError as error:
        return failure_reply(error)
