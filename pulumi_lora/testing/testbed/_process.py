"""Child processes of a testbed: started with their output in a log file, stopped for sure.

Every child runs in its own session (process group), so a Ctrl-C in the terminal reaches the test
runner first and the testbed stops its children in order, and so that stopping a child also stops
anything it forked. Command lines are kept with secrets redacted, for error messages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "ManagedProcess",
    "ProcessStartError",
    "alive",
    "free_loopback_address",
    "free_port",
    "tail",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

TAIL_LINES = 40
"""How many trailing log lines a start failure quotes."""

_DROPPED_ENV = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 20000  # ports below are where other local services usually listen


class ProcessStartError(RuntimeError):
    """A testbed component did not start or did not become ready.

    The message holds the exact command line (secrets redacted) and the last lines of its log.
    """

    def __init__(self, what: str, reason: str, command: str, log_tail: str) -> None:
        self.what = what
        self.command = command
        self.log_tail = log_tail
        super().__init__(
            f"{what} failed to start: {reason}\n"
            f"command: {command}\n"
            f"last {TAIL_LINES} lines of its log:\n{log_tail}"
        )


_HANDED_OUT: dict[int, float] = {}
"""Ports `free_port` handed out, and when (``time.monotonic``): not handed out again for
`_HOLD_SECONDS`, bound or not."""
_HANDED_OUT_LOCK = threading.Lock()
_HOLD_SECONDS = 300.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses right now, below the ephemeral range, and that
    this process has not handed out in the last `_HOLD_SECONDS`.

    Client connections take their local ports from the kernel's ephemeral range, so a port
    picked there can be taken by any outgoing connection between this check and the server's
    bind ("Address already in use": a pod that never starts). Below the range only servers bind.
    A port is free until its server binds it, so two calls before the first bind (etcd's client
    and peer ports) could be given the same one: each is held for this process once handed out.
    Falls back to a port the kernel picks where the range leaves no room below it.
    """
    low = _ephemeral_range_start()
    with _HANDED_OUT_LOCK:
        now = time.monotonic()
        for port, at in list(_HANDED_OUT.items()):
            if now - at > _HOLD_SECONDS:
                del _HANDED_OUT[port]
        picked = _pick_port(low)
        _HANDED_OUT[picked] = now
        return picked


def _pick_port(low: int) -> int:
    if low - _LOWEST_PORT >= 1000:
        for _ in range(100):
            port = _LOWEST_PORT + secrets.randbelow(low - _LOWEST_PORT)
            if port not in _HANDED_OUT and _bindable(port):
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            picked: int = sock.getsockname()[1]
        if picked not in _HANDED_OUT:
            return picked


def free_loopback_address(port: int) -> str:
    """An address of 127.0.0.0/8 (not 127.0.0.1) where ``port`` can be bound right now.

    Every loopback pod gets its own, as every pod of a cluster has its own IP: the pods of one
    template then all listen on the port their spec declares (the ReplicaSet controller's pods
    are copies of one template, so no port can be rewritten per pod), and two testbeds on one
    machine do not collide (16 million addresses, each checked before use).
    """
    for _ in range(100):
        octets = (1 + secrets.randbelow(254), secrets.randbelow(256), 1 + secrets.randbelow(254))
        address = "127.{}.{}.{}".format(*octets)
        if _bindable(port, address):
            return address
    raise OSError(f"no loopback address with port {port} free after 100 tries")


def _ephemeral_range_start() -> int:
    """The first port of the kernel's ephemeral range (Linux default 32768)."""
    try:
        return int(_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int, address: str = "127.0.0.1") -> bool:
    """Whether a listening socket could bind ``address:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
        return True


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (read from ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def live_descendants() -> set[int]:
    """Process ids of this process's live (non-zombie) descendants, read from ``/proc``.

    What tests use to prove that nothing a testbed (or a test) started outlives it.
    """
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ("" if it does not exist)."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: ours, without proxy variables (every target is local)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _DROPPED_ENV}
    env.update(extra or {})
    return env


class ManagedProcess:
    """One child process with its log file, and a stop that always leaves it dead."""

    def __init__(
        self,
        what: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        secrets: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.what = what
        self.argv = list(argv)
        self.log_path = log_path
        self._secrets = [s for s in secrets if s]
        self._env = child_env(env)
        self._cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()  # re-entrant: the SIGTERM teardown may interrupt us

    @property
    def command(self) -> str:
        """The command line as a shell would show it, secrets replaced by ``<redacted>``."""
        text = subprocess.list2cmdline(self.argv)
        for secret in self._secrets:
            text = text.replace(secret, "<redacted>")
        return text

    @property
    def pid(self) -> int | None:
        """The process id while started (even if it has exited since), else ``None``."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        """Start the process, appending its stdout and stderr to the log file."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                raise RuntimeError(f"{self.what} is already running")
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("ab") as log:
                log.write(f"--- starting: {self.command}\n".encode())
                log.flush()
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._env,
                    cwd=self._cwd,
                    start_new_session=True,
                    close_fds=True,
                )
            _log.debug("started %s pid=%d", self.what, self._proc.pid)

    def alive(self) -> bool:
        """True while the process runs."""
        proc = self._proc
        return proc is not None and proc.poll() is None

    def returncode(self) -> int | None:
        """The exit status once it exited, else ``None``."""
        proc = self._proc
        return None if proc is None else proc.poll()

    def failure(self, reason: str) -> ProcessStartError:
        """A :class:`ProcessStartError` for this process, quoting its log's tail."""
        return ProcessStartError(self.what, reason, self.command, tail(self.log_path))

    def terminate(self) -> None:
        """SIGTERM the process group without waiting (:meth:`stop` waits): stops many at once."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                self._signal_group(proc, signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, wait up to ``timeout``, then SIGKILL; returns the status."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return None
            if proc.poll() is None:
                self._signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    # What it was doing, for the record: the emulator dumps its threads' stacks
                    # to its log on SIGUSR1 (any other process just ends, as SIGKILL would).
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGUSR1)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(0.5)
                    _log.warning(
                        "%s pid=%d ignored SIGTERM; killing it. Its log ends:\n%s",
                        self.what,
                        proc.pid,
                        tail(self.log_path, 40),
                    )
                    self._signal_group(proc, signal.SIGKILL)
                    proc.wait()
            # Anything the child forked into its group goes too.
            self._signal_group(proc, signal.SIGKILL)
            _log.debug("stopped %s pid=%d status=%s", self.what, proc.pid, proc.returncode)
            return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL at once (a crash), and reap it."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return None
            self._signal_group(proc, signal.SIGKILL)
            return proc.wait()

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
