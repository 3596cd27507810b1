"""The testing kit's own rule, checked after every test here: no emulator outlives its test.

A test's namespace is released at its end (``namespace`` fixture, ``release_test_namespaces``);
an emulator left running would be probed ten times a second for the rest of the session. The
check reads ``/proc``, so it sees every emulator this process or its children started, whatever
the testbed's bookkeeping says.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pulumi_lora.testing.testbed._pods import EMULATOR_MODULE
from pulumi_lora.testing.testbed._process import live_descendants


def live_emulators() -> dict[int, str]:
    """This process's descendants that run the SGLang emulator: pid → command line."""
    found = {}
    for pid in live_descendants():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        command = " ".join(part.decode(errors="replace") for part in argv if part)
        if EMULATOR_MODULE in command:
            found[pid] = command
    return found


BEFORE = pytest.StashKey[set[int]]()
"""The emulators already running when a test started (another module's, on this worker)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Note what runs before the test: only what it started is its to stop."""
    item.stash[BEFORE] = set(live_emulators())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Once a test's fixtures are torn down, fail its teardown if an emulator it started still
    runs. (An emulator another module's test left, on the same xdist worker, is that test's:
    blaming the next test here for it once failed CI on a pod of tests/resync/test_admission.)"""
    yield
    before = item.stash.get(BEFORE, set())
    left = {pid: command for pid, command in live_emulators().items() if pid not in before}
    assert not left, f"{len(left)} emulator(s) outlived {item.nodeid}: " + "; ".join(
        f"pid {pid}: {command[:160]}" for pid, command in sorted(left.items())
    )
