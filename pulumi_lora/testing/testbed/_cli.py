"""``pulumi-lora testbed up|down|status``: a testbed that outlives the command that started it.

``up`` launches a detached supervisor (``_supervisor.py``) that runs the testbed, optionally with
InferenceServices, and returns once it is ready, printing the kubeconfig path. ``status`` reads the
state file and checks that every process is alive and the apiserver ready; ``down`` stops the
supervisor and waits until its processes are gone. Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import httpx2
import yaml

from pulumi_lora.testing.testbed._binaries import cache_dir
from pulumi_lora.testing.testbed._netns import remove_testbed_networks
from pulumi_lora.testing.testbed._process import tail
from pulumi_lora.testing.testbed._supervisor import STATE_FILE, read_state

__all__ = ["default_state_dir", "testbed_group"]

_SUPERVISOR_MODULE = "pulumi_lora.testing.testbed._supervisor"
_LOG_FILE = "supervisor.log"


def default_state_dir() -> Path:
    """``${PULUMI_LORA_CACHE:-~/.cache/pulumi-lora}/testbed``."""
    return cache_dir() / "testbed"


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _is_supervisor(pid: int | None) -> bool:
    """Alive, and really our supervisor (guards against a recycled pid)."""
    if not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return _SUPERVISOR_MODULE.encode() in cmdline


def _readyz(state: dict[str, Any]) -> bool:
    """Ask the apiserver's ``/readyz`` with the kubeconfig's CA and token (TLS verified)."""
    try:
        config = yaml.safe_load(Path(state["kubeconfig"]).read_text(encoding="utf-8"))
        cluster = config["clusters"][0]["cluster"]
        token = config["users"][0]["user"]["token"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=ca)
        answer = httpx2.get(
            f"{cluster['server']}/readyz",
            headers={"Authorization": f"Bearer {token}"},
            verify=context,
            trust_env=False,
            timeout=5.0,
        )
    except (OSError, KeyError, TypeError, ValueError, httpx2.HTTPError):
        return False
    return answer.status_code == 200


def _health(state: dict[str, Any]) -> dict[str, Any]:
    """Liveness of every recorded process, and apiserver readiness."""
    pids = state.get("pids") or {}
    report: dict[str, Any] = {
        "supervisor": _is_supervisor(state.get("supervisor_pid")),
        **{name: _pid_alive(pid) for name, pid in pids.items()},
    }
    pods = []
    for isvc in state.get("isvcs") or []:
        for pod in isvc.get("pods", []):
            pods.append(
                {
                    "namespace": pod["namespace"],
                    "name": pod["name"],
                    "url": pod["url"],
                    "ready": pod["ready"],
                    "alive": _pid_alive(pod.get("pid")),
                }
            )
    report["apiserver_ready"] = state.get("phase") == "ready" and _readyz(state)
    report["pods"] = pods
    return report


@click.group("testbed")
def testbed_group() -> None:
    """A local Kubernetes control plane with LLMKube's CRDs and emulated SGLang pods."""


_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the state file lives [default: $PULUMI_LORA_CACHE/testbed].",
)


@testbed_group.command("up")
@_state_dir_option
@click.option("--isvc", "isvcs", multiple=True, help="Deploy an InferenceService (repeatable).")
@click.option("--namespace", default="default", show_default=True, help="Its namespace.")
@click.option("--replicas", type=click.IntRange(0, 10), default=1, show_default=True)
@click.option(
    "--network", type=click.Choice(["loopback", "netns"]), default="loopback", show_default=True
)
@click.option("--startup-delay", type=float, default=0.0, show_default=True, help="Seconds of 503.")
@click.option(
    "--server",
    type=click.Choice(["emulator", "sglang"]),
    default="emulator",
    show_default=True,
    help="What the SGLang pods run: the emulator, or the real SGLang server on the CPU with "
    "the tiny model (`python3 tools/sglang_env.py` installs it; ~4 GB and ~30 s per pod).",
)
@click.option(
    "--adapter-claim",
    default=None,
    metavar="NAME",
    help="Mount a ReadWriteMany PersistentVolumeClaim NAME (made, bound, on a directory of the "
    "testbed) read-only at /adapters in every SGLang pod: where adapters declared by `source` "
    "are staged (docs/staging.md).",
)
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds to wait.")
@click.option(
    "--llmkube-lora-controller/--no-llmkube-lora-controller",
    default=True,
    show_default=True,
    help="Play LLMKube's own LoRA controller, as every LLMKube install runs it (hold it off "
    "pulumi-lora's CRs with `pulumi-lora coexistence-policy | kubectl apply -f -`).",
)
@click.option(
    "--container-runtime",
    type=click.Choice(["auto", "podman", "process"]),
    default="auto",
    show_default=True,
    help="How the re-sync loop's pods (ResyncDeployment) run: `podman` runs their image as "
    "real containers (only images in podman's local storage; build the loop's with `python3 "
    "tools/image.py --local-base`, tag localhost/pulumi-lora:VERSION); `process` runs the "
    "container's command as a local process; `auto` takes podman where it works. Either way "
    "they run as root-made sandboxes in network namespaces of their own and reach the SGLang "
    "pods on any --network.",
)
def up(  # noqa: PLR0917 - one parameter per click option
    state_dir: Path | None,
    isvcs: tuple[str, ...],
    namespace: str,
    replicas: int,
    network: str,
    startup_delay: float,
    server: str,
    adapter_claim: str | None,
    timeout: float,
    llmkube_lora_controller: bool,
    container_runtime: str,
) -> None:
    """Start a detached testbed and wait until it is ready."""
    state_dir = state_dir or default_state_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    existing = read_state(state_dir)
    if existing and _is_supervisor(existing.get("supervisor_pid")):
        raise click.ClickException(
            f"a testbed is already running (pid {existing['supervisor_pid']}); "
            f"run `pulumi-lora testbed down --state-dir {state_dir}` first"
        )
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    spec = {
        "isvcs": list(isvcs),
        "namespace": namespace,
        "replicas": replicas,
        "network": network,
        "startup_delay": startup_delay,
        "server": server,
        "adapter_claim": adapter_claim,
        "ready_timeout": timeout,
        "llmkube": llmkube_lora_controller,
        "container_runtime": container_runtime,
    }
    log_path = state_dir / _LOG_FILE
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", _SUPERVISOR_MODULE, "--state-dir", str(state_dir),
             "--spec", json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )  # fmt: skip
    _progress(f"testbed supervisor started (pid {proc.pid}), log: {log_path}")
    deadline = time.monotonic() + timeout + 60.0
    phase = None
    while True:
        state = read_state(state_dir)
        current = state.get("phase") if state else None
        if current != phase and current is not None:
            _progress(f"  {current}")
            phase = current
        if current == "ready" and state is not None:
            break
        if current == "failed" or proc.poll() is not None:
            error = (state or {}).get("error", f"supervisor exited with {proc.poll()}")
            _stop_pid(proc.pid, 30.0)
            (state_dir / STATE_FILE).unlink(missing_ok=True)
            raise click.ClickException(f"testbed failed: {error}\n{tail(log_path)}")
        if time.monotonic() > deadline:
            _stop_pid(proc.pid, 30.0)
            raise click.ClickException(f"testbed not ready within {timeout:.0f}s\n{tail(log_path)}")
        time.sleep(0.2)
    kubeconfig = state["kubeconfig"]
    _progress(f"testbed ready at {state['server']}")
    click.echo(kubeconfig)
    _progress(f"export KUBECONFIG={kubeconfig}")


