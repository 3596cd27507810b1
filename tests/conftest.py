"""Test tiers: everything under ``tests/testbed`` and ``tests/e2e`` is the full tier.

The fast tier (``-m "not full"``: models, core, client, emulator contract) needs no Go tool and
runs in seconds; the full tier runs the real engine, apiserver and etcd; the real-SGLang tier
(``-m sglang``, ``tests/sglang``: full tier too) runs the real SGLang server on the CPU. The
README's test command runs the three, each as a phase with its own budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pulumi_lora.testing.testbed._binaries import BinaryNotFoundError, find_binary

pytest_plugins = ["pulumi_lora.testing.fixtures"]

FULL_TIER = ("testbed", "e2e", "resync", "chaos", "release", "sglang")
#: Folders of the real-server tier (``-m sglang``): full tier too, run as a phase of its own.
SGLANG_TIER = ("sglang",)
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


#: Groups started first, longest first, so that no long test is left to run alone at the end.
LONG_GROUPS = (
    "chaos/test_chaos_run.py",
    "cli/test_python_stacks.py",
    "cli/test_generated_sdks.py",
    "release/test_release_install.py",
    "cli/test_yaml_adoption.py",
    "cli/test_typescript.py",
    "cli/test_yaml_provider.py",
)


def worker_group(path: str) -> str:
    """The group a test runs in under xdist, from its file's path under ``tests/``: its module
    (module-scoped fixtures are set up once, as without xdist)."""
    return "/".join(Path(path).parts)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Hand xdist's workers whole groups (:func:`worker_group`), in collection order.

    xdist's own ``loadgroup`` marks no longer take effect under pytest 9 (they rename a node id
    that pytest now derives elsewhere), so the grouping is a scheduler's: a scope is a group.
    """
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only under xdist

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return worker_group(str(Path(path).relative_to("tests")))

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the full tier by folder, so no test can forget its marker; long groups first (a
    stable sort, the same in every worker)."""
    root = Path(__file__).parent
    rank = {group: i for i, group in enumerate(LONG_GROUPS)}
    order: dict[str, int] = {}
    for item in items:
        parts = Path(item.path).relative_to(root).parts
        if parts and parts[0] in FULL_TIER:
            item.add_marker(pytest.mark.full)
        if parts and parts[0] in SGLANG_TIER:
            item.add_marker(pytest.mark.sglang)
        order[item.nodeid] = rank.get(worker_group("/".join(parts)), len(rank))
    items.sort(key=lambda item: order[item.nodeid])
