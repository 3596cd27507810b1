"""The sandbox a kubelet gives a container, for processes the testbed runs as pods.

A Deployment whose container runs this project's re-sync loop is played by running ``pulumi-lora
resync`` here as a local process that sees what the container would see:

- **its own network namespace** (a :class:`~pulumi_lora.testing.testbed._netns.PodNetwork`): its
  own pod IP, the same container port as every other replica, and pod-to-pod routes;
- **the apiserver at ``127.0.0.1:<port>`` inside that namespace**: this module plays kube-proxy
  with a :class:`Relay` whose listening socket is created inside the pod's namespace (a short-lived
  thread joins it with ``setns(2)``; a socket keeps the namespace it was made in) and whose
  outgoing connections leave from the host namespace to the real apiserver, so the serving
  certificate's ``127.0.0.1`` SAN verifies as it does for every other client;
- **the ServiceAccount files** (``token``, ``ca.crt``, ``namespace``) at the standard
  ``/var/run/secrets/kubernetes.io/serviceaccount``, visible to that process only: ``ip netns
  exec`` runs ``unshare --mount --uts --propagation private``, which mounts a small tmpfs over
  the directory ``/var/run`` resolves to (it exists on every host; a container's own ``/run`` is
  not the host's either), writes the files, remounts it read-only (as the kubelet's projected
  volume is), sets the hostname to the pod name, and ``exec``s the container's argv. Nothing is
  created on the host's file system: the mounts vanish with the process's mount namespace;
- **the kubelet's environment**: the container's env over ``KUBERNETES_SERVICE_HOST/PORT`` and the
  service-link variables, a default ``PATH`` and ``HOSTNAME``, nothing inherited from the test
  runner (no ``KUBECONFIG``), so the loop finds its in-cluster account itself.

:func:`request_token` asks for the token as the kubelet does: a TokenRequest bound to the Pod
object (the token stops authenticating when that Pod is deleted). lightkube reads the token file
when it first sends a request and reads it again only after a 401 (``BearerTokenFileAuth``); the
tokens here live an hour by default and are not rotated while the process runs.

Needs root (``setns``, ``unshare``, ``mount``) and util-linux; :func:`in_cluster_unavailable_reason`
says what is missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import selectors
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pulumi_lora.testing.testbed._netns import PodNetwork
from pulumi_lora.testing.testbed._process import ManagedProcess
from pulumi_lora.testing.testbed._rest import KubeRest

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "InClusterError",
    "InClusterProcess",
    "Relay",
    "in_cluster_unavailable_reason",
    "listen_in_netns",
    "pod_environment",
    "pod_hostname",
    "request_token",
    "run_in_cluster_pod",
    "service_account_user",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a pod finds its ServiceAccount token, CA and namespace."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The ``PATH`` container runtimes give a container whose image sets none."""

MOUNT_SOURCE = "pulumi-lora-serviceaccount"
"""The prefix of the tmpfs's source name, as ``/proc/*/mountinfo`` shows it."""


def mount_source(owner: int | None = None) -> str:
    """The tmpfs source name of sandboxes started by process ``owner`` (default: this one).

    Named per owner so that a test can find its own leftovers among every process of the host
    without mistaking another test session's live sandboxes for them.
    """
    return f"{MOUNT_SOURCE}-{os.getpid() if owner is None else owner}"


RELAY_THREAD_PREFIX = "pulumi-lora-relay-"
"""Every relay thread's name starts with this."""

_NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_PROBE_TIMEOUT = 20.0
_SETNS_TIMEOUT = 10.0
_MIN_TOKEN_SECONDS = 600  # the apiserver's floor for a TokenRequest

# Runs as the pod's first process, after `ip netns exec` and `unshare`: mounts the tmpfs, writes
# the account's files, makes them read-only, names the host, forgets its own inputs and execs the
# container's argv (same pid throughout, so signals reach the container's process directly).
_SETUP_SCRIPT = """\
set -eu
mount -t tmpfs -o mode=0755,size=1m,nosuid,nodev,noexec "$PL_SOURCE" "$PL_RUN"
d="$PL_RUN/$PL_SUBDIR"
mkdir -p "$d"
printf '%s' "$PL_TOKEN" > "$d/token"
printf '%s' "$PL_CA" > "$d/ca.crt"
printf '%s' "$PL_NAMESPACE" > "$d/namespace"
chmod 0644 "$d/token" "$d/ca.crt" "$d/namespace"
mount -o remount,ro "$PL_RUN"
printf '%s' "$PL_HOSTNAME" > /proc/sys/kernel/hostname
cd /
unset d PL_SOURCE PL_RUN PL_SUBDIR PL_TOKEN PL_CA PL_NAMESPACE PL_HOSTNAME PWD OLDPWD
exec "$@"
"""

