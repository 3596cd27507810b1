"""Per-pod network namespaces on the project's own test hosts.

A real cluster gives every pod its own IP with the same container port; the apiserver's pod proxy
refuses loopback pod IPs. So a "netns" pod gets a network namespace of its own (``ip netns add``),
a veth pair with one end moved into it (renamed ``eth0``), and a /30 from 198.18.0.0/15, the
range reserved for network test benches (RFC 2544): the host end takes the first address, the
namespace end the second, which is the pod IP. Nothing outside these addresses is ever touched,
and everything is removed again on teardown.

Pod-to-pod traffic, as in a cluster: each namespace routes the whole bench network via its host
end, and the host forwards between the testbed's own veth ends only (IPv4 forwarding switched on
per link, ``net.ipv4.conf.<host link>.forwarding``, never the global ``ip_forward``).

Needs root (CAP_NET_ADMIN) and iproute2; :func:`netns_available` says whether that works here.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = [
    "BENCH_NETWORK",
    "NETNS_PREFIX",
    "NetnsError",
    "NetworkClaim",
    "PodNetwork",
    "allocate_pod_network",
    "existing_namespaces",
    "netns_available",
    "netns_unavailable_reason",
    "remove_testbed_networks",
    "sweep_stale_networks",
    "testbed_links",
]

_log = logging.getLogger("pulumi_lora.testing.testbed")

NETNS_PREFIX = "pulumi-lora-"
"""Every namespace the testbed creates is named ``pulumi-lora-<testbed id>-<n>``."""

BENCH_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
"""The only addresses the testbed assigns (reserved for network test benches)."""

_IP_TIMEOUT = 20.0
_SYSCTL_CONF = "/proc/sys/net/ipv4/conf"
_lock = threading.Lock()
_availability: tuple[bool, str] | None = None


class NetnsError(RuntimeError):
    """An ``ip`` command that sets up or tears down a pod network failed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ip") or "ip"
    done = subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=_IP_TIMEOUT, check=False
    )
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def netns_unavailable_reason() -> str | None:
    """Why per-pod network namespaces cannot be made here, or ``None`` if they can (cached).

    Tries the real thing once: creates and deletes a throw-away namespace.
    """
    global _availability  # noqa: PLW0603 - a process-wide, computed-once probe result
    with _lock:
        if _availability is None:
            _availability = _probe()
        ok, reason = _availability
    return None if ok else reason


def netns_available() -> bool:
    """True when pods can get their own network namespace (root with iproute2 on Linux)."""
    return netns_unavailable_reason() is None


def _probe() -> tuple[bool, str]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False, "network namespaces need root (CAP_NET_ADMIN); run as root to enable"
    if shutil.which("ip") is None:
        return False, "the `ip` command (iproute2) is not installed"
    name = f"{NETNS_PREFIX}probe-{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return False, f"cannot create a network namespace: {exc}"
    _ip("netns", "del", name, check=False)
    return True, ""


def existing_namespaces() -> list[str]:
    """Names of every network namespace on the host (``ip netns list``)."""
    done = _ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _addresses_in_use() -> set[ipaddress.IPv4Address]:
    done = _ip("-o", "-4", "addr", "show", check=False)
    used = set()
    for line in done.stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            used.add(ipaddress.IPv4Interface(parts[parts.index("inet") + 1]).ip)
    return used


@dataclass
class PodNetwork:
    """One pod's namespace, veth pair and addresses."""

    namespace: str
    """Network namespace name (``ip netns exec NAME ...``)."""
    host_link: str
    """The veth end that stays on the host."""
    host_ip: str
    """Address of the host end."""
    pod_ip: str
    """Address of the namespace end: the pod IP."""

    def exec_prefix(self) -> list[str]:
        """The argv prefix that runs a command inside the namespace."""
        return [shutil.which("ip") or "ip", "netns", "exec", self.namespace]

    def teardown(self) -> None:
        """Delete the namespace (its veth end goes with it) and the host end if it lingers.

        Stop the processes inside first: a namespace with live processes outlives ``ip netns
        del`` and keeps its veth pair.
        """
        _ip("netns", "del", self.namespace, check=False)
        if _ip("link", "show", self.host_link, check=False).returncode == 0:
            _ip("link", "del", self.host_link, check=False)
        _log.debug("removed netns %s", self.namespace)


