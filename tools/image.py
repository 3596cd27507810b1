#!/usr/bin/env python3
"""Build the project's image (``deploy/Dockerfile``: the re-sync loop and the staging Jobs)
from this checkout, offline.

    python3 tools/image.py                                  # localhost/pulumi-lora:VERSION
    python3 tools/image.py --tag ghcr.io/acme/pulumi-lora:0.3.0       # then podman push it
    python3 tools/image.py --local-base                      # what the tests run (below)
    python3 tools/image.py --platform linux/amd64 --platform linux/arm64 --tag REG/pulumi-lora:V
                                  # one image per platform (TAG-amd64, TAG-arm64), TAG their
                                  # manifest list: podman manifest push --all TAG docker://TAG

Steps, each timed:

1. **wheels** into ``build/wheels``: this checkout's wheel, and every dependency of
   ``pulumi-lora[metrics,staging]`` (the loop's metrics, the staging Jobs' Hub and S3 clients)
   but the Pulumi SDK's (``NOT_IN_IMAGE``: neither the loop nor the stager runs a Pulumi
   program) as a binary wheel for CPython 3.11 on manylinux of this machine's architecture
   (whatever Python runs this script), pinned by ``tools/versions.toml``;
2. **the base image**, with ``--local-base`` only: Debian bookworm (``python3``, ``python3-venv``)
   made by ``mmdebstrap`` from Debian's packages and ``podman import``-ed, for machines that reach
   Debian's mirror but no image registry (this one); its root file system is cached as a tarball
   under ``${PULUMI_LORA_CACHE:-~/.cache/pulumi-lora}/images``. Without it the Dockerfile's default
   base (``python:3.11-slim-bookworm``) is pulled as usual;
3. **the image**: ``podman build`` (or ``docker build``) of ``deploy/Dockerfile`` with no network
   (its final stage is ``FROM scratch`` plus what ``deploy/slim.py`` gathers: the virtualenv,
   CPython and the shared libraries they load), labelled with a hash of what it is made from; an
   image of that tag with the same label is kept as it is (``--force`` rebuilds).

``--install-tools`` (what ``tools/provision.py`` passes) first installs podman, runc and
mmdebstrap from Debian's packages when missing (``apt-get``, as root). Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
WHEELS = ROOT / "build" / "wheels"
INPUTS_LABEL = "dev.pulumi-lora.inputs"
"""The image label holding the hash of what the image was built from."""

LOCAL_BASE = "localhost/pulumi-lora-base:bookworm"
"""The base image ``--local-base`` makes with mmdebstrap."""

DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv")
# Documentation, manual pages and translations are left out of the base (copyright files stay).
_DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
)
CONTAINER_TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap"}
"""Program -> the Debian package that provides it."""

PYTHON_VERSION = "3.11"
"""The CPython of both bases (Debian bookworm's, and python:3.11-slim's)."""


class ImageError(RuntimeError):
    """A build step failed; the message names the command and the end of its output."""


def log(message: str) -> None:
    """Progress on stderr, prefixed like the provisioner's."""
    print(f"[image] {message}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str | os.PathLike[str]], *, cwd: Path | None = None) -> str:
    """Run a command; on failure raise with the command line and the tail of its output."""
    argv = [str(c) for c in cmd]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise ImageError(f"command failed with exit {proc.returncode}:\n  {' '.join(argv)}\n{tail}")
    return proc.stdout


def cache_dir() -> Path:
    """Where the base image's root file system is kept (outside the repo)."""
    root = Path(os.environ.get("PULUMI_LORA_CACHE", Path.home() / ".cache" / "pulumi-lora"))
    return root / "images"


def version() -> str:
    """pulumi-lora's version, read from the source (no import of the package)."""
    text = (ROOT / "pulumi_lora" / "_version.py").read_text()
    match = re.search(r'__version__ = "([^"]+)"', text)
    if match is None:
        raise ImageError("pulumi_lora/_version.py has no __version__")
    return match.group(1)


def default_tag() -> str:
    """The tag the tests and the local testbed use: ``localhost/pulumi-lora:VERSION``."""
    return f"localhost/pulumi-lora:{version()}"


PLATFORMS = {"linux/amd64": ("x86_64", "amd64"), "linux/arm64": ("aarch64", "arm64")}
"""The platforms the image is built for: OCI name -> (manylinux machine, Debian architecture)."""


def host_platform() -> str:
    """The OCI platform of the build machine."""
    machine = platform.machine()
    return next((name for name, (m, _) in PLATFORMS.items() if m == machine), f"linux/{machine}")


def emulated(machine: str) -> bool:
    """Whether the kernel runs ``machine``'s programs through qemu (binfmt_misc)."""
    return Path(f"/proc/sys/fs/binfmt_misc/qemu-{machine}").exists()


def foreign_wheels(wheels: Sequence[Path], machine: str) -> list[str]:
    """Pure: the wheels whose platform tag runs on no ``machine`` (a wheel's last tag is its
    platform: ``any``, or manylinux/musllinux of one machine)."""
    bad = []
    for wheel in wheels:
        tags = wheel.name.removesuffix(".whl").split("-")[-1]
        if not all(tag == "any" or tag.endswith(f"_{machine}") for tag in tags.split(".")):
            bad.append(wheel.name)
    return bad


def manylinux_platforms(machine: str) -> list[str]:
    """pip ``--platform`` values for any manylinux wheel a bookworm (glibc 2.36) base runs (pure).

    pip does not widen ``manylinux_2_36`` to older tags by itself, so every one is named.
    """
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(36, 4, -1)]
    return [*tags, *(f"manylinux{legacy}_{machine}" for legacy in ("2014", "2010", "1"))]


