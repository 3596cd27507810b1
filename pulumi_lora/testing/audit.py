"""Reading the testbed apiserver's audit log: what an identity did, and what RBAC grants.

A least-privilege claim is proven in both directions against the real apiserver: every request
an identity made was allowed, and what it used equals (or stays within) what its rules grant.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["Grant", "audited", "granted"]

Grant = tuple[str, str, str]
"""(API group, resource[/subresource], verb)."""


def granted(rules: Iterable[Mapping[str, Any]]) -> set[Grant]:
    """Every (group, resource, verb) the RBAC rules allow (pure; ``resourceNames`` ignored)."""
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def audited(log: Path, user: str) -> tuple[set[Grant], list[dict[str, Any]]]:
    """What ``user`` did (allowed requests, as grants) and the entries of its denied requests."""
    used: set[Grant] = set()
    denied = []
    for line in log.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if (
            entry.get("user", {}).get("username") != user
            or entry.get("stage") != "ResponseComplete"
        ):
            continue
        ref = entry.get("objectRef") or {}
        resource = ref.get("resource", "") + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        decision = (entry.get("annotations") or {}).get("authorization.k8s.io/decision")
        if decision == "allow":
            used.add((ref.get("apiGroup", ""), resource, entry["verb"]))
        else:
            denied.append(entry)
    return used, denied
