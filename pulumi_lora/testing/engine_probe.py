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

__all__ = ["ProbeFile", "ProbeFileProvider"]


class ProbeFileProvider(ResourceProvider):
    """Create/read/update/delete of one text file."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        path = Path(props["path"])
        path.write_text(props["content"])
        return CreateResult(id_=str(path), outs={**props, "observed": props["content"]})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        path = Path(id_)
        if not path.exists():
            return ReadResult(id_="", outs={})
        return ReadResult(id_=id_, outs={**props, "observed": path.read_text()})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changes = olds.get("observed") != news["content"] or olds.get("path") != news["path"]
        return DiffResult(
            changes=changes, replaces=["path"] if olds.get("path") != news["path"] else []
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        Path(id_).write_text(news["content"])
        return UpdateResult(outs={**news, "observed": news["content"]})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        Path(id_).unlink(missing_ok=True)


class ProbeFile(Resource):
    """A file whose content the engine keeps true."""

    observed: pulumi.Output[str]

    def __init__(
        self, name: str, path: str, content: str, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(
            ProbeFileProvider(), name, {"path": path, "content": content, "observed": None}, opts
        )
