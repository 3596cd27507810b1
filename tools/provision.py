#!/usr/bin/env python3
"""Provision every real tool this project's tests and demo run against, idempotently.

One step, pinned by ``tools/versions.toml`` (the only place versions live):

* the project venv (``.venv``) with the package and its test/dev extras, pinned by constraints;
* the Pulumi CLI, built from ``tools/go/pulumi``; kube-apiserver, kubectl and
  kube-controller-manager from ``tools/go/kube``; etcd from ``tools/go/etcd``;
* the language hosts a user's ``pulumi up`` runs: ``pulumi-language-python`` and
  ``pulumi-language-nodejs`` (the newest releases whose programs still live in the
  ``github.com/pulumi/pulumi/sdk/v3`` module; see ``tools/versions.toml``) and
  ``pulumi-language-yaml``, each from its own wrapper module under ``tools/go/``;
* the two scripts Pulumi's distribution installs beside the CLI, copied from the ``sdk/v3`` module
  at the CLI's version (the CLI build already downloaded it): ``pulumi-language-python-exec`` (the
  Python host runs it to execute a program) and ``pulumi-resource-pulumi-python`` (the engine runs
  it for dynamic resources).
* ``prometheus`` and ``promtool`` from Debian's ``prometheus`` package (``apt-get``, as root),
  for the tests of the loop's alert rules and dashboard (``tests/resync/test_monitoring.py``).

The real SGLang server (its own virtualenv, the tiny model, the CPU shims) is ``tools/
sglang_env.py``'s, a phase of its own in ``scripts/test.sh``: about 11 GB that the demo and the
fast tier do not need.

Binaries go to ``${PULUMI_LORA_CACHE:-~/.cache/pulumi-lora}/bin``, never into the repo.

A binary already on ``PATH`` or in the cache is reused when its version matches; otherwise it is
built (a cold build takes minutes on two cores, a warm one seconds). Every phase prints how long
it took. A failure names the exact command and shows the end of its output.

It runs with the machine's ``python3`` (3.11+, standard library only) because it creates the venv.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS_FILE = ROOT / "tools" / "versions.toml"
GO_DIR = ROOT / "tools" / "go"


class ProvisionError(RuntimeError):
    """A provisioning command failed; the message names the command and its output."""


def load_versions() -> dict[str, dict[str, str]]:
    """Read ``tools/versions.toml``."""
    with VERSIONS_FILE.open("rb") as f:
        return tomllib.load(f)


def cache_dir() -> Path:
    """Where built binaries live (outside the repo, reused across clones)."""
    return Path(os.environ.get("PULUMI_LORA_CACHE", Path.home() / ".cache" / "pulumi-lora"))


def bin_dir() -> Path:
    """The directory holding the provisioned binaries."""
    return cache_dir() / "bin"


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays clean for callers."""
    print(f"[provision] {message}", file=sys.stderr, flush=True)


@contextmanager
def phase(name: str, timings: list[tuple[str, float]]) -> Iterator[None]:
    """Time one phase and record it for the summary."""
    log(f"{name} ...")
    start = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - start
        timings.append((name, elapsed))
        log(f"{name}: {elapsed:.1f}s")


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    capture: bool = True,
) -> str:
    """Run a command; on failure raise with the exact command line and the tail of its output."""
    printable = " ".join(str(c) for c in cmd)
    proc = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout or "").splitlines()[-40:])
        where = f" (in {cwd})" if cwd else ""
        raise ProvisionError(
            f"command failed with exit {proc.returncode}{where}:\n  {printable}\n{tail}"
        )
    return proc.stdout or ""


# --- version probes ---------------------------------------------------------------------------


def _probe(cmd: Sequence[str], pattern: str) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, out.stdout + out.stderr)
    return match.group(1) if match else None


def pulumi_version(path: Path) -> str | None:
    """``pulumi version`` prints ``v3.274.1``."""
    return _probe([str(path), "version"], r"v?(\d+\.\d+\.\d+\S*)")


def etcd_version(path: Path) -> str | None:
    """``etcd --version`` prints ``etcd Version: 3.6.16``."""
    return _probe([str(path), "--version"], r"etcd Version:\s*(\S+)")


def kube_apiserver_version(path: Path) -> str | None:
    """``kube-apiserver --version`` prints ``Kubernetes v1.36.3``."""
    return _probe([str(path), "--version"], r"Kubernetes v(\S+)")


def kubectl_version(path: Path) -> str | None:
    """``kubectl version --client`` prints ``Client Version: v1.36.3``."""
    return _probe([str(path), "version", "--client"], r"Client Version:\s*v(\S+)")


