"""Walking a seed JSON schema beside a structural schema (shared by the pure and live tests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

KEPT_KEYWORDS = (
    "description",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "enum",
    "format",
    "required",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


def walk(seed: dict[str, Any], path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (path, node) of a schema, depth first."""
    yield path, seed
    for name, sub in (seed.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(seed.get("items"), dict):
        yield from walk(seed["items"], f"{path}[]")


def node_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The node of ``schema`` at a path produced by :func:`walk`."""
    node = schema
    for part in path[1:].replace("[]", ".[]").split(".")[1:]:
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def differences(seed: dict[str, Any], structural: dict[str, Any]) -> list[str]:
    """What the structural schema loses or changes from the seed (empty: equivalent)."""
    problems = []
    for path, want in walk(seed):
        if path == "$.metadata":
            continue
        try:
            got = node_at(structural, path)
        except KeyError:
            problems.append(f"{path}: missing")
            continue
        types = want.get("type")
        names = [types] if isinstance(types, str) else list(types or [])
        non_null = [t for t in names if t != "null"]
        if non_null and got.get("type") != non_null[0]:
            problems.append(f"{path}: type {got.get('type')!r} != {non_null[0]!r}")
        if ("null" in names) != bool(got.get("nullable", False)) and path != "$":
            problems.append(f"{path}: nullable {got.get('nullable')} but seed types {names}")
        for key in KEPT_KEYWORDS:
            if want.get(key) != got.get(key):
                problems.append(f"{path}: {key} {got.get(key)!r} != {want.get(key)!r}")
        if set(want.get("properties") or {}) != set(got.get("properties") or {}):
            problems.append(f"{path}: properties differ")
        if "additionalProperties" in got:
            problems.append(f"{path}: additionalProperties kept")
    return problems
