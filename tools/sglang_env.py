"""The real SGLang server for the tests: its own virtualenv, the tiny model and the CPU shims.

``tools/provision.py`` calls :func:`ensure`; ``python3 tools/sglang_env.py`` runs it alone. Into
``${PULUMI_LORA_CACHE:-~/.cache/pulumi-lora}/sglang-<version>/`` it puts

* ``venv/``: ``sglang==<version>`` from the package registry, every package pinned by
  ``tools/sglang/constraints.txt`` (the resolved set that was tested: the shims below depend on
  SGLang's internals at this version);
* ``model/``: the tiny Llama ``tools/sglang/make_model.py`` builds (no hub);
* ``shims/``: the two test-support modules SGLang needs on a CPU without its CPU kernels
  (``tools/sglang/shims/``; each says what it replaces and why). They go on the server's
  ``PYTHONPATH`` only: never in the user's package or image;
* ``stamp.json``: what was built, so a second run takes a second.

Standard library only: it runs with the machine's ``python3``, as ``provision.py`` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tools" / "sglang"
CONSTRAINTS = SOURCES / "constraints.txt"


def version() -> str:
    """SGLang's pinned version (``tools/versions.toml``)."""
    with (ROOT / "tools" / "versions.toml").open("rb") as f:
        return str(tomllib.load(f)["sglang"]["version"])


def home() -> Path:
    """Where this version's virtualenv, model and shims live."""
    cache = Path(os.environ.get("PULUMI_LORA_CACHE") or Path.home() / ".cache" / "pulumi-lora")
    return cache / f"sglang-{version()}"


def fingerprint() -> str:
    """What the built tree depends on: the version, the constraints, the model and the shims."""
    digest = hashlib.sha256(version().encode())
    for path in sorted([CONSTRAINTS, *SOURCES.rglob("*.py")]):
        digest.update(path.relative_to(SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _run(argv: list[str], what: str) -> None:
    started = time.monotonic()
    print(f"[sglang] {what} ...", flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"{what} failed: {' '.join(argv)}\n{tail}")
    print(f"[sglang] {what}: {time.monotonic() - started:.1f}s", flush=True)


def ensure() -> Path:
    """Build (or reuse) the SGLang tree; return its directory."""
    target = home()
    stamp = target / "stamp.json"
    want = fingerprint()
    if stamp.exists() and json.loads(stamp.read_text()).get("fingerprint") == want:
        return target
    venv = target / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)], "create the virtualenv")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run([*pip, "-c", str(CONSTRAINTS), f"sglang=={version()}"], f"install sglang {version()}")
    _run([str(python), str(SOURCES / "make_model.py"), str(target / "model")], "build the model")
    shims = target / "shims"
    shutil.rmtree(shims, ignore_errors=True)
    shutil.copytree(SOURCES / "shims", shims, ignore=shutil.ignore_patterns("__pycache__"))
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    stamp.write_text(json.dumps({"fingerprint": want, "venv_bytes": size}))
    print(f"[sglang] virtualenv {size / 1e9:.1f} GB at {venv}", flush=True)
    return target


if __name__ == "__main__":
    print(ensure())
