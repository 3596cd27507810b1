"""A minimal dynamic resource that proves the engine works here: it manages one file.

``create`` writes the file, ``read`` (refresh) reports its current content, ``diff`` compares it
with the declared content, ``update`` rewrites it and ``delete`` removes it. It lives in the
package so the engine's provider host can import it by reference, exactly as the real provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import (
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

__all__ = ["ADAPTER_OUTPUTS", "ProbeFile", "ProbeFileProvider"]

#: What a LoRAAdapter served by 4 pods records beyond its inputs, in shape and size (as
#: ``_pulumi._calls.outputs`` writes them): a ``ProbeFile(shape="adapter")`` records these too,
#: so the engine and the SDK handle as much for it as for an adapter, and only the provider's own
#: work is left between the two (``benchmarks/up_benchmark.py``).
ADAPTER_OUTPUTS: dict[str, Any] = {
    "adapter_name": "small-1",
    "inference_service": "llama",
    "namespace": "bench-small",
    "cr_name": "small-1",
    "cr_uid": "0b7f3c2e-5a1d-4c2e-9f3a-6d5e4c3b2a10",
    "generation": 1,
    "conditions": [
        {"type": kind, "status": "True", "reason": reason, "since": "2026-12-01T00:00:00Z"}
        for kind, reason in (
            ("Available", "TargetResolved"),
            ("Loaded", "AdapterLoaded"),
            ("Ready", "AdapterReady"),
        )
    ],
    "loaded": True,
    "available": True,
    "ready": True,
    "pods": [{"pod": f"llama-6d5f8b7c9-{i}", "loaded": True} for i in range(4)],
    "loaded_path": "/adapters/small-1",
    "last_loaded_at": "2026-12-01T00:00:00Z",
}


def _recorded(props: dict[str, Any], observed: str) -> dict[str, Any]:
    """The outputs: the inputs, what the file holds, and an adapter's outputs when so shaped."""
    extra = ADAPTER_OUTPUTS if props.get("shape") == "adapter" else {}
    return {**props, **extra, "observed": observed}


class ProbeFileProvider(ResourceProvider):
    """Create/read/update/delete of one text file."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        path = Path(props["path"])
        path.write_text(props["content"])
        return CreateResult(id_=str(path), outs=_recorded(props, props["content"]))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        path = Path(id_)
        if not path.exists():
            return ReadResult(id_="", outs={})
        return ReadResult(id_=id_, outs=_recorded(props, path.read_text()))

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changes = olds.get("observed") != news["content"] or olds.get("path") != news["path"]
        return DiffResult(
            changes=changes, replaces=["path"] if olds.get("path") != news["path"] else []
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        Path(id_).write_text(news["content"])
        return UpdateResult(outs=_recorded(news, news["content"]))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        Path(id_).unlink(missing_ok=True)


class ProbeFile(Resource):
    """A file whose content the engine keeps true; ``shape="adapter"`` also records
    ``ADAPTER_OUTPUTS``, declared as LoRAAdapter declares its outputs."""

    observed: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        path: str,
        content: str,
        opts: pulumi.ResourceOptions | None = None,
        shape: str = "file",
    ) -> None:
        props: dict[str, Any] = {"path": path, "content": content, "observed": None}
        if shape != "file":
            props |= {"shape": shape, **dict.fromkeys(ADAPTER_OUTPUTS)}
        super().__init__(ProbeFileProvider(), name, props, opts)
