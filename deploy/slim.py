"""Gather the image's whole root file system into one directory: the virtualenv, the CPython it
runs on and the shared libraries they load, and nothing else (no shell, no apt, no perl).

Run by deploy/Dockerfile's build stage with the virtualenv's Python, after every wheel is in:

    /opt/pulumi-lora/bin/python /slim.py /rootfs

The final stage is ``FROM scratch`` plus ``/rootfs``. What goes in:
- the virtualenv, with botocore's service models cut to the two the stager calls (``s3``, and
  ``sts`` for web-identity credentials) and the installers (pip, setuptools) gone;
- the base's CPython: its executable, the symbolic links leading to it, and its standard library
  without the parts no program here imports (tests, IDLE, tkinter, ensurepip, lib2to3);
- every shared library ``ldd`` names for the executable and each extension module, copied to the
  path the dynamic loader asks for, and libgcc_s (glibc loads it to unwind exiting threads);
- ``/etc`` files the C library and Python read (users, name service, certificates) and an empty,
  world-writable ``/tmp``.
Standard library only; works on any Debian-like base (Debian's python3 or python:3.11-slim).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

VENV = Path(sys.prefix)
BOTOCORE_MODELS = ("s3", "sts")
STDLIB_LEFT_OUT = (
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "site-packages",  # the base's own (python:3.11-slim's pip, setuptools, wheel), not the venv's
)
ETC = (
    "passwd",
    "group",
    "nsswitch.conf",
    "host.conf",
    "ld.so.cache",
    "ssl",
    "ca-certificates.conf",
    f"python{sys.version_info.major}.{sys.version_info.minor}",
)
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


def prune_venv() -> None:
    """Installers out; botocore's service models but ``BOTOCORE_MODELS`` out."""
    site = Path(sysconfig.get_path("purelib"))
    for pattern in (
        "pip",
        "pip-*",
        "setuptools",
        "setuptools-*",
        "_distutils_hack",
        "pkg_resources",
    ):
        for path in site.glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (site / "distutils-precedence.pth").unlink(missing_ok=True)
    for script in (VENV / "bin").glob("pip*"):
        script.unlink()
    data = site / "botocore" / "data"
    for model in data.iterdir():
        if model.is_dir() and model.name not in BOTOCORE_MODELS:
            shutil.rmtree(model)


def copy(path: Path, root: Path) -> None:
    """``path`` into ``root`` at the same place: a symbolic link as a link (and what it points
    to), a directory with what it holds, a file with its mode."""
    target = root / path.relative_to("/")
    if target.exists() or target.is_symlink():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        link = os.readlink(path)
        target.symlink_to(link)
        copy(Path(os.path.normpath(path.parent / link)), root)
    elif path.is_dir():
        shutil.copytree(path, target, symlinks=True)
    else:
        shutil.copy2(path, target)


def libraries(elf: Path) -> set[Path]:
    """What ``ldd`` says ``elf`` loads (the dynamic loader included); nothing for a non-ELF."""
    done = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, check=False)
    return (
        {Path(m.group(1)) for m in _LDD_PATH.finditer(done.stdout)}
        if done.returncode == 0
        else set()
    )


def main(root: Path) -> None:
    prune_venv()
    stdlib = Path(sysconfig.get_path("stdlib"))
    copy(VENV, root)
    for link in (VENV / "bin").iterdir():  # python -> python3 -> /usr/bin/python3 -> ...
        if link.is_symlink():
            copy(Path(os.path.normpath(link.parent / os.readlink(link))), root)
    for entry in stdlib.iterdir():
        if entry.name not in STDLIB_LEFT_OUT and not entry.name.startswith("config-"):
            copy(entry, root)
    elves = [Path(os.path.realpath(VENV / "bin" / "python3"))]  # the base's CPython
    elves += [p for tree in (stdlib, VENV) for p in tree.rglob("*.so*") if p.is_file()]
    needed: set[Path] = set()
    for elf in elves:
        needed |= libraries(elf)
    for library in sorted(needed):
        target = root / library.relative_to("/")
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(library), target)
    for lib in Path("/").glob("usr/lib/*/libgcc_s.so.1"):
        copy(lib, root)
    for name in ETC:
        if (Path("/etc") / name).exists():
            copy(Path("/etc") / name, root)
    if Path("/usr/lib/ssl").exists():  # OpenSSL's default paths: links into /etc/ssl
        copy(Path("/usr/lib/ssl"), root)
    (root / "tmp").mkdir(mode=0o1777, exist_ok=True)
    (root / "tmp").chmod(0o1777)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
