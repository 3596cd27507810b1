"""The emulator resolves an adapter path in the volume the pod mounts there (``--emulator-mount``),
so a pod that does not mount a claim cannot see its files (issue 40)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulumi_lora.testing.emulator._adapters import read_adapter
from pulumi_lora.testing.emulator._args import parse_args
from pulumi_lora.testing.emulator._state import AdapterReadError
from pulumi_lora.testing.peft import write_adapter


def test_a_path_under_a_mount_resolves_in_its_volume_and_nowhere_else(tmp_path: Path) -> None:
    root, claim = tmp_path / "root", tmp_path / "claim"
    write_adapter(claim / "0123456789abcdef")
    mounts = (("/adapters", claim),)
    assert read_adapter("/adapters/0123456789abcdef", root, mounts).rank == 8
    with pytest.raises(AdapterReadError):  # the same path in a pod without the claim
        read_adapter("/adapters/0123456789abcdef", root)
    with pytest.raises(AdapterReadError):  # no escape out of the volume
        read_adapter("/adapters/../claim/0123456789abcdef", root, mounts)


def test_the_flag_takes_host_and_container_paths() -> None:
    lora = ["--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "q_proj"]
    config, _ = parse_args(["--emulator-mount", "/pv/a:/adapters/", *lora])
    assert config.mounts == (("/adapters", Path("/pv/a")),)
    with pytest.raises(SystemExit):
        parse_args(["--emulator-mount", "relative", *lora])
