"""A list-then-watch cache of one resource collection, as client-go's informers keep one.

The testbed's controllers read the cluster from these caches instead of listing it on every
pass: one LIST per collection at start (and after a broken watch or an apiserver restart), then
one long-lived watch each. What the controllers write themselves is put into the cache at once
(:meth:`Informer.note`), so a pass never acts twice on an object whose watch event is still on
its way (client-go's controllers keep "expectations" for the same reason).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx2

from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest

__all__ = ["Informer", "object_key"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

WATCH_SECONDS = 240
"""``timeoutSeconds`` of one watch request: the apiserver ends it, the informer re-watches."""

_RETRY = 0.5


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    """``(namespace, name)`` of an object (namespace ``""`` for cluster-scoped ones)."""
    meta = obj.get("metadata", {})
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _rv(obj: dict[str, Any]) -> int:
    """The resourceVersion as a number (etcd's revision; opaque to clients, ordered here)."""
    raw = str(obj.get("metadata", {}).get("resourceVersion", "0"))
    return int(raw) if raw.isdigit() else 0


class Informer:
    """One collection (e.g. ``/api/v1/pods``) mirrored in memory and kept current by a watch."""

    def __init__(self, rest: KubeRest, path: str, on_change: Callable[[], None]) -> None:
        self.rest = rest
        self.path = path
        self._on_change = on_change
        self._lock = threading.Lock()
        self._store: dict[tuple[str, str], dict[str, Any]] = {}
        self._gone: set[str] = set()  # UIDs deleted by us: late events for them are stale
        self.synced = threading.Event()
        self.requests = 0  # LISTs and watches sent (the cost figure)
        self._stop = threading.Event()
        self._response: httpx2.Response | None = None
        self._thread: threading.Thread | None = None

    # --- reads -----------------------------------------------------------------------------

    def items(self) -> list[dict[str, Any]]:
        """A snapshot of every cached object."""
        with self._lock:
            return list(self._store.values())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object, or ``None``."""
        with self._lock:
            return self._store.get((namespace, name))

    def uids(self) -> set[str]:
        """UIDs of every cached object (what the garbage collector checks owners against)."""
        with self._lock:
            return {str(o["metadata"].get("uid", "")) for o in self._store.values()}

    # --- write-through ---------------------------------------------------------------------

    def note(self, obj: dict[str, Any] | None) -> None:
        """Put an object this process just wrote into the cache (unless the cache is newer)."""
        if not obj or obj.get("kind") == "Status" or not obj.get("metadata", {}).get("uid"):
            return  # a DELETE may answer with a Status rather than the object
        key = object_key(obj)
        with self._lock:
            if str(obj["metadata"].get("uid", "")) in self._gone:
                return
            held = self._store.get(key)
            if held is None or _rv(held) <= _rv(obj):
                self._store[key] = obj

    def note_deleted(self, obj: dict[str, Any]) -> None:
        """Drop an object this process just deleted; ignore late events about it."""
        with self._lock:
            uid = str(obj.get("metadata", {}).get("uid", ""))
            held = self._store.get(object_key(obj))
            if held is not None and str(held["metadata"].get("uid", "")) == uid:
                del self._store[object_key(obj)]
            if uid:
                self._gone.add(uid)

    # --- the reflector ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the list-and-watch thread."""
        name = f"informer{self.path.replace('/', '-')}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (closes the open watch so the thread ends at once)."""
        self._stop.set()
        response = self._response
        if response is not None:
            # A read blocked in another thread wakes only when the socket is shut down; closing
            # the response alone would leave the watch open and the apiserver's stop waiting.
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                while not self._stop.is_set():
                    version = self._watch(version)
            except (httpx2.HTTPError, ApiRequestError, ValueError, _WatchExpiredError) as exc:
                if self._stop.is_set():
                    return
                _log.debug("informer %s: relisting after %s", self.path, exc)
                self._stop.wait(_RETRY)
            except Exception:  # the cache must outlive any one bad answer
                _log.exception("informer %s failed; relisting", self.path)
                self._stop.wait(_RETRY)

    def _list(self) -> str:
        self.requests += 1
        listing = self.rest.get(self.path)
        # List items carry no apiVersion/kind (watch events do): stamp them from the list's own,
        # so a cached object looks the same whichever way it arrived (owner references need both).
        api_version = listing.get("apiVersion", "")
        kind = str(listing.get("kind", "")).removesuffix("List")
        fresh = {
            object_key(item): {"apiVersion": api_version, "kind": kind, **item}
            for item in listing.get("items", [])
        }
        with self._lock:
            self._store = fresh
        self.synced.set()
        self._on_change()
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    def _watch(self, version: str) -> str:
        """One watch request from ``version``; returns the version to resume from."""
        params = {
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        self.requests += 1
        timeout = httpx2.Timeout(WATCH_SECONDS + 30.0, connect=5.0)
        with self.rest.stream("GET", self.path, params=params, timeout=timeout) as response:
            self._response = response
            try:
                if response.status_code >= 300:
                    raise _WatchExpiredError(f"watch answered {response.status_code}")
                for line in response.iter_lines():
                    if self._stop.is_set():
                        break
                    if line:
                        version = self._apply(json.loads(line), version)
            finally:
                self._response = None
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object", {})
        if kind == "ERROR":
            raise _WatchExpiredError(str(obj.get("message", "watch error")))
        version = str(obj.get("metadata", {}).get("resourceVersion", version))
        if kind == "BOOKMARK":
            return version
        key = object_key(obj)
        uid = str(obj.get("metadata", {}).get("uid", ""))
        with self._lock:
            if kind == "DELETED":
                held = self._store.get(key)
                if held is not None and str(held["metadata"].get("uid", "")) == uid:
                    del self._store[key]
                self._gone.discard(uid)
            elif uid not in self._gone:
                held = self._store.get(key)
                if held is None or _rv(held) <= _rv(obj):
                    self._store[key] = obj
        self._on_change()
        return version


class _WatchExpiredError(RuntimeError):
    """The watch cannot go on from its resourceVersion (410 Gone, or an error event)."""