def _stop_pid(pid: int, timeout: float) -> bool:
    """SIGTERM ``pid`` and wait until it is gone; returns whether it went."""
    if not _pid_alive(pid):
        return True
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Reap it if it is our child (``up`` failing); otherwise just poll.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


@testbed_group.command("status")
@_state_dir_option
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text")
def status(state_dir: Path | None, output: str) -> None:
    """Show the running testbed and check that its processes are alive (exit 1 if not)."""
    state_dir = state_dir or default_state_dir()
    state = read_state(state_dir)
    if state is None:
        if output == "json":
            click.echo(json.dumps({"running": False, "state_dir": str(state_dir)}))
        else:
            click.echo(f"no testbed running (state dir {state_dir})")
        sys.exit(1)
    health = _health(state)
    running = bool(health["supervisor"]) and state.get("phase") == "ready"
    healthy = running and all(
        health.get(name)
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "apiserver_ready")
    )
    report = {
        "running": running,
        "healthy": healthy,
        "phase": state.get("phase"),
        "state_dir": str(state_dir),
        "server": state.get("server"),
        "kubeconfig": state.get("kubeconfig"),
        "dir": state.get("dir"),
        "supervisor_pid": state.get("supervisor_pid"),
        "pids": state.get("pids"),
        "versions": state.get("versions"),
        "loop_pods": state.get("loop_pods"),
        "health": health,
    }
    if output == "json":
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        click.echo(f"testbed: {'running' if running else 'not running'} ({state.get('phase')})")
        click.echo(f"server: {state.get('server')}")
        click.echo(f"kubeconfig: {state.get('kubeconfig')}")
        for name in ("supervisor", "etcd", "kube-apiserver", "kube-controller-manager"):
            click.echo(f"{name}: {'alive' if health.get(name) else 'DEAD'}")
        click.echo(f"apiserver /readyz: {'ok' if health['apiserver_ready'] else 'FAILING'}")
        click.echo(f"re-sync loop pods run as: {state.get('loop_pods') or 'unknown'}")
        for pod in health["pods"]:
            click.echo(
                f"pod {pod['namespace']}/{pod['name']} {pod['url']} "
                f"{'alive' if pod['alive'] else 'DEAD'}"
            )
    sys.exit(0 if healthy else 1)


@testbed_group.command("down")
@_state_dir_option
@click.option("--timeout", type=float, default=60.0, show_default=True)
def down(state_dir: Path | None, timeout: float) -> None:
    """Stop the testbed and wait until all of its processes are gone."""
    state_dir = state_dir or default_state_dir()
    state = read_state(state_dir)
    if state is None:
        _progress("no testbed running")
        return
    pid = state.get("supervisor_pid")
    others = [p for p in (state.get("pids") or {}).values() if p]
    others += [
        pod["pid"] for isvc in state.get("isvcs") or [] for pod in isvc["pods"] if pod.get("pid")
    ]
    if isinstance(pid, int) and _is_supervisor(pid):
        _progress(f"stopping testbed supervisor (pid {pid})")
        if not _stop_pid(pid, timeout):
            raise click.ClickException(f"supervisor pid {pid} still alive after {timeout:.0f}s")
    deadline = time.monotonic() + timeout
    while any(_pid_alive(p) for p in others) and time.monotonic() < deadline:
        time.sleep(0.1)
    # A supervisor that died hard (SIGKILL) left its children behind: stop them ourselves.
    for orphan in [p for p in others if _pid_alive(p)]:
        _progress(f"stopping orphaned process {orphan}")
        _stop_pid(orphan, 15.0)
    if state.get("id"):
        remove_testbed_networks(str(state["id"]))
    left = [p for p in others if _pid_alive(p)]
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    if left:
        raise click.ClickException(f"processes still alive after {timeout:.0f}s: {left}")
    _progress("testbed stopped")
