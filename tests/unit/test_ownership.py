"""The controller chain (pod → ReplicaSet → Deployment → InferenceService): every broken link."""

from __future__ import annotations

from typing import Any

import pytest

from pulumi_lora._core._llmkube import PodEndpoint, Target, split_pods
from pulumi_lora._core._ownership import (
    ControllerRef,
    Owned,
    by_uid,
    controller_chain,
    controller_of,
    owned_from_object,
    untrusted_message,
)

NS = "models"
ISVC_UID = "isvc-uid"
RS = ControllerRef("apps/v1", "ReplicaSet", "llama-abc", "rs-uid")
DEP = ControllerRef("apps/v1", "Deployment", "llama", "dep-uid")
ISVC = ControllerRef("inference.llmkube.dev/v1alpha1", "InferenceService", "llama", ISVC_UID)


def chain(
    pod: ControllerRef | None = RS,
    rs: Owned | None = None,
    dep: Owned | None = None,
    isvc_uid: str = ISVC_UID,
) -> str | None:
    rs = rs if rs is not None else Owned(NS, "llama-abc", "rs-uid", DEP)
    dep = dep if dep is not None else Owned(NS, "llama", "dep-uid", ISVC)
    return controller_chain(NS, pod, {rs.uid: rs}, {dep.uid: dep}, isvc_uid)


def test_the_whole_chain_is_trusted() -> None:
    assert chain() is None


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"pod": None}, "has no controller"),
        (
            {"pod": ControllerRef("apps/v1", "StatefulSet", "llama", "ss")},
            "is controlled by StatefulSet llama, not by a ReplicaSet",
        ),
        (
            {"pod": ControllerRef("example.com/v1", "ReplicaSet", "llama-abc", "rs-uid")},
            "not by a ReplicaSet",
        ),
        (
            {"pod": ControllerRef("apps/v1", "ReplicaSet", "llama-abc", "other-uid")},
            "ReplicaSet llama-abc (uid other-uid), which is not among",
        ),
        ({"rs": Owned("elsewhere", "llama-abc", "rs-uid", DEP)}, "which is not among"),
        ({"rs": Owned(NS, "llama-abc", "rs-uid", None)}, "ReplicaSet llama-abc, which has no"),
        (
            {"rs": Owned(NS, "llama-abc", "rs-uid", ControllerRef("v1", "Pod", "x", "p"))},
            "whose controller Pod x is not a Deployment",
        ),
        (
            {"rs": Owned(NS, "llama-abc", "rs-uid", ControllerRef("x/v1", "Deployment", "d", "u"))},
            "is not a Deployment",
        ),
        (
            {
                "rs": Owned(
                    NS, "llama-abc", "rs-uid", DEP.__class__("apps/v1", "Deployment", "d", "u")
                )
            },
            "whose Deployment d (uid u) is not among",
        ),
        ({"dep": Owned("elsewhere", "llama", "dep-uid", ISVC)}, "Deployment llama (uid dep-uid)"),
        ({"dep": Owned(NS, "llama", "dep-uid", None)}, "Deployment llama, which has no controller"),
        (
            {"dep": Owned(NS, "llama", "dep-uid", ControllerRef("v1", "ConfigMap", "c", "u"))},
            "controlled by ConfigMap c, not by an InferenceService",
        ),
        (
            {
                "dep": Owned(
                    NS,
                    "llama",
                    "dep-uid",
                    ControllerRef(
                        "serving.kserve.io/v1beta1", "InferenceService", "llama", ISVC_UID
                    ),
                )
            },
            "not by an InferenceService",
        ),
        (
            {
                "dep": Owned(
                    NS,
                    "llama",
                    "dep-uid",
                    ISVC.__class__(ISVC.api_version, ISVC.kind, "old", "gone"),
                )
            },
            "controlled by InferenceService old (uid gone), not the target (uid isvc-uid)",
        ),
        ({"isvc_uid": ""}, "UID is unknown"),
    ],
)
def test_every_broken_link_says_which(kwargs: dict[str, Any], why: str) -> None:
    verdict = chain(**kwargs)
    assert verdict is not None
    assert why in verdict


def test_a_recreated_service_with_the_same_name_does_not_inherit_the_old_pods() -> None:
    assert chain(isvc_uid="new-uid") is not None


def test_objects_are_read_by_their_controller_reference_only() -> None:
    obj = {
        "metadata": {
            "namespace": NS,
            "name": "llama-abc",
            "uid": "rs-uid",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "c"},
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "llama",
                    "uid": "dep-uid",
                    "controller": True,
                },
            ],
        }
    }
    assert controller_of(obj) == DEP
    assert owned_from_object(obj) == Owned(NS, "llama-abc", "rs-uid", DEP)
    assert (
        controller_of({"metadata": {"ownerReferences": [{"kind": "X", "controller": False}]}})
        is None
    )
    assert controller_of({}) is None
    assert by_uid([obj, {"metadata": {"name": "no-uid"}}]) == {"rs-uid": owned_from_object(obj)}


def test_the_message_names_each_ignored_pod() -> None:
    assert untrusted_message("llama", {}) == ""
    text = untrusted_message("llama", {"evil": "has no controller", "bad": "is x"})
    assert text.startswith("ignored 2 pods labelled inference.llmkube.dev/service=llama")
    assert "pod bad is x; pod evil has no controller" in text
    many = untrusted_message("llama", {f"p{i:02}": "is x" for i in range(12)}, limit=10)
    assert many.endswith("; and 2 more")


def test_the_provider_splits_a_listing_by_the_chain() -> None:
    def ref(kind: str, name: str, uid: str, api: str = "apps/v1") -> dict[str, object]:
        return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}

    rs = {
        "metadata": {
            "namespace": NS,
            "name": "llama-abc",
            "uid": "rs-uid",
            "ownerReferences": [ref("Deployment", "llama", "dep-uid")],
        }
    }
    dep = {
        "metadata": {
            "namespace": NS,
            "name": "llama",
            "uid": "dep-uid",
            "ownerReferences": [
                ref("InferenceService", "llama", ISVC_UID, "inference.llmkube.dev/v1alpha1")
            ],
        }
    }
    own = PodEndpoint(
        "llama-abc-1", NS, "p1", True, "10.0.0.1", 30000, "Running, Ready", controller=RS
    )
    evil = PodEndpoint("evil", NS, "p2", True, "10.0.0.2", 30000, "Running, Ready")
    target = Target(NS, "llama", "sglang", 1, uid=ISVC_UID)
    listing = split_pods(target, [own, evil], [rs], [dep])
    assert listing.pods == (own,)
    assert listing.untrusted == {
        "evil": "has no controller (no ownerReference with controller: true)"
    }
