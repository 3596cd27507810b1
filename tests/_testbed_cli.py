"""``pulumi-lora testbed ...`` as a user runs it: a process of its own, its output captured."""

from __future__ import annotations

import subprocess
import sys

RUN = "from pulumi_lora.testing.testbed._cli import testbed_group; testbed_group()"


def cli(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run ``testbed ARGS...`` and return what it did (never raises on its exit code)."""
    return subprocess.run(
        [sys.executable, "-c", RUN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
