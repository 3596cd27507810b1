"""The plan that moves a stack made by 0.2's component to the custom resource (pure).

No alias can carry the state (the engine matches by URN first), so the move is a state edit and
``pulumi import``. :func:`plan` only returns the commands (docs/migration.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TOKEN = "pulumi-lora:index:LoRAAdapter"  # noqa: S105 - a type token, not a password
"""The component's type, and the custom resource's."""
CHILD = "pulumi-python:dynamic:Resource"
"""The type of the component's dynamic child."""


@dataclass(frozen=True)
class Moves:
    """What moving one stack takes: the URNs to drop from the state, the import file's content,
    and what stands in the way (resources of the user's under a component)."""

    remove: tuple[str, ...]
    imports: dict[str, Any]
    blockers: tuple[str, ...] = field(default=())

    @property
    def adapters(self) -> int:
        """How many adapters move."""
        return len(self.imports["resources"])


def plan(exported: Mapping[str, Any]) -> Moves:
    """Pure: the moves of a ``pulumi stack export`` document.

    Each component of type ``TOKEN`` with one dynamic child becomes an import of ``TOKEN`` with
    the component's name, the child's ID (the CR's ``NAMESPACE/NAME``) and the component's own
    parent (kept through the import file's ``nameTable``; the stack needs none). The dynamic
    provider goes too when nothing else of the stack uses it.
    """
    resources: list[Mapping[str, Any]] = list(
        (exported.get("deployment") or {}).get("resources") or []
    )
    components = {r["urn"]: r for r in resources if r.get("type") == TOKEN and not r.get("custom")}
    children = {
        str(r.get("parent")): r
        for r in resources
        if r.get("type") == CHILD and r.get("parent") in components
    }
    stack = next((r["urn"] for r in resources if r.get("type") == "pulumi:pulumi:Stack"), None)
    remove: list[str] = []
    entries: list[dict[str, Any]] = []
    parents: dict[str, str] = {}
    for urn, component in components.items():
        child = children.get(urn)
        if child is None:
            continue
        remove += [child["urn"], urn]
        entry: dict[str, Any] = {"type": TOKEN, "name": urn.rsplit("::", 1)[1], "id": child["id"]}
        parent = component.get("parent")
        if parent and parent != stack:
            key = parents.setdefault(parent, f"parent-{len(parents)}")
            entry["parent"] = key
        entries.append(entry)
    moved = set(remove)
    blockers = [r["urn"] for r in resources if r.get("parent") in moved and r["urn"] not in moved]
    providers = {
        _provider_urn(children[u].get("provider", "")) for u in components if u in children
    }
    for provider in sorted(p for p in providers if p):
        users = [r for r in resources if _provider_urn(r.get("provider", "")) == provider]
        if all(r["urn"] in moved for r in users):
            remove.append(provider)
    imports: dict[str, Any] = {"resources": entries}
    if parents:
        imports["nameTable"] = {key: urn for urn, key in parents.items()}
    return Moves(tuple(remove), imports, tuple(blockers))


def _provider_urn(reference: str) -> str:
    """Pure: the URN of a provider reference ``URN::ID``."""
    return reference.rsplit("::", 1)[0] if "::" in reference else ""


def commands(moves: Moves, import_file: str) -> list[str]:
    """Pure: the lines the user runs, in order, in the project's folder."""
    if not moves.adapters:
        return []
    return [
        "pulumi state remove --yes " + " ".join(shlex.quote(u) for u in moves.remove),
        f"pulumi import --file {shlex.quote(import_file)} --yes --protect=false"
        " --generate-code=false",
        "pulumi preview --expect-no-changes",
    ]