def allocate_pod_network(testbed_id: str, index: int) -> PodNetwork:
    """Create a namespace with a veth pair and a fresh /30 from :data:`BENCH_NETWORK`.

    The /30 is picked at random among those whose addresses no interface holds, so testbeds that
    run side by side (a CLI testbed and a test session) do not collide.
    """
    namespace = f"{NETNS_PREFIX}{testbed_id}-{index}"
    host_link = f"vh{testbed_id}-{index}"
    peer_link = f"vp{testbed_id}-{index}"
    if len(host_link) > 15 or len(peer_link) > 15:
        raise NetnsError(f"link name {host_link!r} is longer than the kernel's 15 characters")
    with _lock:
        used = _addresses_in_use()
        blocks = BENCH_NETWORK.num_addresses // 4
        for _ in range(64):
            block = BENCH_NETWORK.network_address + 4 * random.randrange(blocks)  # noqa: S311
            host_ip, pod_ip = block + 1, block + 2
            if host_ip not in used and pod_ip not in used:
                break
        else:
            raise NetnsError("no free /30 found in 198.18.0.0/15")
        net = PodNetwork(namespace, host_link, str(host_ip), str(pod_ip))
        try:
            _ip("netns", "add", namespace)
            _ip("link", "add", host_link, "type", "veth", "peer", "name", peer_link)
            _ip("link", "set", peer_link, "netns", namespace)
            _ip("addr", "add", f"{host_ip}/30", "dev", host_link)
            _ip("link", "set", host_link, "up")
            _ip("-n", namespace, "link", "set", peer_link, "name", "eth0")
            _ip("-n", namespace, "addr", "add", f"{pod_ip}/30", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        except NetnsError:
            net.teardown()
            raise
        _route_pod_to_pod(net)
    _log.debug("netns %s: pod %s via host %s (%s)", namespace, pod_ip, host_ip, host_link)
    return net


def _route_pod_to_pod(net: PodNetwork) -> None:
    """Route :data:`BENCH_NETWORK` via the host end, which forwards (this link only).

    Best effort: where ``/proc/sys`` is read-only the pod still serves its own IP; only
    pod-to-pod traffic is lost, and a warning says so.
    """
    try:
        _ip(
            "-n",
            net.namespace,
            "route",
            "add",
            str(BENCH_NETWORK),
            "via",
            net.host_ip,
            "dev",
            "eth0",
        )
        with open(f"{_SYSCTL_CONF}/{net.host_link}/forwarding", "w", encoding="ascii") as knob:
            knob.write("1")
    except (NetnsError, OSError) as exc:
        _log.warning("netns %s: no pod-to-pod routing: %s", net.namespace, exc)


def testbed_links(testbed_id: str) -> list[str]:
    """Host links (veth ends) named for the testbed ``testbed_id``."""
    return [name for name in _links() if name.startswith((f"vh{testbed_id}-", f"vp{testbed_id}-"))]


def _links() -> list[str]:
    """Names of every link of the host's network namespace."""
    done = _ip("-o", "link", "show", check=False)
    parts = (line.split(":", 2) for line in done.stdout.splitlines())
    return [p[1].strip().split("@", 1)[0] for p in parts if len(p) > 1]


def remove_testbed_networks(testbed_id: str) -> list[str]:
    """Delete every namespace and link left by testbed ``testbed_id`` (after a hard crash),
    SIGKILLing the processes still inside a namespace first: with live processes a namespace
    outlives ``ip netns del``.

    Returns what was removed (``pid N`` for a killed process). Touches only names carrying this
    testbed's id.
    """
    removed = []
    for name in existing_namespaces():
        if name.startswith(f"{NETNS_PREFIX}{testbed_id}-"):
            for pid in _ip("netns", "pids", name, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
                removed.append(f"pid {pid}")
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for link in testbed_links(testbed_id):
        _ip("link", "del", link, check=False)
        removed.append(link)
    return removed


# --- leftovers of testbeds that died hard ---------------------------------------------------------


def _owners() -> Path:
    """Where the testbeds of this host record that they are alive (one lock file each)."""
    return Path(tempfile.gettempdir()) / "pulumi-lora-netns-owners"


"""One lock file per testbed id, held (``flock``) for as long as that testbed lives."""

_OWNED_NAME = re.compile(rf"^(?:{re.escape(NETNS_PREFIX)}|v[hp])([0-9a-f]{{6}})-\d+$")


class NetworkClaim:
    """A testbed's claim on the names carrying its id: an ``flock`` the kernel drops when the
    process dies, however it dies, so a later sweep can tell a live testbed's networks from
    leftovers."""

    def __init__(self, testbed_id: str) -> None:
        _owners().mkdir(mode=0o700, exist_ok=True)
        self.path = _owners() / f"{testbed_id}.lock"
        self._file: IO[bytes] | None = self.path.open("wb")
        fcntl.flock(self._file, fcntl.LOCK_EX)

    def release(self) -> None:
        """Drop the claim (at the testbed's stop, after its networks are gone)."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            file.close()


def _owner_alive(testbed_id: str) -> bool:
    path = _owners() / f"{testbed_id}.lock"
    try:
        file = path.open("rb")
    except FileNotFoundError:
        return False
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        with contextlib.suppress(OSError):
            path.unlink()
        return False


def sweep_stale_networks() -> list[str]:
    """Remove the namespaces and links of testbeds that died without stopping, and kill the
    processes still running inside those namespaces.

    A testbed killed with SIGKILL cannot stop its in-cluster pods: their processes run under
    ``ip netns exec`` and outlive it (reparented to init), holding their namespace. Only names of
    the form ``pulumi-lora-<id>-<n>`` / ``vh<id>-<n>`` whose testbed holds no claim are touched.
    Returns what was removed.
    """
    names = existing_namespaces() + _links()
    ids = {m.group(1) for m in map(_OWNED_NAME.match, names) if m is not None}
    removed: list[str] = []
    for testbed_id in sorted(ids):
        if not _owner_alive(testbed_id):
            gone = remove_testbed_networks(testbed_id)
            _log.warning("removed leftovers of testbed %s: %s", testbed_id, ", ".join(gone))
            removed += gone
    return removed
