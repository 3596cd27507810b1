"""The testbed's garbage-collector finalizers: which kinds it watches and what it does (pure)."""

from __future__ import annotations

from typing import Any

from pulumi_lora.testing.testbed._collector import collectable_paths, pending_work


def obj(
    uid: str, *, deleting: bool = False, finalizers: tuple[str, ...] = (), owners: Any = ()
) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": uid, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T12:00:00Z"
    meta["ownerReferences"] = [
        {"uid": owner, "blockOwnerDeletion": block} for owner, block in owners
    ]
    return {"metadata": meta}


def test_every_kind_that_can_be_listed_watched_patched_and_deleted_is_watched() -> None:
    full = ["list", "watch", "patch", "delete", "get"]
    core = {
        "resources": [
            {"name": "configmaps", "verbs": full},
            {"name": "pods/status", "verbs": full},  # a subresource
            {"name": "events", "verbs": full},  # never an owner here
            {"name": "bindings", "verbs": ["create"]},
        ]
    }
    apps = {"resources": [{"name": "deployments", "verbs": full}]}
    assert collectable_paths([("/api/v1", core), ("/apis/apps/v1", apps)]) == [
        "/api/v1/configmaps",
        "/apis/apps/v1/deployments",
    ]


def test_an_object_not_being_deleted_or_without_the_finalizers_needs_nothing() -> None:
    assert pending_work(obj("a", finalizers=("foregroundDeletion",)), []) == (None, [], False)
    assert pending_work(obj("a", deleting=True, finalizers=("other",)), []) == (None, [], False)


def test_foreground_deletes_dependents_and_waits_for_the_blocking_ones() -> None:
    owner = obj("owner", deleting=True, finalizers=("foregroundDeletion",))
    blocking = obj("rs", owners=[("owner", True)])
    loose = obj("cm", owners=[("owner", False)])
    stranger = obj("other", owners=[("x", True)])
    kind, act_on, done = pending_work(owner, [owner, blocking, loose, stranger])
    assert (kind, [o["metadata"]["uid"] for o in act_on], done) == (
        "foregroundDeletion",
        ["rs", "cm"],
        False,
    )
    going = obj("rs", deleting=True, owners=[("owner", True)])
    assert pending_work(owner, [going, loose]) == ("foregroundDeletion", [loose], False)
    assert pending_work(owner, [loose]) == ("foregroundDeletion", [loose], True)
    assert pending_work(owner, []) == ("foregroundDeletion", [], True)


def test_orphan_unowns_every_dependent_and_is_done_at_once() -> None:
    owner = obj("owner", deleting=True, finalizers=("orphan",))
    child = obj("rs", owners=[("owner", True)])
    assert pending_work(owner, [child]) == ("orphan", [child], True)