_lock = threading.Lock()
_availability: str | None = None
_probed = False


class InClusterError(RuntimeError):
    """The in-cluster sandbox cannot be set up here; the message names what failed."""


# --- what works here ----------------------------------------------------------------------------


def in_cluster_unavailable_reason() -> str | None:
    """Why pods cannot get the in-cluster sandbox here, or ``None`` if they can (cached).

    Tries the real thing once: a private mount namespace with a tmpfs over ``/var/run``'s target.
    """
    global _availability, _probed  # noqa: PLW0603 - a process-wide, computed-once probe result
    with _lock:
        if not _probed:
            _availability = _probe()
            _probed = True
        return _availability


def _probe() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the in-cluster sandbox needs root (setns, unshare and mount need CAP_SYS_ADMIN)"
    for tool in ("ip", "unshare", "mount", "sh"):
        if shutil.which(tool) is None:
            return f"the `{tool}` command is not installed (iproute2, util-linux, a POSIX shell)"
    try:
        ctypes.CDLL(None, use_errno=True).setns  # noqa: B018 - the lookup is the check
    except (OSError, AttributeError) as exc:
        return f"libc has no setns(2): {exc}"
    run = _run_dir()
    done = subprocess.run(
        [_which("unshare"), "--mount", "--uts", "--propagation", "private", "--",
         _which("mount"), "-t", "tmpfs", "-o", "size=64k", f"{MOUNT_SOURCE}-probe", str(run)],
        capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return (
            f"`unshare --mount --uts` + `mount -t tmpfs ... {run}` failed: "
            f"{done.stderr.strip() or done.returncode}"
        )
    return None


def _which(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise InClusterError(f"the `{tool}` command is not installed")
    return found


def _run_dir() -> Path:
    """The host directory the tmpfs covers: what ``/var/run`` resolves to (``/run`` here)."""
    return Path(SERVICE_ACCOUNT_DIR).parents[2].resolve()


# --- the token ----------------------------------------------------------------------------------


def service_account_user(namespace: str, service_account: str) -> str:
    """The user name a ServiceAccount's token authenticates as."""
    return f"system:serviceaccount:{namespace}:{service_account}"


def request_token(
    rest: KubeRest,
    namespace: str,
    service_account: str,
    pod_name: str,
    pod_uid: str,
    *,
    expiration_seconds: int = 3600,
    audiences: Sequence[str] = (),
) -> str:
    """A ServiceAccount token bound to a Pod, requested as the kubelet does (TokenRequest).

    ``audiences`` empty means the apiserver's own. The Pod must exist with that UID and run as
    ``service_account``; the token stops authenticating once the Pod is gone.
    """
    if expiration_seconds < _MIN_TOKEN_SECONDS:
        raise ValueError(f"expiration_seconds must be at least {_MIN_TOKEN_SECONDS}")
    spec: dict[str, Any] = {
        "expirationSeconds": expiration_seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid},
    }
    if audiences:
        spec["audiences"] = list(audiences)
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
    answer = rest.create(path, body)
    token = (answer or {}).get("status", {}).get("token")
    if not token:
        raise InClusterError(f"POST {path} answered without a token")
    return str(token)


# --- the environment ----------------------------------------------------------------------------


def pod_hostname(pod_name: str) -> str:
    """The hostname the kubelet gives a pod's containers: its name cut to 63 characters, without
    a trailing ``-`` or ``.`` (a longer one is refused by ``sethostname``)."""
    return pod_name[:63].rstrip("-.")


def pod_environment(
    env: Mapping[str, str], *, apiserver_port: int, hostname: str
) -> dict[str, str]:
    """The environment the kubelet gives the container: service variables, then its own env.

    ``KUBERNETES_SERVICE_*`` and the service-link variables of the ``kubernetes`` Service point at
    ``127.0.0.1:<apiserver_port>`` (the relay inside the pod's namespace). The container's env
    wins, as in the kubelet; ``KUBECONFIG`` is never passed (a pod finds its in-cluster account).
    """
    port = str(apiserver_port)
    url = f"tcp://127.0.0.1:{port}"
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    out = {
        "PATH": DEFAULT_PATH,
        "HOSTNAME": hostname,
        "HOME": "/root",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        "KUBERNETES_PORT": url,
        prefix: url,
        f"{prefix}_PROTO": "tcp",
        f"{prefix}_PORT": port,
        f"{prefix}_ADDR": "127.0.0.1",
    }
    out.update(env)
    out.pop("KUBECONFIG", None)
    return out


def _resolve_program(argv: Sequence[str]) -> list[str]:
    """``pulumi-lora`` is this venv's console script; anything else as given (``PATH`` finds it)."""
    if not argv:
        raise ValueError("argv is empty")
    program = argv[0]
    if program == "pulumi-lora":
        program = str(Path(sys.executable).parent / "pulumi-lora")
    return [program, *argv[1:]]


# --- kube-proxy: the relay ----------------------------------------------------------------------


def listen_in_netns(netns: str, host: str, port: int, *, backlog: int = 64) -> socket.socket:
    """A TCP socket listening on ``host:port`` inside network namespace ``netns``.

    A short-lived thread joins the namespace (``setns(2)`` on ``/run/netns/<netns>``; a thread's
    network namespace is its own), creates, binds and listens, and ends; the socket stays in
    that namespace. Raises :class:`InClusterError` naming the step that failed.
    """
    path = _NETNS_DIR / netns
    result: dict[str, Any] = {}

    def join_and_listen() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"setns({path}, CLONE_NEWNET): {os.strerror(code)}")
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(backlog)
            except BaseException:
                sock.close()
                raise
            result["socket"] = sock
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=join_and_listen, name=f"pulumi-lora-setns-{netns}")
    thread.start()
    thread.join(_SETNS_TIMEOUT)
    if thread.is_alive():  # pragma: no cover - setns and bind do not block
        raise InClusterError(f"listening on {host}:{port} in netns {netns} did not finish")
    if "error" in result:
        error = result["error"]
        raise InClusterError(f"cannot listen on {host}:{port} in netns {netns}: {error}") from error
    sock: socket.socket = result["socket"]
    return sock


