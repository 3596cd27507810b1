#!/usr/bin/env python3
"""Make a release of this checkout into ``dist/``: everything a user installs, and its checksums.

    .venv/bin/python tools/release.py                 # Python packages, plugins, SDKs
    .venv/bin/python tools/release.py --image         # also the loop's image (podman, slower)

What lands in ``dist/`` (``V`` is ``pulumi_lora/_version.py``'s version):

* ``pulumi_lora-V-py3-none-any.whl`` and ``pulumi_lora-V.tar.gz``: the product (the wheel is
  built from the sdist, which proves the sdist complete); no test rig inside;
* ``pulumi_lora_testing-V-py3-none-any.whl`` and ``pulumi_lora_testing-V.tar.gz``: the test rig
  (``pulumi_lora/testing``: emulator, testbed, fixtures, chaos), built from a copy of that folder
  with ``tools/release_files/testing-pyproject.toml``; it requires ``pulumi-lora==V``;
* ``pulumi-resource-pulumi-lora-vV-{linux,darwin}-{amd64,arm64}.tar.gz``: the provider plugin as
  ``pulumi plugin install resource pulumi-lora V --file ARCHIVE`` takes it: the POSIX launcher
  ``tools/release_files/pulumi-resource-pulumi-lora`` (it makes a virtualenv beside itself on
  first run), the product's wheel and ``constraints.txt``: every distribution the wheel pulls in
  (its dependencies, theirs, the extras they name), at the version installed in the project venv,
  the one every test ran with; the plugin's venv installs exactly those. The four archives hold
  the same bytes (the wheel is pure Python; the dependencies' binary wheels come from the user's
  index on first run): the names are the ones the engine looks for;
* ``pulumi-lora-sdk-{nodejs,go}-vV.tar.gz``: the SDKs generated from the schema
  (``tools/sdkgen.py``; needs the ``pulumi-lora-sdkgen`` tool ``tools/provision.py`` builds;
  ``--no-sdks`` leaves them out);
* with ``--image``: ``pulumi-lora-loop-image-vV.oci.tar``, the re-sync loop's image
  (``tools/image.py``, tagged ``localhost/pulumi-lora:V``; ``podman load`` it, then tag and push);
* ``SHA256SUMS``: ``sha256sum -c SHA256SUMS`` checks every other file.

No Windows archive: the launcher is a POSIX shell script, and nothing on this machine can run a
Windows one (see docs/release.md). Archives are reproducible: fixed times, owners and order.
Every step prints its duration. Standard library only; ``--python`` (default: ``.venv``'s) runs
``python -m build``, and its environment's installed versions are the plugin's pins (a release
refuses one that lacks a dependency or disagrees with ``tools/versions.toml``).
"""

from __future__ import annotations

import argparse
import email
import gzip
import hashlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "tools" / "release_files"
LAUNCHER = FILES / "pulumi-resource-pulumi-lora"
PACKAGE = "pulumi-lora"
"""The Pulumi package's name: the type token's first part, the plugin's name."""
PLATFORMS = tuple((os, arch) for os in ("linux", "darwin") for arch in ("amd64", "arm64"))
EPOCH = 315532800
"""1980-01-01: the time stamped on every archived file (zip's earliest, a common choice)."""


class ReleaseError(RuntimeError):
    """A release step failed; the message names the command and its output."""


def log(message: str) -> None:
    """Progress to stderr; stdout stays for the list of artifacts."""
    print(f"[release] {message}", file=sys.stderr, flush=True)


@contextmanager
def step(name: str) -> Iterator[None]:
    """Time one step."""
    began = time.monotonic()
    log(f"{name} ...")
    yield
    log(f"{name}: {time.monotonic() - began:.1f}s")