def built_module_version(go_version_m: str, module: str) -> str | None:
    """Pure: the version of ``module`` in the output of ``go version -m BINARY``."""
    match = re.search(rf"^\s*(?:dep|mod)\s+{re.escape(module)}\s+v(\S+)", go_version_m, re.M)
    return match.group(1) if match else None


def stamp_path(binary: Path) -> Path:
    """Where :func:`write_stamp` records what a binary was built as."""
    return binary.with_name(binary.name + ".stamp.json")


def write_stamp(binary: Path, version: str) -> None:
    """Record the version a binary was built as, with its size and mtime (to notice a swap)."""
    info = binary.stat()
    stamp = {"version": version, "size": info.st_size, "mtime_ns": info.st_mtime_ns}
    stamp_path(binary).write_text(json.dumps(stamp))


def stamped_version(binary: Path) -> str | None:
    """The version :func:`write_stamp` recorded for this very file, else ``None``.

    For a binary that reports its version nowhere it can be read: pulumi-resource-kubernetes
    prints none, ``-trimpath`` drops ``-ldflags`` from ``go version -m``, and the module built
    into it is a pseudo-version, not the release it is stamped as.
    """
    try:
        stamp = json.loads(stamp_path(binary).read_text())
        info = binary.stat()
    except (OSError, ValueError):
        return None
    if (stamp.get("size"), stamp.get("mtime_ns")) != (info.st_size, info.st_mtime_ns):
        return None
    version = stamp.get("version")
    return version if isinstance(version, str) else None