class _Pipe:
    """One relayed connection: the pod's socket, the apiserver's, a bounded buffer each way."""

    __slots__ = ("buffers", "closed", "eof", "socks")

    def __init__(self, pod_side: socket.socket, host_side: socket.socket) -> None:
        self.socks = (pod_side, host_side)
        self.buffers = (bytearray(), bytearray())  # [i]: read from socks[i], to write to the other
        self.eof = [False, False]  # socks[i] sent EOF
        self.closed = False


class Relay:
    """A bounded TCP relay (one selector thread, no busy loop): kube-proxy for one pod.

    Accepts on ``listener`` (made by :func:`listen_in_netns`, so inside the pod's namespace) and
    connects each client to ``target`` from this process's own (host) namespace, copying both
    ways with half-closes honoured. At most ``max_connections`` at once (more are closed at
    accept); at most ``buffer_size`` bytes buffered per direction. Closes itself when the process
    ``pid`` exits (a pidfd in the selector), and on :meth:`close`.
    """

    def __init__(
        self,
        listener: socket.socket,
        target: tuple[str, int],
        *,
        name: str,
        pid: int | None = None,
        max_connections: int = 64,
        buffer_size: int = 65536,
        connect_timeout: float = 5.0,
    ) -> None:
        self.target = target
        self.name = name
        self._listener = listener
        self._max = max_connections
        self._chunk = buffer_size
        self._connect_timeout = connect_timeout
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._pipes: set[_Pipe] = set()
        self._pidfd: int | None = None
        self._released = False
        self._release_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, name=f"{RELAY_THREAD_PREFIX}{name}", daemon=True
        )
        self.accepted = 0
        self.refused = 0
        listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        if pid is not None:
            try:
                self._pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._stopping.set()  # already gone: serve nothing
            else:
                self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")

    @property
    def address(self) -> tuple[str, int]:
        """Where the relay listens (inside its namespace)."""
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Connections relayed right now."""
        return len(self._pipes)

    def start(self) -> Relay:
        """Start the relay's thread; returns self."""
        self._thread.start()
        return self

    def alive(self) -> bool:
        """True while the relay's thread runs."""
        return self._thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, drop every connection, join the thread. Idempotent."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._release()

    def _release(self) -> None:
        with self._release_lock:
            if self._released:
                return
            self._released = True
        for pipe in list(self._pipes):
            self._drop(pipe)
        for resource in (self._listener, self._wake_r, self._wake_w):
            resource.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        with contextlib.suppress(RuntimeError, OSError):
            self._selector.close()

    def _serve(self) -> None:
        try:
            while not self._stopping.is_set():
                for key, mask in self._selector.select():
                    tag = key.data
                    if tag == "accept":
                        self._accept()
                    elif tag in ("wake", "exit"):
                        self._stopping.set()
                    else:
                        pipe, side = tag
                        self._pump(pipe, side, mask)
        except Exception:  # pragma: no cover - a bug here must not pass silently
            _log.exception("relay %s failed", self.name)
        finally:
            self._release()
            _log.debug("relay %s closed (%d relayed)", self.name, self.accepted)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self._pipes) >= self._max:
            self.refused += 1
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=self._connect_timeout)
        except OSError as exc:
            _log.debug("relay %s: %s:%d unreachable: %s", self.name, *self.target, exc)
            self.refused += 1
            client.close()
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe = _Pipe(client, upstream)
        self._pipes.add(pipe)
        self.accepted += 1
        self._watch(pipe)

    def _pump(self, pipe: _Pipe, side: int, mask: int) -> None:
        sock, other = pipe.socks[side], 1 - side
        try:
            if mask & selectors.EVENT_READ and not pipe.closed:
                data = sock.recv(self._chunk - len(pipe.buffers[side]))
                if data:
                    pipe.buffers[side].extend(data)
                else:
                    pipe.eof[side] = True
            if mask & selectors.EVENT_WRITE and not pipe.closed:
                pending = pipe.buffers[other]
                sent = sock.send(pending)
                del pending[:sent]
            for i in (0, 1):  # an EOF read on one side, once flushed, is a FIN on the other
                if pipe.eof[i] and not pipe.buffers[i]:
                    with contextlib.suppress(OSError):
                        pipe.socks[1 - i].shutdown(socket.SHUT_WR)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
                _log.debug("relay %s: %s", self.name, exc)
            self._drop(pipe)
            return
        if all(pipe.eof) and not any(pipe.buffers):
            self._drop(pipe)
            return
        self._watch(pipe)

    def _watch(self, pipe: _Pipe) -> None:
        """(Re-)register what each socket waits for: room to read into, data to write."""
        for i in (0, 1):
            events = 0
            if not pipe.eof[i] and len(pipe.buffers[i]) < self._chunk:
                events |= selectors.EVENT_READ
            if pipe.buffers[1 - i]:
                events |= selectors.EVENT_WRITE
            sock = pipe.socks[i]
            registered = sock in self._selector.get_map()
            if events and registered:
                self._selector.modify(sock, events, (pipe, i))
            elif events:
                self._selector.register(sock, events, (pipe, i))
            elif registered:
                self._selector.unregister(sock)

    def _drop(self, pipe: _Pipe) -> None:
        pipe.closed = True
        for sock in pipe.socks:
            with contextlib.suppress(KeyError, ValueError, RuntimeError):
                self._selector.unregister(sock)
            sock.close()
        self._pipes.discard(pipe)


