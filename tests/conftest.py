"""Test tiers, decided here and nowhere else (:data:`TIERS`, by path under ``tests/``).

- fast (``-m "not full"``): models, core, clients, the emulator's contract; no Go tool, seconds.
- full (``-m "full and not sglang"``): the real engine, CLI, apiserver, etcd, podman.
- sglang (``-m sglang``): the real SGLang server on the CPU; full tier too, a phase of its own.

The README's test command runs the three, each as a phase with its own budget.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import pytest

from pulumi_lora.testing.testbed._binaries import BinaryNotFoundError, find_binary

pytest_plugins = ["pulumi_lora.testing.fixtures"]

FULL = ("full",)
SGLANG = ("full", "sglang")
#: Each test's tier: the marks of the longest key that starts its node id under ``tests/`` (a
#: folder, a file, or a file's tests; ``*`` stands for any text, ``[`` is literal). A test that
#: no key names is in the fast tier.
TIERS: dict[str, tuple[str, ...]] = {
    "chaos": FULL,
    "cli": FULL,
    "e2e": FULL,
    "release": FULL,
    "resync": FULL,
    "resync/unit": (),  # the loop's pure parts and its command's wiring
    "sglang": SGLANG,
    "testbed": FULL,
    "testbed/test_probes.py": (),  # the prober against a stand-in server: no cluster
    "ops/test_examples.py": FULL,
    "ops/test_ops_cluster.py": FULL,
    "staging/test_stage_s3.py": FULL,  # a real S3-compatible server
    "contract/test_both_ways.py::*[real-sglang*": SGLANG,
    # each makes real virtualenvs with pip (seconds each): the fast tier keeps one launcher start
    "unit/test_plugin_launcher.py::test_the_first_start_makes_the_venv_*": FULL,
    "unit/test_plugin_launcher.py::test_a_venv_that_does_not_work_is_rebuilt_*": FULL,
    "unit/test_plugin_launcher.py::test_two_starts_at_once_on_a_broken_venv_*": FULL,
}
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


def tier_of(nodeid: str) -> tuple[str, ...]:
    """The marks :data:`TIERS` gives the test ``nodeid`` (relative to ``tests/``)."""
    named = [key for key in TIERS if _names(key, nodeid)]
    return TIERS[max(named, key=len)] if named else ()


def _names(key: str, nodeid: str) -> bool:
    if "*" in key:
        return fnmatch.fnmatchcase(nodeid, key.replace("[", "[[]"))
    return nodeid == key or nodeid.startswith((f"{key}/", f"{key}::", f"{key}["))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test's tier (:func:`tier_of`), so no test can forget it; long groups first (a
    stable sort, the same in every worker)."""
    root = Path(__file__).parent
    rank = {group: i for i, group in enumerate(LONG_GROUPS)}
    order: dict[str, int] = {}
    for item in items:
        path = Path(item.path).relative_to(root)
        nodeid = "::".join([path.as_posix(), *item.nodeid.split("::")[1:]])
        for mark in tier_of(nodeid):
            item.add_marker(getattr(pytest.mark, mark))
        order[item.nodeid] = rank.get(worker_group(path.as_posix()), len(rank))
    items.sort(key=lambda item: order[item.nodeid])