def run(argv: Sequence[str | Path], cwd: Path | None = None) -> str:
    """Run a command; its output on failure, in the error."""
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        joined = " ".join(str(a) for a in argv)
        raise ReleaseError(f"{joined} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def version() -> str:
    """The version this checkout releases (``pulumi_lora/_version.py``)."""
    text = (ROOT / "pulumi_lora" / "_version.py").read_text()
    found = re.search(r'__version__\s*=\s*"([^"]+)"', text)
    if found is None:
        raise ReleaseError("pulumi_lora/_version.py names no __version__")
    return found.group(1)


def archive_name(release: str, os: str, arch: str) -> str:
    """Pure: the plugin archive's file name, as ``pulumi plugin install`` and the engine's
    download expect it."""
    return f"pulumi-resource-{PACKAGE}-v{release}-{os}-{arch}.tar.gz"


CLOSURE = """
import importlib.metadata as metadata, json, sys
try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pip's own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

pins, missing, unmet, seen = {}, [], [], set()
todo = [(Requirement(line), "") for line in sys.argv[1:]]
while todo:
    req, extra = todo.pop()
    if req.marker is not None and not req.marker.evaluate({"extra": extra}):
        continue
    try:
        dist = metadata.distribution(req.name)
    except metadata.PackageNotFoundError:
        missing.append(str(req))
        continue
    pins[canonicalize_name(req.name)] = dist.version
    if not req.specifier.contains(dist.version, prereleases=True):
        unmet.append(f"{req} (installed: {dist.version})")
    for wanted in {"", *req.extras}:
        if (canonicalize_name(req.name), wanted) not in seen:
            seen.add((canonicalize_name(req.name), wanted))
            todo += [(Requirement(line), wanted) for line in dist.requires or []]
print(json.dumps({"pins": pins, "missing": missing, "unmet": unmet}))
"""
"""Run by ``--python``: every distribution that installing the requirements in ``argv`` pulls in
(extras and environment markers followed as pip follows them), at the version installed there."""


def wheel_requirements(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA: what ``pip install`` of it resolves
    (the extras' lines among them, which the closure skips unless asked for)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode()
    return email.message_from_string(text).get_all("Requires-Dist") or []


def installed_closure(python: str, requirements: Sequence[str]) -> dict[str, str]:
    """``{name: version}`` for every distribution that installing ``requirements`` pulls in, as
    installed in ``python``'s environment (the project venv: the versions every test ran with).

    Raises :class:`ReleaseError` when one is not installed there or its version does not meet a
    requirement: such an environment was not the tested one.
    """
    found = json.loads(run([python, "-I", "-c", CLOSURE, *requirements]))
    if found["missing"] or found["unmet"]:
        raise ReleaseError(
            f"{python}'s environment does not hold the product's dependencies "
            f"(run tools/provision.py): missing {found['missing']}, unmet {found['unmet']}"
        )
    pins: dict[str, str] = found["pins"]
    return pins


def constraints(closure: Mapping[str, str]) -> str:
    """Pure but for reading ``tools/versions.toml``: ``name==version`` for each distribution of
    ``closure`` (the product's tested dependencies, all of them: the plugin's venv installs
    exactly these, not whatever their ranges allow the day a user first runs it).

    Raises :class:`ReleaseError` where ``closure`` disagrees with a version ``versions.toml``
    pins: the environment is stale.
    """
    with (ROOT / "tools" / "versions.toml").open("rb") as f:
        versions = tomllib.load(f)
    pinned = dict(versions["python"])
    pinned["pulumi"] = versions["pulumi"]["python_sdk"]
    stale = [
        f"{name} {closure[name]} (versions.toml: {version})"
        for name, version in sorted(pinned.items())
        if name in closure and closure[name] != version
    ]
    if stale:
        raise ReleaseError(f"the environment is stale (run tools/provision.py): {', '.join(stale)}")
    return "".join(f"{name}=={closure[name]}\n" for name in sorted(closure))


# --- Python packages --------------------------------------------------------------------------


def build_product(python: str, out: Path) -> list[Path]:
    """The product's sdist, and its wheel built from that sdist (``python -m build``)."""
    run([python, "-m", "build", "--outdir", out, ROOT])
    return sorted(out.glob("pulumi_lora-*"))


def stage_testing(stage: Path, release: str) -> Path:
    """A project folder for ``pulumi-lora-testing``: a copy of ``pulumi_lora/testing`` (no
    caches), its pyproject (``release`` pinned) and README, and the license."""
    shutil.copytree(
        ROOT / "pulumi_lora" / "testing",
        stage / "pulumi_lora" / "testing",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    template = (FILES / "testing-pyproject.toml").read_text()
    (stage / "pyproject.toml").write_text(template.replace("{version}", release))
    shutil.copy(FILES / "testing-README.md", stage / "README.md")
    shutil.copy(ROOT / "LICENSE", stage / "LICENSE")
    return stage


def build_testing(python: str, out: Path, release: str) -> list[Path]:
    """``pulumi-lora-testing``'s sdist and wheel, from a staged copy of the rig."""
    with tempfile.TemporaryDirectory(prefix="pulumi-lora-testing-") as tmp:
        run([python, "-m", "build", "--outdir", out, stage_testing(Path(tmp), release)])
    return sorted(out.glob("pulumi_lora_testing-*"))


# --- plugin archives --------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def plugin_archive(path: Path, wheels: Sequence[Path], pins: str) -> Path:
    """One plugin archive: the launcher at the top (executable), ``wheels/``, ``constraints.txt``.

    Reproducible: the same inputs give the same bytes (fixed times and owners, sorted entries,
    gzip without a name or time).
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, LAUNCHER.name, LAUNCHER.read_bytes(), 0o755)
        _add(tar, "constraints.txt", pins.encode(), 0o644)
        for wheel in sorted(wheels):
            _add(tar, f"wheels/{wheel.name}", wheel.read_bytes(), 0o644)
    with path.open("wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
        gz.write(raw.getvalue())
    return path


def plugin_archives(
    out: Path, release: str, wheels: Sequence[Path], python: str | None = None
) -> list[Path]:
    """The archive for every platform the launcher runs on (see the module's doc); its
    ``constraints.txt`` pins everything the wheels require, as installed for ``python``
    (default: the project's venv)."""
    requirements = [line for wheel in wheels for line in wheel_requirements(wheel)]
    pins = constraints(installed_closure(python or default_python(), requirements))
    return [plugin_archive(out / archive_name(release, o, a), wheels, pins) for o, a in PLATFORMS]


# --- SDKs, image, checksums -------------------------------------------------------------------


def _tool(name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ReleaseError(f"tools/{name}.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def sdk_archives(out: Path, release: str) -> list[Path]:
    """The generated SDKs (``tools/sdkgen.py``, a fresh generation of the schema), one
    reproducible archive per language: ``pulumi-lora-sdk-<language>-v<version>.tar.gz``."""
    sdkgen = _tool("sdkgen")
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="pulumi-lora-sdks-") as tmp:
        for language, folder in sdkgen.generate(Path(tmp)).items():  # type: ignore[attr-defined]
            raw = io.BytesIO()
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for file in sorted(p for p in folder.rglob("*") if p.is_file()):
                    name = f"{language}/{file.relative_to(folder).as_posix()}"
                    _add(tar, name, file.read_bytes(), 0o644)
            path = out / f"{PACKAGE}-sdk-{language}-v{release}.tar.gz"
            with path.open("wb") as f, gzip.GzipFile("", "wb", fileobj=f, mtime=0) as gz:
                gz.write(raw.getvalue())
            made.append(path)
    return made


def loop_image(out: Path, release: str, python: str, local_base: bool) -> Path:
    """The re-sync loop's image, tagged with the release, saved as an OCI archive."""
    tag = f"localhost/pulumi-lora:{release}"
    argv = ["--tag", tag, "--python", python] + (["--local-base"] if local_base else [])
    pins = ROOT / ".venv" / "constraints.txt"
    if pins.exists():
        argv += ["--constraints", str(pins)]
    if _tool("image").main(argv) != 0:  # type: ignore[attr-defined]
        raise ReleaseError(f"the loop's image did not build: tools/image.py {' '.join(argv)}")
    path = out / f"{PACKAGE}-loop-image-v{release}.oci.tar"
    run(["podman", "save", "--format", "oci-archive", "--output", path, tag])
    return path


def checksums(out: Path) -> Path:
    """``SHA256SUMS`` over every other file in ``out`` (``sha256sum -c`` format)."""
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
        for p in sorted(out.iterdir())
        if p.is_file() and p.name != "SHA256SUMS"
    ]
    path = out / "SHA256SUMS"
    path.write_text("".join(lines))
    return path


def fresh(out: Path) -> None:
    """Empty ``out`` of a previous release; refuse to touch anything that is not one."""
    out.mkdir(parents=True, exist_ok=True)
    ours = re.compile(r"^(pulumi[-_]lora|pulumi-resource-pulumi-lora).*|SHA256SUMS$")
    strangers = [p.name for p in out.iterdir() if not (p.is_file() and ours.match(p.name))]
    if strangers:
        raise ReleaseError(f"{out} holds what no release made: {', '.join(sorted(strangers))}")
    for path in out.iterdir():
        path.unlink()


def default_python() -> str:
    """The project's venv (where ``build`` is installed), else this interpreter."""
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def main(argv: Sequence[str] | None = None) -> int:
    """Make the release; print each artifact's path."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument(
        "--python",
        default=default_python(),
        help="runs python -m build; the plugin pins the versions installed for it",
    )
    parser.add_argument("--image", action="store_true", help="also the loop's image (podman)")
    parser.add_argument("--no-sdks", action="store_true", help="without the generated SDKs")
    parser.add_argument("--local-base", action="store_true", help="image base by mmdebstrap")
    args = parser.parse_args(argv)
    release = version()
    began = time.monotonic()
    try:
        fresh(args.out)
        with step("pulumi-lora sdist and wheel"):
            product = build_product(args.python, args.out)
        with step("pulumi-lora-testing sdist and wheel"):
            build_testing(args.python, args.out, release)
        with step("plugin archives"):
            wheels = [p for p in product if p.suffix == ".whl"]
            plugin_archives(args.out, release, wheels, args.python)
        if not args.no_sdks:
            with step("generated SDKs"):
                sdk_archives(args.out, release)
        if args.image:
            with step("loop image"):
                loop_image(args.out, release, args.python, args.local_base)
        checksums(args.out)
    except (ReleaseError, OSError, RuntimeError) as exc:
        log(f"FAILED: {exc}")
        return 1
    log(f"release {release} in {args.out}: {time.monotonic() - began:.1f}s")
    for path in sorted(args.out.iterdir()):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
