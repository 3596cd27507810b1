"""The loop's cache: ownership, availability, what a pod run gets, and when a status is due."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pulumi_lora._core._llmkube import PodEndpoint, Target
from pulumi_lora._core._ownership import ControllerRef, Owned
from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._models import ANNOTATION_OPERATION, ANNOTATION_PINNED, ANNOTATION_SMOKE_TEST
from pulumi_lora._resync._decide import CapacityNote, ReloadReason
from pulumi_lora._resync._views import AdapterCR, SecretRef, adapter_from_object
from pulumi_lora._resync._world import World

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TARGET = ("models", "llama")


def cr(
    name: str, adapter: str | None = None, *, created: str = "2026-12-01T10:00:00Z", **notes: str
) -> AdapterCR:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "models",
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": created,
            "annotations": notes,
        },
        "spec": {
            "name": adapter or name,
            "path": f"/adapters/{name}",
            "inferenceServiceRef": {"name": "llama"},
        },
    }
    parsed = adapter_from_object(obj)
    assert parsed is not None
    return parsed


#: The controller chain of the service's own pods (pod → ReplicaSet → Deployment → it).
REPLICASET = ControllerRef("apps/v1", "ReplicaSet", "llama-5d8f", "uid-rs")
DEPLOYMENT = ControllerRef("apps/v1", "Deployment", "llama", "uid-deploy")
SERVICE = ControllerRef("inference.llmkube.dev/v1alpha1", "InferenceService", "llama", "uid-isvc")


def pod(
    name: str, *, ready: bool = True, controller: ControllerRef | None = REPLICASET
) -> PodEndpoint:
    return PodEndpoint(
        name=name,
        namespace="models",
        uid=f"uid-{name}",
        ready=ready,
        ip="127.0.0.1",
        port=30000,
        state="",
        restart_count=0,
        controller=controller,
        service="llama",
    )


def world(*crs: AdapterCR, runtime: str = "sglang", extra_args: tuple[str, ...] = ()) -> World:
    w = World()
    w.put_target(Target("models", "llama", runtime, 2, extra_args, uid=SERVICE.uid))
    w.put_owner("replicasets", Owned("models", REPLICASET.name, REPLICASET.uid, DEPLOYMENT))
    w.put_owner("deployments", Owned("models", DEPLOYMENT.name, DEPLOYMENT.uid, SERVICE))
    for item in crs:
        w.put_cr(item)
    return w


class TestParsing:
    def test_annotations_become_settings(self) -> None:
        parsed = cr(
            "sql",
            **{
                ANNOTATION_PINNED: "true",
                "pulumi-lora.dev/api-key-secret": "sglang/api-key",
                "pulumi-lora.dev/readiness-policy": "AnyReadyPod",
            },
        )
        assert parsed.pinned and parsed.policy.value == "AnyReadyPod"
        assert parsed.api_key == SecretRef("models", "sglang", "api-key")
        assert parsed.target == TARGET

    def test_an_incomplete_object_is_skipped(self) -> None:
        assert (
            adapter_from_object({"metadata": {"name": "x", "namespace": "y"}, "spec": {}}) is None
        )

    def test_bad_settings_fall_back_to_defaults(self) -> None:
        parsed = cr(
            "sql",
            **{
                "pulumi-lora.dev/readiness-policy": "Most",
                "pulumi-lora.dev/api-key-secret": "nokey",
            },
        )
        assert parsed.policy.value == "AllReadyPods" and parsed.api_key is None


class TestOwnership:
    def test_the_oldest_claimant_owns_a_name(self) -> None:
        old, young = cr("a", "sql", created="2026-12-01T09:00:00Z"), cr("b", "sql")
        w = world(young, old)
        assert w.owner(TARGET, "sql") == old.key
        assert w.availability(old).ok
        verdict = w.availability(young)
        assert not verdict.ok and verdict.reason == "NameCollision"
        assert "LoRAAdapter models/a" in verdict.message

    def test_a_startup_adapter_with_another_path_is_a_collision(self) -> None:
        w = world(cr("sql"), extra_args=("--lora-paths", "sql=/elsewhere"))
        verdict = w.availability(w.crs[("models", "sql")])
        assert verdict.reason == "NameCollision" and "/elsewhere" in verdict.message
        same = world(cr("sql"), extra_args=("--lora-paths", "sql=/adapters/sql"))
        assert same.availability(same.crs[("models", "sql")]).ok

    def test_targets_that_cannot_take_adapters(self) -> None:
        assert world(cr("x"), runtime="vllm").availability(cr("x")).reason == "RuntimeMismatch"
        assert World().availability(cr("x")).reason == "InferenceServiceNotFound"
        scoped = World("other")
        assert scoped.availability(cr("x")).reason == "TargetNotWatched"

    def test_a_server_where_one_load_cannot_reach_every_request(self) -> None:
        verdict = world(cr("x"), extra_args=("--tokenizer-worker-num", "2")).availability(cr("x"))
        assert not verdict.ok and verdict.reason == "PartialReach"
        assert verdict.message.startswith("--tokenizer-worker-num 2: each of the 2 tokenizer")


class TestPodWork:
    def test_pinned_first_and_only_crs_the_loop_may_act_on(self) -> None:
        busy = cr("busy", **{ANNOTATION_OPERATION: "update@2026-12-01T11:59:00Z"})
        going = cr("going", **{ANNOTATION_OPERATION: "delete@2026-12-01T11:59:00Z"})
        w = world(cr("b"), cr("a"), cr("pin", **{ANNOTATION_PINNED: "true"}), busy, going)
        w.seed_pod(pod("p1"))
        work = w.pod_work(("models", "p1"), NOW)
        assert [t.name for t in work.tasks] == ["pin", "a", "b"]
        assert not work.unloads and work.declared >= {("a", "/adapters/a")}

    def test_a_task_smokes_its_loads_unless_its_cr_says_smoke_test_false(self) -> None:
        unchecked = cr("raw", **{ANNOTATION_SMOKE_TEST: "false"})
        w = world(cr("a"), unchecked)
        w.seed_pod(pod("p1"))
        smoke = {t.name: t.smoke for t in w.pod_work(("models", "p1"), NOW).tasks}
        assert smoke == {"a": True, "raw": False}
        assert unchecked.desired.smoke is False and cr("a").desired.smoke is True
        # Only an annotation changed: nothing to act on (the loads after it follow it).
        assert unchecked.declaration() == replace(unchecked, smoke=True).declaration()

    def test_a_deleted_name_is_unloaded_unless_claimed_again(self) -> None:
        a = cr("a")
        w = world(a)
        w.seed_pod(pod("p1"))
        w.seed_pod(pod("p2", ready=False))
        w.remove_cr(a.key)
        assert w.queue_unloads(a) == [("models", "p1"), ("models", "p2")]
        assert [u.name for u in w.pod_work(("models", "p1"), NOW).unloads] == ["a"]
        w.put_cr(cr("other", "a"))  # a new claimant: its task decides, no unload
        assert not w.pod_work(("models", "p1"), NOW).unloads

    def test_an_unload_is_not_queued_when_another_cr_claims_the_name(self) -> None:
        a, b = cr("a", "sql", created="2026-12-01T09:00:00Z"), cr("b", "sql")
        w = world(a, b)
        w.seed_pod(pod("p1"))
        w.remove_cr(a.key)
        assert w.queue_unloads(a) == []
        assert w.owner(TARGET, "sql") == b.key

    def test_capacity_skips_hold_until_the_declaration_changes(self) -> None:
        w = world(cr("a"), cr("b"))
        w.seed_pod(pod("p1"))
        key = ("models", "p1")
        declared = w.declared_for(TARGET)
        w.pods[key].capacity = CapacityNote("p1", frozenset({"a"}), declared)
        assert w.pod_work(key, NOW).capacity_skips == {"a"}
        w.put_cr(cr("c"))
        assert w.pod_work(key, NOW).capacity_skips == frozenset()
        assert w.pods[key].capacity is None


class TestEvictions:
    def test_only_a_load_limit_lets_a_later_load_evict_an_earlier_one(self) -> None:
        assert not world().may_evict(("models", "llama"))
        assert world(extra_args=("--max-loaded-loras", "4")).may_evict(("models", "llama"))
        assert world().may_evict(("models", "unknown"))  # nothing known: assume it may


class TestOutcomes:
    def test_a_status_waits_for_every_serving_pod_at_this_generation(self) -> None:
        a = cr("a")
        w = world(a)
        w.seed_pod(pod("p1"))
        w.seed_pod(pod("p2", ready=False))
        assert w.outcomes_for(a) is None
        task = w.pod_work(("models", "p1"), NOW).tasks[0]
        assert w.record(("models", "p1"), task, PodOutcome("p1", loaded=True))
        assert not w.record(("models", "p1"), task, PodOutcome("p1", loaded=True))  # unchanged
        outcomes = w.outcomes_for(a)
        assert outcomes is not None and [o.waiting for o in outcomes] == [False, True]
        w.put_cr(replace(a, generation=2))
        assert w.outcomes_for(w.crs[a.key]) is None  # an outcome for generation 1 says nothing
        assert not w.record(("models", "p1"), task, PodOutcome("p1", loaded=True))

    def test_a_restart_voids_what_was_recorded(self) -> None:
        a = cr("a")
        w = world(a)
        w.seed_pod(pod("p1"))
        key = ("models", "p1")
        w.record(key, w.pod_work(key, NOW).tasks[0], PodOutcome("p1", loaded=True))
        down = replace(pod("p1", ready=False), restart_count=1)
        assert w.put_pod(down, 1.0).pending is ReloadReason.RESTART
        assert w.outcomes_for(a) is not None  # not serving: waiting, nothing pending
        verdict = w.put_pod(replace(down, ready=True), 2.0)
        assert verdict.act is ReloadReason.RESTART and w.pods[key].ready_seen_at == 2.0
        assert w.outcomes_for(a) is None

    def test_a_status_only_update_keeps_the_outcomes(self) -> None:
        a = cr("a")
        w = world(a)
        w.seed_pod(pod("p1"))
        key = ("models", "p1")
        w.record(key, w.pod_work(key, NOW).tasks[0], PodOutcome("p1", loaded=True))
        w.put_cr(replace(a, status={"conditions": []}))
        assert w.outcomes_for(a) is not None


class TestSettled:
    def test_a_fingerprint_only_when_everything_is_served_as_declared(self) -> None:
        w = world(cr("a"), cr("b"))
        w.seed_pod(pod("p1"))
        work = w.pod_work(("models", "p1"), NOW)
        served = {"a": "/adapters/a", "b": "/adapters/b", "startup": "/s"}
        key = work.settled_by(served)
        assert key is not None and key == work.settled_by(dict(served))
        assert work.settled_by({**served, "b": "/elsewhere"}) is None  # a swap is due
        assert work.settled_by({"a": "/adapters/a"}) is None  # a load is due
        assert key != work.settled_by({**served, "extra": "/x"})  # the server changed
        w.put_cr(replace(w.crs[("models", "a")], generation=2))
        assert w.pod_work(("models", "p1"), NOW).settled_by(served) != key  # a new generation

    def test_unloads_and_capacity_notes_always_run(self) -> None:
        a = cr("a")
        w = world(a, cr("b"))
        w.seed_pod(pod("p1"))
        w.remove_cr(a.key)
        w.queue_unloads(a)
        assert w.pod_work(("models", "p1"), NOW).settled_by({"b": "/adapters/b"}) is None


class TestControllerChain:
    def test_a_labelled_pod_outside_the_chain_gets_no_work_and_counts_for_no_status(self) -> None:
        w = world(cr("a"))
        w.put_pod(pod("p1"), 0.0)
        w.put_pod(pod("evil", controller=None), 0.0)
        assert w.serving_pods() == [("models", "p1")]
        assert [s.facts.name for s in w.pods_of(TARGET)] == ["p1"]
        assert [s.facts.name for s in w.labelled_pods_of(TARGET)] == ["evil", "p1"]
        assert w.trust(pod("evil", controller=None)) is not None
        assert w.queue_unloads(cr("gone")) == [("models", "p1")]

    def test_the_reported_ones_are_named_in_available(self) -> None:
        w = world(cr("a"))
        w.put_pod(pod("evil", controller=None), 0.0)
        assert w.availability(cr("a")).message == ""
        w.untrusted[("models", "evil")] = "has no controller"
        verdict = w.availability(cr("a"))
        assert verdict.ok and "pod evil has no controller" in verdict.message

    def test_owners_come_and_go_by_uid(self) -> None:
        w = world()
        assert w.trust(pod("p1")) is None
        assert not w.put_owner(
            "replicasets", Owned("models", REPLICASET.name, REPLICASET.uid, DEPLOYMENT)
        )
        assert w.remove_owner("replicasets", REPLICASET.uid)
        assert "ReplicaSet llama-5d8f" in (w.trust(pod("p1")) or "")
        w.put_target(Target("models", "llama", "sglang", 2, uid="uid-recreated"))
        w.put_owner("replicasets", Owned("models", REPLICASET.name, REPLICASET.uid, DEPLOYMENT))
        assert "not the target" in (w.trust(pod("p1")) or "")
