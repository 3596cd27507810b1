"""Test tiers: everything under ``tests/testbed`` and ``tests/e2e`` is the full tier.

The fast tier (``-m "not full"``: models, core, client, emulator contract) needs no Go tool and
runs in seconds; the full tier runs the real engine, apiserver and etcd. The README's test command
runs both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pulumi_lora.testing.testbed._binaries import BinaryNotFoundError, find_binary

pytest_plugins = ["pulumi_lora.testing.fixtures"]

FULL_TIER = ("testbed", "e2e", "resync", "chaos")
REAL_COMPONENTS = ("pulumi", "etcd", "kube-apiserver", "kubectl")


def pytest_report_header() -> list[str]:
    """Print the versions of the real components the full tier runs against."""
    found = []
    for name in REAL_COMPONENTS:
        try:
            binary = find_binary(name)
        except BinaryNotFoundError:
            found.append(f"{name}: not provisioned")
            continue
        found.append(f"{name} {binary.version} ({binary.path})")
    return ["real components: " + "; ".join(found)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the full tier by folder, so no test can forget its marker."""
    root = Path(__file__).parent
    for item in items:
        parts = Path(item.path).relative_to(root).parts
        if parts and parts[0] in FULL_TIER:
            item.add_marker(pytest.mark.full)
