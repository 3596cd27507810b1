"""The image for every node (issue 41): ``tools/image.py --platform linux/arm64`` fetches a wheel
set whose every platform tag runs on aarch64 (Graviton nodes), from the registry as the build
does, into a folder of its own (the image's own ``build/wheels`` untouched)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_arm64_wheels_are_all_for_aarch64(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "image.py"),
            "--platform",
            "linux/arm64",
            "--wheels-only",
            "--wheels-dir",
            str(wheels),
            "--constraints",
            str(ROOT / ".venv" / "constraints.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all for aarch64" in done.stdout + done.stderr
    names = sorted(p.name for p in wheels.glob("*.whl"))
    native = [n for n in names if not n.endswith("-any.whl")]
    assert native and all("aarch64" in n and "x86_64" not in n for n in native), native
    assert any(n.startswith("msgspec-") for n in native)  # the compiled ones came
    assert not any(n.startswith(("pulumi-", "grpcio-", "protobuf-")) for n in names)
