"""SGLang's runtime-LoRA API: the pure contract (``_protocol``, ``_answers``) and the clients.

Outcomes are values (``Loaded``, ``AlreadyLoaded``, ``Unloaded``...); failures are
``pulumi_lora._errors``, whose ``retryable`` and ``reason`` say what to do.
"""

from pulumi_lora._sglang._aio import asyncio_transport
from pulumi_lora._sglang._client import AsyncSGLangClient, SGLangClient, deadline_transport
from pulumi_lora._sglang._protocol import (
    MAX_BODY_BYTES,
    AlreadyLoaded,
    Health,
    Loaded,
    LoadOutcome,
    ModelList,
    NotLoaded,
    ServerInfo,
    Smoked,
    Unloaded,
    UnloadOutcome,
)

__all__ = [
    "MAX_BODY_BYTES",
    "AlreadyLoaded",
    "AsyncSGLangClient",
    "Health",
    "LoadOutcome",
    "Loaded",
    "ModelList",
    "NotLoaded",
    "SGLangClient",
    "ServerInfo",
    "Smoked",
    "UnloadOutcome",
    "Unloaded",
    "asyncio_transport",
    "deadline_transport",
]