def _go_version_m(path: Path) -> str:
    try:
        out = subprocess.run(
            ["go", "version", "-m", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout


def module_version(module: str) -> Callable[[Path], str | None]:
    """A probe reading the version of ``module`` built into a Go binary (``go version -m``).

    The language hosts print no version of their own (only over gRPC); the module they were built
    from is recorded in the binary, which is what the pin names.
    """

    return lambda path: built_module_version(_go_version_m(path), module)


# --- Go tools ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoTool:
    """One binary built from one of the committed wrapper modules."""

    name: str
    module_dir: str
    package: str
    version: str
    probe: Callable[[Path], str | None]
    tags: str = ""
    ldflags: str = ""
    cgo: bool = True
    prepare: Callable[[], None] | None = None
    """Runs before a build (e.g. generating files the module expects but does not ship)."""
    stamp: bool = False
    """Record the built version beside the binary (for :func:`stamped_version`)."""


def go_tools(v: dict[str, dict[str, str]]) -> list[GoTool]:
    """The Go-built tools, in build order (cheapest first)."""
    kube = v["kubernetes"]["version"]
    major, minor, _ = kube.split(".")
    kube_ld = " ".join(
        f"-X {pkg}.{key}={val}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, val in (
            ("gitVersion", f"v{kube}"),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
        )
    )
    pulumi = v["pulumi"]["cli"]
    sdk = "github.com/pulumi/pulumi/sdk/v3"
    sdk_version = f"-X {sdk}/go/common/version.Version=v"
    python_host = v["pulumi"]["language_python"]
    nodejs_host = v["pulumi"]["language_nodejs"]
    yaml_host = v["pulumi"]["language_yaml"]
    k8s = v["pulumi_kubernetes"]
    return [
        GoTool("etcd", "etcd", "go.etcd.io/etcd/server/v3", v["etcd"]["version"], etcd_version),
        GoTool(
            "pulumi-language-python",
            "pulumi-language-python",
            f"{sdk}/python/cmd/pulumi-language-python",
            python_host,
            module_version(sdk),
            ldflags=sdk_version + python_host,
            cgo=False,
        ),
        GoTool(
            "pulumi-language-nodejs",
            "pulumi-language-nodejs",
            f"{sdk}/nodejs/cmd/pulumi-language-nodejs",
            nodejs_host,
            module_version(sdk),
            ldflags=sdk_version + nodejs_host,
            cgo=False,
        ),
        GoTool(
            "pulumi",
            "pulumi",
            "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
            pulumi,
            pulumi_version,
            tags="osusergo,grpcnotrace",
            ldflags=sdk_version + pulumi,
        ),
        GoTool(
            "pulumi-lora-sdkgen",  # the SDK generators the CLI carries, called in-process
            "sdkgen",
            "pulumi-lora.local/tools/sdkgen",
            pulumi,
            module_version("github.com/pulumi/pulumi/pkg/v3"),
            cgo=False,
        ),
        GoTool(
            "pulumi-language-yaml",
            "pulumi-language-yaml",
            "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml",
            yaml_host,
            module_version("github.com/pulumi/pulumi-yaml"),
            ldflags=f"-X github.com/pulumi/pulumi-yaml/pkg/version.Version=v{yaml_host}",
            cgo=False,
        ),
        GoTool(
            "pulumi-resource-kubernetes",
            "pulumi-kubernetes",
            f"{K8S_PROVIDER_MODULE}/cmd/pulumi-resource-kubernetes",
            k8s["version"],
            stamped_version,
            ldflags=f"-X {K8S_PROVIDER_MODULE}/pkg/version.Version={k8s['version']}",
            cgo=False,
            prepare=lambda: prepare_kubernetes_provider(k8s["provider"], k8s["version"]),
            stamp=True,
        ),
        GoTool(
            "kube-apiserver",
            "kube",
            "k8s.io/kubernetes/cmd/kube-apiserver",
            kube,
            kube_apiserver_version,
            tags="selinux,notest,grpcnotrace",
            ldflags=kube_ld,
            cgo=False,
        ),
        GoTool(
            "kubectl",
            "kube",
            "k8s.io/kubernetes/cmd/kubectl",
            kube,
            kubectl_version,
            tags="selinux,notest,grpcnotrace",
            ldflags=kube_ld,
            cgo=False,
        ),
        GoTool(
            "kube-controller-manager",
            "kube",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            kube,
            kube_apiserver_version,  # prints "Kubernetes v1.36.3" too
            tags="selinux,notest,grpcnotrace",
            ldflags=kube_ld,
            cgo=False,
        ),
    ]


def ensure_go_tool(tool: GoTool) -> Path:
    """Reuse a matching binary (cache, then PATH) or build it into the cache."""
    target = bin_dir() / tool.name
    candidates = [target]
    on_path = shutil.which(tool.name)
    if on_path and Path(on_path).resolve() != target.resolve():
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.exists():
            found = tool.probe(candidate)
            if found == tool.version:
                if candidate != target:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.unlink(missing_ok=True)
                    target.symlink_to(candidate.resolve())
                log(f"{tool.name} {found}: reusing {candidate}")
                return target
            log(f"{tool.name} at {candidate} is {found or 'unknown'}, want {tool.version}")
    if shutil.which("go") is None:
        raise ProvisionError(f"{tool.name} {tool.version} must be built, but `go` is not on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    if tool.prepare is not None:
        tool.prepare()
    env = dict(os.environ, CGO_ENABLED="1" if tool.cgo else "0", GOFLAGS="-mod=readonly")
    cmd = ["go", "build", "-trimpath", "-o", str(target)]
    if tool.tags:
        cmd += ["-tags", tool.tags]
    if tool.ldflags:
        cmd += ["-ldflags", tool.ldflags]
    cmd.append(tool.package)
    log(f"building {tool.name} {tool.version} (cold: minutes; warm: seconds): {' '.join(cmd)}")
    run(cmd, cwd=GO_DIR / tool.module_dir, env=env)
    if tool.stamp:
        write_stamp(target, tool.version)
    found = tool.probe(target)
    if found != tool.version:
        raise ProvisionError(
            f"built {target} but it reports version {found!r}, want {tool.version}"
        )
    return target


K8S_PROVIDER_MODULE = "github.com/pulumi/pulumi-kubernetes/provider/v4"
K8S_PROVIDER_CMD = "cmd/pulumi-resource-kubernetes"
K8S_SOURCE_DIR = GO_DIR / "pulumi-kubernetes" / "provider"
"""Where the wrapper's ``replace`` points: a writable copy of the provider module (gitignored)."""


def embedded_schema(schema: dict[str, object], version: str) -> str:
    """Pure: what the provider's ``generate.go`` writes to ``schema-embed.json``: the schema with
    its version set, compact."""
    return json.dumps({**schema, "version": version}, separators=(",", ":"))


def prepare_kubernetes_provider(pseudo_version: str, version: str) -> None:
    """Copy the served provider module into ``K8S_SOURCE_DIR`` and generate its embedded files.

    The module proxy serves ``provider/v4`` without ``schema-embed.json`` and
    ``terraform-mapping-embed.json`` (generated in pulumi-kubernetes' own build by
    ``go generate``, never committed), so ``go:embed`` fails on the served copy ("pattern
    schema-embed.json: no matching files found"). This does what its ``generate.go`` does.
    """
    listing = run(
        ["go", "mod", "download", "-json", f"{K8S_PROVIDER_MODULE}@v{pseudo_version}"],
        cwd=GO_DIR / "pulumi-kubernetes",
    )
    served = Path(json.loads(listing)["Dir"])
    stamp = K8S_SOURCE_DIR / ".prepared"
    key = f"{pseudo_version} {version}"
    if stamp.exists() and stamp.read_text() == key:
        return
    if K8S_SOURCE_DIR.exists():
        shutil.rmtree(K8S_SOURCE_DIR)
    shutil.copytree(served, K8S_SOURCE_DIR)
    for path in [K8S_SOURCE_DIR, *K8S_SOURCE_DIR.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
    cmd = K8S_SOURCE_DIR / K8S_PROVIDER_CMD
    schema = json.loads((cmd / "schema.json").read_text())
    (cmd / "schema-embed.json").write_text(embedded_schema(schema, version))
    mapping = json.loads((cmd / "terraform-mapping.json").read_text())
    (cmd / "terraform-mapping-embed.json").write_text(json.dumps(mapping, separators=(",", ":")))
    stamp.write_text(key)


HOST_SCRIPTS = (
    "python/cmd/pulumi-language-python-exec",
    "python/dist/pulumi-resource-pulumi-python",
)
"""Files of the ``sdk/v3`` module that Pulumi's distribution installs beside the CLI."""


def ensure_host_scripts(cli_version: str) -> list[Path]:
    """Copy the ``sdk/v3`` module's host scripts, at the CLI's version, next to ``pulumi``.

    The Python host runs ``pulumi-language-python-exec`` from its own directory; the engine finds
    ``pulumi-resource-pulumi-python`` (dynamic providers) beside the CLI, as in a real install.
    """
    listing = run(
        ["go", "mod", "download", "-json", f"github.com/pulumi/pulumi/sdk/v3@v{cli_version}"],
        cwd=GO_DIR / "pulumi",
    )
    module_dir = Path(json.loads(listing)["Dir"])
    installed = []
    for relative in HOST_SCRIPTS:
        source = module_dir / relative
        target = bin_dir() / source.name
        text = source.read_text()
        if not target.exists() or target.read_text() != text:
            target.unlink(missing_ok=True)
            target.write_text(text)
        target.chmod(0o755)
        installed.append(target)
    return installed


# --- Python side ------------------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    """The venv's interpreter."""
    return venv / "bin" / "python"


def constraints(v: dict[str, dict[str, str]]) -> str:
    """Exact pins for pip, from versions.toml (the Pulumi SDK included)."""
    pins = dict(v["python"])
    pins["pulumi"] = v["pulumi"]["python_sdk"]
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def ensure_venv(v: dict[str, dict[str, str]], venv: Path, extras: str) -> Path:
    """Create the venv and install the package with its extras, pinned; skip when up to date."""
    python = venv_python(venv)
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
    pins = constraints(v)
    stamp_key = pins + extras + (ROOT / "pyproject.toml").read_text()
    stamp = venv / ".pulumi-lora-provisioned"
    if stamp.exists() and stamp.read_text() == stamp_key:
        log(f"venv {venv}: up to date")
        return python
    constraints_file = venv / "constraints.txt"
    constraints_file.write_text(pins)
    run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            constraints_file,
            "-e",
            f"{ROOT}[{extras}]",
        ]
    )
    stamp.write_text(stamp_key)
    return python


def ensure_prometheus() -> str:
    """``prometheus`` and ``promtool`` from Debian's package, installed when missing (root and
    ``apt-get`` needed; elsewhere the command to run is named). Returns ``promtool``'s path."""
    found = shutil.which("promtool")
    if found is not None and shutil.which("prometheus") is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ProvisionError("prometheus is missing: as root, `apt-get install prometheus`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # The package's service is not started: nothing here runs systemd, and the tests start
    # their own Prometheus on loopback.
    run(["apt-get", "update", "-q"], env=env)
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"], env=env)
    found = shutil.which("promtool")
    if found is None:
        raise ProvisionError("apt-get installed prometheus but promtool is not on PATH")
    return found


def ensure_loop_image(python: Path, venv: Path) -> str:
    """Install podman/runc/mmdebstrap if missing and build the loop's image (``tools/image.py``).

    The base is made locally (mmdebstrap, Debian's packages: no image registry needed); the
    image is rebuilt only when its inputs changed. Returns the image's tag.
    """
    spec = importlib.util.spec_from_file_location("image", ROOT / "tools" / "image.py")
    assert spec is not None and spec.loader is not None
    image = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(image)
    argv = ["--local-base", "--install-tools", "--python", str(python)]
    argv += ["--constraints", str(venv / "constraints.txt")]
    if image.main(argv) != 0:
        raise ProvisionError(
            f"the loop's image did not build: python3 tools/image.py {' '.join(argv)}"
        )
    tag: str = image.default_tag()
    return tag


# --- go.mod generation (kept in sync with versions.toml) ----------------------------------------


def kube_replaces(kubernetes_gomod: str, staging: str) -> list[str]:
    """The staging modules k8s.io/kubernetes requires at v0.0.0, pinned to their published version.

    Pure: the input is the text of k8s.io/kubernetes's own go.mod; only modules it both requires
    (at v0.0.0) and redirects into ``./staging`` need a replace in the wrapper.
    """
    required = set(re.findall(r"^\s*(k8s\.io/[\w.-]+) v0\.0\.0\s*$", kubernetes_gomod, re.M))
    staged = re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging", kubernetes_gomod, re.M)
    return [f"{m} => {m} v{staging}" for m in staged if m in required]


def check_gomods(v: dict[str, dict[str, str]]) -> list[str]:
    """Report where a committed wrapper go.mod disagrees with versions.toml."""
    problems = []
    expect = {
        "pulumi": [
            f"github.com/pulumi/pulumi/pkg/v3 v{v['pulumi']['cli']}",
            f"github.com/pulumi/pulumi/sdk/v3 v{v['pulumi']['cli']}",
        ],
        "kube": [
            f"k8s.io/kubernetes v{v['kubernetes']['version']}",
            f"=> k8s.io/api v{v['kubernetes']['staging']}",
        ],
        "etcd": [f"go.etcd.io/etcd/server/v3 v{v['etcd']['version']}"],
        "sdkgen": [f"github.com/pulumi/pulumi/pkg/v3 v{v['pulumi']['cli']}"],
        "pulumi-language-python": [
            f"github.com/pulumi/pulumi/sdk/v3 v{v['pulumi']['language_python']}"
        ],
        "pulumi-language-nodejs": [
            f"github.com/pulumi/pulumi/sdk/v3 v{v['pulumi']['language_nodejs']}"
        ],
        "pulumi-language-yaml": [f"github.com/pulumi/pulumi-yaml v{v['pulumi']['language_yaml']}"],
        "pulumi-kubernetes": [
            f"{K8S_PROVIDER_MODULE} v{v['pulumi_kubernetes']['provider']}",
            f"=> github.com/pulumi/pulumi-kubernetes/sdk/v4 v{v['pulumi_kubernetes']['sdk']}",
            f"{K8S_PROVIDER_MODULE} => ./provider",
        ],
    }
    for module, needles in expect.items():
        text = (GO_DIR / module / "go.mod").read_text()
        problems += [f"tools/go/{module}/go.mod lacks {n!r}" for n in needles if n not in text]
    return problems


# --- main -------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Provision everything; print one line per tool and the phase timings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv")
    parser.add_argument("--extras", default="test,dev,metrics,kubernetes,staging")
    parser.add_argument("--skip-go", action="store_true", help="only the Python side")
    parser.add_argument("--skip-image", action="store_true", help="no podman or loop image")
    parser.add_argument("--json", action="store_true", help="print the tool paths as JSON")
    args = parser.parse_args(argv)

    timings: list[tuple[str, float]] = []
    versions = load_versions()
    report: dict[str, str] = {}
    try:
        with phase("check wrapper go.mod files", timings):
            problems = check_gomods(versions)
            if problems:
                raise ProvisionError("\n".join(problems))
        with phase("python venv", timings):
            python = ensure_venv(versions, args.venv, args.extras)
            report["python"] = str(python)
        if not args.skip_go:
            for tool in go_tools(versions):
                with phase(f"{tool.name} {tool.version}", timings):
                    report[tool.name] = str(ensure_go_tool(tool))
            with phase("host scripts beside pulumi", timings):
                for script in ensure_host_scripts(versions["pulumi"]["cli"]):
                    report[script.name] = str(script)
        with phase("prometheus (Debian's package)", timings):
            report["promtool"] = ensure_prometheus()
        if not (args.skip_image or args.skip_go):
            with phase("loop image (podman, deploy/Dockerfile)", timings):
                report["loop image"] = ensure_loop_image(python, args.venv)
    except ProvisionError as exc:
        log(f"FAILED: {exc}")
        return 1
    finally:
        total = sum(t for _, t in timings)
        log(
            "phase timings: "
            + ", ".join(f"{n} {t:.1f}s" for n, t in timings)
            + f"; total {total:.1f}s"
        )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, path in report.items():
            log(f"ready: {name} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
