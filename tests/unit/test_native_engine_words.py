"""What ``provider/``'s plugin takes from the engine beyond the properties: the operation's
timeout (``customTimeouts``) bounds the wait for Ready pods, and drift found by an operation is
said as a warning on that operation's resource (the engine's ``Log`` with its URN)."""

from __future__ import annotations

import asyncio
from typing import Any

from pulumi.dynamic import CreateResult
from pulumi.provider.experimental import provider as rpc
from pulumi.runtime.proto import engine_pb2

from pulumi_lora._pulumi import _native
from pulumi_lora._pulumi._drift import report_drift

DECLARED = {
    "adapterName": _native.wrapped("sql-lora"),
    "path": _native.wrapped("/adapters/sql-lora"),
    "inferenceService": _native.wrapped("llama"),
}


def test_the_engines_timeout_cuts_the_ready_wait_down_and_never_up() -> None:
    assert _native.within_timeout({}, 0) == {}
    assert _native.within_timeout({}, 120.0) == {"ready_timeout_seconds": 120.0}
    assert _native.within_timeout({"ready_timeout_seconds": 30.0}, 120.0) == {
        "ready_timeout_seconds": 30.0
    }
    assert _native.within_timeout({"ready_timeout_seconds": 900.0}, 60.0) == {
        "ready_timeout_seconds": 60.0
    }
    assert _native.DEFAULT_READY_TIMEOUT == 300.0


class Core:
    """Stands in for ``LoRAAdapterProvider``: records what create got; echoes it as outputs."""

    def __init__(self) -> None:
        self.got: dict[str, Any] = {}

    def create(self, props: dict[str, Any]) -> CreateResult:
        self.got = props
        return CreateResult("models/sql-lora", {**props, "loaded": True})


def test_create_waits_within_custom_timeouts_and_records_the_declared_inputs() -> None:
    served = _native.NativeProvider("0.0.0")
    core = Core()
    served._core = core  # type: ignore[assignment]
    request = rpc.CreateRequest("urn:sql", DECLARED, 90.0, False)
    made = asyncio.run(served.create(request))
    assert core.got["ready_timeout_seconds"] == 90.0
    assert "readyTimeoutSeconds" not in made.properties  # the program declared none
    declared = {**DECLARED, "readyTimeoutSeconds": _native.wrapped(600)}
    made = asyncio.run(served.create(rpc.CreateRequest("urn:sql", declared, 90.0, False)))
    assert core.got["ready_timeout_seconds"] == 90.0
    assert made.properties["readyTimeoutSeconds"] == _native.wrapped(600)


class Engine:
    """Stands in for the engine's ``Log`` service."""

    def __init__(self) -> None:
        self.said: list[engine_pb2.LogRequest] = []

    def Log(self, request: engine_pb2.LogRequest) -> None:
        self.said.append(request)


def test_drift_is_a_warning_on_the_resource_whose_operation_found_it() -> None:
    log = _native.EngineLog("127.0.0.1:1")
    engine = Engine()
    log._stub = engine  # type: ignore[assignment]
    with log.about("urn:pulumi:dev::p::pulumi-lora:index:LoRAAdapter::sql"):
        log("drift: LoRAAdapter models/sql-lora: pod p-0: sql-lora not loaded\n")
    log("said outside any operation\n")
    assert [(r.severity, r.urn, r.message) for r in engine.said] == [
        (
            engine_pb2.WARNING,
            "urn:pulumi:dev::p::pulumi-lora:index:LoRAAdapter::sql",
            "drift: LoRAAdapter models/sql-lora: pod p-0: sql-lora not loaded",
        ),
        (engine_pb2.WARNING, "", "said outside any operation"),
    ]
    assert report_drift.write is not log  # only a plugin given the engine's address installs it
