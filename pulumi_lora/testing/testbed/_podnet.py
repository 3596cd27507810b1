"""Pod-to-pod routes to loopback pods, for pods in network namespaces.

A testbed's loopback pods (the default: no root needed) each listen on a loopback address of
their own (``127.x.y.z``, the port their spec declares) on the host, and publish it as their IP.
A pod in a network namespace of its own (the re-sync loop's) has a loopback of its own, where
nothing of theirs listens. This module plays the route a CNI plugin would give it: for every
loopback pod's ``IP:P``, a listener on ``IP:P`` inside the joining pod's namespace, relayed to
the host's ``IP:P`` (the same :class:`~pulumi_lora.testing.testbed._relay.Relay` that plays
kube-proxy for the apiserver). Addresses come and go with the loopback pods; a pod that joins
later gets every one known then. One the joining pod already uses itself is left to it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from pulumi_lora.testing.testbed._netns import NetnsError
from pulumi_lora.testing.testbed._relay import Relay, listen_in_netns

__all__ = ["LoopbackRoutes"]

_log = logging.getLogger("pulumi_lora.testing.testbed")


@dataclass
class _Member:
    """One pod in a network namespace and its relays, by port."""

    netns: str
    pid: int
    relays: dict[tuple[str, int], Relay] = field(default_factory=dict)


class LoopbackRoutes:
    """Routes from every joined network-namespace pod to every loopback pod's port."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ports: set[tuple[str, int]] = set()
        self._members: list[_Member] = []

    @property
    def ports(self) -> set[tuple[str, int]]:
        """The loopback pods' ``(address, port)`` routed now."""
        with self._lock:
            return set(self._ports)

    def add_port(self, port: int, host: str = "127.0.0.1") -> None:
        """A loopback pod listens on ``host:port``: route it for every joined pod."""
        endpoint = (host, port)
        with self._lock:
            if endpoint in self._ports:
                return
            self._ports.add(endpoint)
            for member in self._members:
                self._open(member, endpoint)

    def remove_port(self, port: int, host: str = "127.0.0.1") -> None:
        """The loopback pod of ``host:port`` is gone: its route goes (connections are refused)."""
        endpoint = (host, port)
        with self._lock:
            self._ports.discard(endpoint)
            for member in self._members:
                relay = member.relays.pop(endpoint, None)
                if relay is not None:
                    relay.close()

    def join(self, netns: str, pid: int) -> object:
        """Route every known port into ``netns`` while process ``pid`` lives; returns a handle
        for :meth:`leave`."""
        member = _Member(netns, pid)
        with self._lock:
            self._members.append(member)
            for endpoint in sorted(self._ports):
                self._open(member, endpoint)
        return member

    def leave(self, handle: object) -> None:
        """Close the routes of a pod that stopped."""
        with self._lock:
            if handle in self._members:
                self._members.remove(handle)
        if isinstance(handle, _Member):
            for relay in handle.relays.values():
                relay.close()
            handle.relays.clear()

    def close(self) -> None:
        """Close every route (the testbed stops)."""
        with self._lock:
            members, self._members = self._members, []
            self._ports.clear()
        for member in members:
            self.leave(member)

    def _open(self, member: _Member, endpoint: tuple[str, int]) -> None:
        host, port = endpoint
        try:
            listener = listen_in_netns(member.netns, host, port)
        except NetnsError as exc:  # the pod listens there itself, or is gone
            _log.info("no route to loopback %s:%d in %s: %s", host, port, member.netns, exc)
            return
        name = f"{member.netns}-lo{host}:{port}"
        member.relays[endpoint] = Relay(listener, endpoint, name=name, pid=member.pid).start()