# --- tools ----------------------------------------------------------------------------------------


def missing_tools(engine: str, local_base: bool) -> list[str]:
    """Programs this build needs that are not on ``PATH``."""
    needed = [engine] + (["runc", "mmdebstrap"] if local_base and engine == "podman" else [])
    if engine == "podman" and "runc" not in needed:
        needed.append("runc")
    return [tool for tool in needed if shutil.which(tool) is None]


def install_tools(missing: Sequence[str]) -> None:
    """Install ``missing`` from Debian's packages (root and apt-get needed)."""
    packages = sorted({CONTAINER_TOOLS.get(tool, tool) for tool in missing})
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(
            f"missing {', '.join(missing)}: install them as root with "
            f"`apt-get install {' '.join(packages)}`"
        )
    log(f"installing {' '.join(packages)} from Debian's packages")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise ImageError(f"command failed with exit {proc.returncode}: {' '.join(cmd)}\n{tail}")


def engine_argv(engine: str) -> list[str]:
    """The engine's command, with runc for podman: crun refuses these VMs' hybrid cgroups."""
    return [engine, "--runtime", "runc"] if engine == "podman" else [engine]


# --- steps ----------------------------------------------------------------------------------------


IMAGE_EXTRAS = ("metrics", "staging")
"""What the image runs besides the package: the loop's metrics, the staging Jobs' clients."""
NOT_IN_IMAGE = frozenset({"pulumi"})
"""Requirements the image leaves out: the Pulumi SDK (grpcio, protobuf, OpenTelemetry, debugpy
and the rest of its closure) serves Pulumi programs and the provider; neither the loop nor the
stager imports it (``tests/unit/test_image_requirements.py``)."""


def image_requirements(metadata: str) -> list[str]:
    """Pure: the requirements the image installs, from the wheel's ``METADATA``: every
    ``Requires-Dist`` with no marker or one of :data:`IMAGE_EXTRAS`' markers, markers dropped,
    less :data:`NOT_IN_IMAGE`."""
    found = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement, _, marker = line.removeprefix("Requires-Dist:").strip().partition(";")
        extra = re.search(r"""extra\s*==\s*["']([\w.-]+)["']""", marker)
        if marker.strip() and not (extra and extra.group(1) in IMAGE_EXTRAS):
            continue
        name = re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0]
        if re.sub(r"[-_.]+", "-", name).lower() not in NOT_IN_IMAGE:
            found.append(requirement.strip())
    return found


def wheel_metadata(wheel: Path) -> str:
    """The ``METADATA`` of ``wheel``."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode("utf-8")


def build_wheels(python: str, pins: Path | None, machine: str, into: Path = WHEELS) -> list[Path]:
    """This checkout's wheel and every binary wheel the image installs (``image_requirements``:
    its closure, the Pulumi SDK's left out), into ``into`` (``build/wheels``)."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    run([*pip, "wheel", "--no-deps", "--wheel-dir", into, ROOT])
    own = next(into.glob("pulumi_lora-*.whl"))
    platforms = [f"--platform={p}" for p in manylinux_platforms(machine)]
    abi = "cp" + PYTHON_VERSION.replace(".", "")
    run(
        [
            *pip,
            "download",
            "--dest",
            into,
            "--only-binary=:all:",
            f"--python-version={PYTHON_VERSION}",
            "--implementation=cp",
            f"--abi={abi}",
            "--abi=abi3",
            "--abi=none",
            *platforms,
            *(["--constraint", str(pins)] if pins else []),
            *image_requirements(wheel_metadata(own)),
        ]
    )
    wheels = sorted(into.glob("*.whl"))
    bad = foreign_wheels(wheels, machine)
    if bad:
        raise ImageError(f"wheels for another machine than {machine}: {', '.join(bad)}")
    return wheels


