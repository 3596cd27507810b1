"""Pulumi's mocks for unit tests of components: every registration recorded, inputs echoed."""

from __future__ import annotations

import asyncio
from typing import Any

import pulumi


class Recorder(pulumi.runtime.Mocks):
    """Records every registration; echoes inputs as outputs."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        return {}, []


def recording() -> Recorder:
    """A ``Recorder`` set as Pulumi's mocks, on a fresh current event loop (a test run before
    in the same worker may leave the main thread without one; the mocks' RPCs run on it)."""
    asyncio.set_event_loop(asyncio.new_event_loop())
    mocks = Recorder()
    pulumi.runtime.set_mocks(mocks, preview=False)
    return mocks
