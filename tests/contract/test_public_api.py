"""The emulator package exports exactly its public names, sorted."""

from __future__ import annotations

import pulumi_lora.testing.emulator as emulator

PUBLIC = [
    "EmulatorConfig",
    "EmulatorConfigError",
    "EmulatorLaunchError",
    "EmulatorServer",
    "Fault",
    "StartupAdapter",
    "main",
    "parse_args",
]


def test_all_is_exactly_the_public_names_sorted() -> None:
    assert emulator.__all__ == PUBLIC
    assert all(hasattr(emulator, name) for name in PUBLIC)
    exported = {name for name in dir(emulator) if not name.startswith("_")}
    assert exported == set(PUBLIC)