def base_key() -> str:
    """A hash of what the local base is made from."""
    recipe = [DEBIAN_SUITE, "minbase", *BASE_PACKAGES, *_DPKG_OPTIONS]
    return hashlib.sha256("\n".join(recipe).encode()).hexdigest()[:16]


def image_exists(engine: str, ref: str) -> bool:
    """Whether ``ref`` is in the engine's local storage."""
    proc = subprocess.run([engine, "image", "inspect", ref], capture_output=True, check=False)
    return proc.returncode == 0


def ensure_local_base(arch: str) -> str:
    """The mmdebstrap-made base for Debian architecture ``arch`` in podman's storage (imported
    from the cached tarball if any); another architecture than the machine's runs its package
    scripts under qemu-user-static (``--install-tools`` installs it)."""
    key = base_key()
    native = arch == PLATFORMS.get(host_platform(), ("", ""))[1]
    ref = f"{LOCAL_BASE}-{key}" if native else f"{LOCAL_BASE}-{arch}-{key}"
    if image_exists("podman", ref):
        log(f"base {ref}: present")
        return ref
    stem = f"rootfs-{DEBIAN_SUITE}" if native else f"rootfs-{DEBIAN_SUITE}-{arch}"
    tarball = cache_dir() / f"{stem}-{key}.tar"
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        log(f"mmdebstrap {DEBIAN_SUITE} (minbase + {', '.join(BASE_PACKAGES)}) -> {tarball}")
        partial = tarball.with_suffix(".partial")
        options = [f"--dpkgopt={option}" for option in _DPKG_OPTIONS]
        run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                f"--architectures={arch}",
                f"--include={','.join(BASE_PACKAGES)}",
                *options,
                "--format=tar",
                DEBIAN_SUITE,
                partial,
            ]
        )
        partial.rename(tarball)
    run(["podman", "import", "--quiet", f"--arch={arch}", tarball, ref])
    log(f"base {ref}: imported from {tarball}")
    return ref


def inputs_key(wheels: Sequence[Path], base: str) -> str:
    """A hash of the Dockerfile, the ignore file, every wheel's bytes and the base's name."""
    digest = hashlib.sha256()
    for path in [DOCKERFILE, DOCKERFILE.parent / "slim.py", ROOT / ".dockerignore", *wheels]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(base.encode())
    return digest.hexdigest()[:24]


