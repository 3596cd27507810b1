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


#: Folders whose tests share one expensive session fixture run on one xdist worker together
#: (the CLI tests' user virtualenv is built once, not once per worker).
SHARED_GROUPS = ("cli",)
#: Groups started first, longest first, so that no long test is left to run alone at the end.
LONG_GROUPS = ("cli", "chaos/test_chaos_run.py")


def xdist_group(parts: tuple[str, ...]) -> str:
    """The group a test runs in under ``--dist loadgroup``: its folder for a shared group, its
    module otherwise (module-scoped fixtures are set up once, as without xdist)."""
    if parts[0] in SHARED_GROUPS:
        return parts[0]
    return "/".join(parts)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the full tier by folder, so no test can forget its marker; group tests by module
    for xdist, long groups first (a stable sort, the same in every worker)."""
    root = Path(__file__).parent
    groups: dict[str, str] = {}
    for item in items:
        parts = Path(item.path).relative_to(root).parts
        if parts and parts[0] in FULL_TIER:
            item.add_marker(pytest.mark.full)
        group = groups[item.nodeid] = xdist_group(parts)
        item.add_marker(pytest.mark.xdist_group(group))
    rank = {group: i for i, group in enumerate(LONG_GROUPS)}
    items.sort(key=lambda item: rank.get(groups[item.nodeid], len(rank)))
