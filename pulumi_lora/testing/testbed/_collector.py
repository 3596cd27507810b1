"""The garbage collector's finalizers, for every kind: foreground deletion and orphaning.

A client deleting with ``propagationPolicy: Foreground`` (pulumi-kubernetes' default) or
``Orphan`` gets its object back with a deletion timestamp and a ``foregroundDeletion`` or
``orphan`` finalizer; kube-controller-manager's garbage collector then deletes (or orphans) the
object's dependents and removes the finalizer, and only then does the object go. The testbed runs
no controller-manager, so without this such a delete never finishes (``pulumi destroy`` waits
forever). Like the real collector this watches every kind the apiserver can list, watch, patch
and delete (found by discovery at start), so it serves any object anyone creates:

* ``foregroundDeletion``: each dependent (an object whose ``ownerReferences`` name the owner's
  UID) is deleted in the foreground itself; the finalizer goes once no dependent with
  ``blockOwnerDeletion`` remains;
* ``orphan``: the owner's reference is removed from each dependent, then the finalizer.

Dependents whose controller owner is already gone (background cascading) are the controllers'
own garbage collection (``_controllers.py``) for the kinds they run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from typing import Any

import httpx

from pulumi_lora.testing.testbed._informer import Informer
from pulumi_lora.testing.testbed._rest import ApiRequestError, KubeRest

__all__ = ["FinalizerCollector", "collectable_paths", "pending_work"]

_log = logging.getLogger("pulumi_lora.testing.testbed")

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
_NEEDED_VERBS = {"list", "watch", "patch", "delete"}
_SKIPPED = {"events", "leases"}  # never owners of anything here; busy (Lease renewals)
_INTERVAL = 1.0
_API_ERRORS = (httpx.HTTPError, ApiRequestError)


def collectable_paths(group_versions: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    """Pure: the cluster-wide collection path of every resource the collector must watch.

    ``group_versions`` pairs an API prefix (``/api/v1``, ``/apis/apps/v1``) with its discovery
    document (an ``APIResourceList``).
    """
    paths = []
    for prefix, listing in group_versions:
        for resource in listing.get("resources", []):
            name = str(resource.get("name", ""))
            if "/" in name or name in _SKIPPED:
                continue
            if set(resource.get("verbs", [])) >= _NEEDED_VERBS:
                paths.append(f"{prefix}/{name}")
    return paths


def _owners_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj.get("metadata", {}).get("ownerReferences") or [])


def pending_work(
    owner: dict[str, Any], objects: Iterable[dict[str, Any]]
) -> tuple[str | None, list[dict[str, Any]], bool]:
    """Pure: for an object being deleted, which finalizer to serve, the dependents to act on
    (delete for foreground, un-own for orphan), and whether the finalizer can go now."""
    meta = owner.get("metadata", {})
    finalizers = meta.get("finalizers") or []
    if not meta.get("deletionTimestamp"):
        return None, [], False
    kind = FOREGROUND if FOREGROUND in finalizers else ORPHAN if ORPHAN in finalizers else None
    if kind is None:
        return None, [], False
    uid = meta.get("uid")
    dependents = [o for o in objects if any(r.get("uid") == uid for r in _owners_of(o))]
    if kind == ORPHAN:
        return kind, dependents, True
    waiting = [
        o
        for o in dependents
        if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in _owners_of(o))
    ]
    to_delete = [o for o in dependents if not o.get("metadata", {}).get("deletionTimestamp")]
    return kind, to_delete, not waiting


def _object_path(collection: str, obj: dict[str, Any]) -> str:
    """``/apis/apps/v1/deployments`` + a namespaced object → its own path."""
    meta = obj["metadata"]
    prefix, plural = collection.rsplit("/", 1)
    namespace = meta.get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{where}/{plural}/{meta['name']}"


class FinalizerCollector:
    """Serves the ``foregroundDeletion`` and ``orphan`` finalizers of every listable kind."""

    def __init__(self, rest: KubeRest) -> None:
        self.rest = rest
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.informers: list[Informer] = []
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Discover the kinds, start a watch on each, and the collector's loop."""
        self.informers = [Informer(self.rest, p, self._wake.set) for p in self._discover()]
        for informer in self.informers:
            informer.start()
        self._thread = threading.Thread(target=self._run, name="testbed-gc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop and every watch."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        for informer in self.informers:
            informer.stop()

    def _discover(self) -> list[str]:
        documents: list[tuple[str, dict[str, Any]]] = [("/api/v1", self.rest.get("/api/v1"))]
        for group in self.rest.get("/apis").get("groups", []):
            version = group.get("preferredVersion", {}).get("groupVersion")
            if version:
                prefix = f"/apis/{version}"
                with contextlib.suppress(*_API_ERRORS):  # an aggregated API may be down
                    documents.append((prefix, self.rest.get(prefix)))
        return collectable_paths(documents)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(_INTERVAL)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_pass()
            except Exception:  # the collector must outlive one bad pass
                _log.exception("finalizer collector pass failed")

    def run_pass(self) -> None:
        """Serve every object waiting on one of the two finalizers."""
        everything = [(i, o) for i in self.informers for o in i.items()]
        objects = [o for _, o in everything]
        for informer, obj in everything:
            kind, dependents, done = pending_work(obj, objects)
            if kind is None:
                continue
            try:
                self._serve(informer, obj, kind, dependents, done=done, everything=everything)
            except _API_ERRORS as exc:
                _log.debug("finalizer %s of %s deferred: %s", kind, obj["metadata"]["name"], exc)

    def _serve(
        self,
        informer: Informer,
        owner: dict[str, Any],
        kind: str,
        dependents: list[dict[str, Any]],
        *,
        done: bool,
        everything: list[tuple[Informer, dict[str, Any]]],
    ) -> None:
        collection = {id(o): i.path for i, o in everything}
        uid = owner["metadata"]["uid"]
        for dependent in dependents:
            path = _object_path(collection[id(dependent)], dependent)
            if kind == ORPHAN:
                kept = [r for r in _owners_of(dependent) if r.get("uid") != uid]
                self.rest.merge_patch(
                    path, {"metadata": {"ownerReferences": kept or None}}, allow=(404,)
                )
            else:
                body = {"propagationPolicy": "Foreground"}
                self.rest.request("DELETE", path, body=body, allow=(404, 409))
        if done:
            meta = owner["metadata"]
            left = [f for f in meta.get("finalizers", []) if f != kind]
            patch = {"metadata": {"finalizers": left, "resourceVersion": meta["resourceVersion"]}}
            self.rest.merge_patch(_object_path(informer.path, owner), patch, allow=(404, 409))
            _log.info("finalizer %s removed from %s", kind, meta["name"])