def built_key(engine: str, tag: str) -> str | None:
    """The inputs label of the image ``tag`` (``None`` without such an image)."""
    proc = subprocess.run(
        [engine, "image", "inspect", tag, "--format", "{{json .Config.Labels}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    labels = json.loads(proc.stdout or "null") or {}
    value = labels.get(INPUTS_LABEL)
    return str(value) if value else None


def build_image(engine: str, tag: str, base: str | None, key: str, oci_platform: str) -> None:
    """``podman build`` / ``docker build`` of deploy/Dockerfile for ``oci_platform``, with no
    network (another platform than the machine's runs its RUN step under qemu-user-static)."""
    cmd = [engine, "build", "--quiet", "--network=none", f"--platform={oci_platform}"]
    if engine == "podman":
        cmd.append("--runtime=runc")  # RUN steps: crun refuses hybrid cgroups (see engine_argv)
    cmd += ["--file", str(DOCKERFILE), "--label", f"{INPUTS_LABEL}={key}", "--tag", tag]
    if base is not None:
        cmd += ["--build-arg", f"BASE={base}"]
    run([*cmd, str(ROOT)])


def describe(engine: str, tag: str) -> dict[str, object]:
    """Size, user, entrypoint and the Python distributions inside the image."""
    info = json.loads(run([engine, "image", "inspect", tag]))[0]
    config = info.get("Config", {})
    listing = run(
        [
            *engine_argv(engine),
            "run",
            "--rm",
            "--network=none",
            *(
                ["--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024"]
                if engine == "podman"
                else []
            ),
            "--entrypoint=/opt/pulumi-lora/bin/python",
            tag,
            "-c",
            "import importlib.metadata as m;"
            "print(' '.join(sorted(f'{d.name}=={d.version}' for d in m.distributions())))",
        ]
    )
    return {
        "tag": tag,
        "size_mb": round(int(info.get("Size", 0)) / 1e6, 1),
        "user": config.get("User"),
        "entrypoint": config.get("Entrypoint"),
        "cmd": config.get("Cmd"),
        "python_packages": listing.split(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Build (or keep) the image; print what it holds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", default=None, help="default: localhost/pulumi-lora:VERSION")
    parser.add_argument("--engine", choices=("podman", "docker"), default="podman")
    parser.add_argument("--base", default=None, help="the Dockerfile's BASE (a registry image)")
    parser.add_argument("--local-base", action="store_true", help="make BASE with mmdebstrap")
    parser.add_argument("--python", default=sys.executable, help="the pip that fetches wheels")
    parser.add_argument("--constraints", type=Path, default=None, help="pip constraints file")
    parser.add_argument("--install-tools", action="store_true", help="apt-get what is missing")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")
    parser.add_argument(
        "--platform",
        action="append",
        choices=sorted(PLATFORMS),
        help="build for this platform (repeat: one image each, TAG-ARCH, and TAG a manifest "
        "list of them); default: this machine's",
    )
    parser.add_argument(
        "--wheels-only", action="store_true", help="fetch and check the wheels, build nothing"
    )
    parser.add_argument(
        "--wheels-dir",
        type=Path,
        default=WHEELS,
        help="where the wheels go (another folder than build/wheels: with --wheels-only only)",
    )
    args = parser.parse_args(argv)
    if args.wheels_dir != WHEELS and not args.wheels_only:
        parser.error("--wheels-dir goes with --wheels-only: the Dockerfile copies build/wheels")
    platforms: list[str] = list(dict.fromkeys(args.platform or [host_platform()]))
    tag = args.tag or default_tag()
    code = 0
    for oci_platform in platforms:
        own_tag = tag if len(platforms) == 1 else f"{tag}-{PLATFORMS[oci_platform][1]}"
        code = code or build_one(args, oci_platform, own_tag)
    if code == 0 and len(platforms) > 1 and not args.wheels_only:
        try:
            manifest_list(args.engine, tag, [f"{tag}-{PLATFORMS[p][1]}" for p in platforms])
        except ImageError as exc:
            log(f"FAILED: {exc}")
            return 1
    return code


def manifest_list(engine: str, tag: str, images: Sequence[str]) -> None:
    """``tag`` as a manifest list of ``images`` (one per platform): what a registry serves to
    a node of either architecture (``podman manifest push --all`` pushes it)."""
    subprocess.run([engine, "manifest", "rm", tag], capture_output=True, check=False)
    run([engine, "manifest", "create", tag])
    for image in images:
        run([engine, "manifest", "add", tag, f"containers-storage:{image}"])
    log(f"{tag}: manifest list of {', '.join(images)}")


def build_one(args: argparse.Namespace, oci_platform: str, tag: str) -> int:
    """One platform's image ``tag`` (or only its wheels, with ``--wheels-only``)."""
    machine, arch = PLATFORMS.get(oci_platform, (platform.machine(), ""))
    started = time.monotonic()
    timings: list[tuple[str, float]] = []

    def step(name: str, began: float) -> None:
        timings.append((name, time.monotonic() - began))
        log(f"{name}: {timings[-1][1]:.1f}s")

    try:
        began = time.monotonic()
        missing = missing_tools(args.engine, args.local_base)
        if missing and args.install_tools:
            install_tools(missing)
        elif missing:
            raise ImageError(f"missing {', '.join(missing)} (or pass --install-tools as root)")
        step("container tools", began)
        began = time.monotonic()
        wheels = build_wheels(args.python, args.constraints, machine, args.wheels_dir)
        step(f"wheels ({len(wheels)}, all for {machine})", began)
        if args.wheels_only:
            return 0
        if oci_platform != host_platform() and not emulated(machine):
            raise ImageError(
                f"building for {oci_platform} on {host_platform()} runs its RUN step under "
                "qemu-user-static: apt-get install qemu-user-static binfmt-support arch-test "
                "(as root; arch-test for --local-base's mmdebstrap)"
            )
        base = args.base
        if args.local_base:
            began = time.monotonic()
            base = ensure_local_base(arch)
            step("base image", began)
        key = inputs_key(wheels, f"{base or ''} {oci_platform}")
        began = time.monotonic()
        if not args.force and built_key(args.engine, tag) == key:
            log(f"{tag}: up to date ({INPUTS_LABEL}={key})")
        else:
            build_image(args.engine, tag, base, key, oci_platform)
            log(f"{tag}: built")
            # The images this tool built before, now untagged: nobody else's are touched.
            run([args.engine, "image", "prune", "--force", "--filter", f"label={INPUTS_LABEL}"])
        step("image", began)
        description = describe(args.engine, tag)
    except (ImageError, OSError, StopIteration) as exc:
        log(f"FAILED: {exc}")
        return 1
    log(
        f"{tag}: {description['size_mb']} MB, user {description['user']}, entrypoint "
        f"{description['entrypoint']} {description['cmd']}, "
        f"{len(description['python_packages'])} Python distributions; "  # type: ignore[arg-type]
        f"total {time.monotonic() - started:.1f}s"
    )
    if args.json:
        print(json.dumps(description, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
