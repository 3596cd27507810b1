"""Fixtures for the full tier: the real Pulumi engine (and, through the plugin, the testbed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.testbed._binaries import BinaryNotFoundError


@pytest.fixture
def engine(tmp_path: Path) -> LocalEngine:
    """A private offline Pulumi installation per test (file backend, own PULUMI_HOME).

    A missing CLI skips locally but fails under ``CI=true``: there a skip would hide a missing part.
    """
    try:
        return LocalEngine(tmp_path / "engine")
    except BinaryNotFoundError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"real part missing under CI: {exc}")
        pytest.skip(str(exc))