# --- the pod's process --------------------------------------------------------------------------


class PodRoutes(Protocol):
    """Routes from a pod's network namespace to other pods (``_podnet.LoopbackRoutes``)."""

    def join(self, netns: str, pid: int) -> object:
        """Route into ``netns`` while ``pid`` lives; returns a handle for :meth:`leave`."""
        ...

    def leave(self, handle: object) -> None:
        """Close the routes :meth:`join` opened."""
        ...


class InClusterProcess(ManagedProcess):
    """A pod's process in its sandbox, with its relay; stopping it stops the relay too.

    Started again after it stopped (a container restart), it gets a new relay and a fresh
    tmpfs: the token, CA and namespace given at creation are written again.
    """

    def __init__(
        self,
        what: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str],
        secrets: Sequence[str],
        network: PodNetwork,
        apiserver_port: int,
        routes: PodRoutes | None = None,
    ) -> None:
        super().__init__(what, argv, log_path, secrets=secrets)
        self._env = dict(env)  # exactly the pod's environment: nothing of the test runner's
        self.network = network
        self.apiserver_port = apiserver_port
        self.relay: Relay | None = None
        self._routes = routes
        self._route: object | None = None

    def start(self) -> None:
        """Listen for the apiserver inside the pod's namespace, start the process, relay."""
        with self._lock:
            if self.alive():
                raise RuntimeError(f"{self.what} is already running")
            self._close_relay()
            listener = listen_in_netns(self.network.namespace, "127.0.0.1", self.apiserver_port)
            try:
                super().start()
            except BaseException:
                listener.close()
                raise
            target = ("127.0.0.1", self.apiserver_port)
            self.relay = Relay(listener, target, name=self.what, pid=self.pid).start()
            if self._routes is not None and self.pid is not None:
                self._route = self._routes.join(self.network.namespace, self.pid)

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop the process (SIGTERM, then SIGKILL) and its relay."""
        with self._lock:
            try:
                return super().stop(timeout)
            finally:
                self._close_relay()

    def kill(self) -> int | None:
        """SIGKILL the process at once; its relay closes with it."""
        with self._lock:
            try:
                return super().kill()
            finally:
                self._close_relay()

    def _close_relay(self) -> None:
        relay, self.relay = self.relay, None
        if relay is not None:
            relay.close()
        route, self._route = self._route, None
        if route is not None and self._routes is not None:
            self._routes.leave(route)


def run_in_cluster_pod(
    *,
    argv: Sequence[str],
    env: Mapping[str, str],
    namespace: str,
    service_account_token: str,
    ca_pem: bytes,
    apiserver_port: int,
    network: PodNetwork,
    log_path: Path,
    name: str,
    routes: PodRoutes | None = None,
) -> InClusterProcess:
    """Start (not wait for) ``argv`` as the container of pod ``name`` would run.

    ``env`` is the container's resolved env (downward API values included); ``namespace`` is the
    pod's (the ServiceAccount ``namespace`` file). See the module docstring for what the process
    sees. Raises :class:`InClusterError` when the sandbox cannot be made here, and
    :class:`~pulumi_lora.testing.testbed.ProcessStartError` when the process cannot start.
    """
    reason = in_cluster_unavailable_reason()
    if reason is not None:
        raise InClusterError(f"cannot run pod {name} in its sandbox: {reason}")
    if not (_NETNS_DIR / network.namespace).exists():
        raise InClusterError(f"network namespace {network.namespace} does not exist")
    program = _resolve_program(argv)
    pod_env = pod_environment(env, apiserver_port=apiserver_port, hostname=pod_hostname(name))
    run = _run_dir()
    setup = {
        "PL_SOURCE": mount_source(),
        "PL_RUN": str(run),
        "PL_SUBDIR": str(
            Path(SERVICE_ACCOUNT_DIR).relative_to(Path(SERVICE_ACCOUNT_DIR).parents[2])
        ),
        "PL_TOKEN": service_account_token,
        "PL_CA": ca_pem.decode("ascii"),
        "PL_NAMESPACE": namespace,
        "PL_HOSTNAME": pod_hostname(name),
    }
    clash = sorted(set(setup) & set(pod_env))
    if clash:
        raise ValueError(f"the container's env uses names the sandbox needs: {clash}")
    sandbox = [
        *network.exec_prefix(),
        _which("unshare"), "--mount", "--uts", "--propagation", "private", "--",
        _which("sh"), "-c", _SETUP_SCRIPT, name,
    ]  # fmt: skip
    process = InClusterProcess(
        f"pod {name}",
        [*sandbox, *program],
        log_path,
        env={**pod_env, **setup},
        secrets=[service_account_token],
        network=network,
        apiserver_port=apiserver_port,
        routes=routes,
    )
    process.start()
    return process
