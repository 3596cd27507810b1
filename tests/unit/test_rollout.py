"""The rolling swap's pure decisions (``_core._rollout``): waves, rotation, what a rollback says."""

from __future__ import annotations

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._core._reconcile import ActionKind, Desired, PodAction, PodOutcome
from pulumi_lora._core._rollout import (
    Rotation,
    failures,
    replaced,
    rollback_message,
    rollout,
    rotation,
    said,
)

TRUE = {"type": "pulumi-lora.dev/adapters-loaded", "status": "True"}
FALSE = {"type": "pulumi-lora.dev/adapters-loaded", "status": "False"}


def pod(name: str, *, gated: bool = True, gate: dict | None = TRUE, ip: str = "") -> PodEndpoint:
    return PodEndpoint(
        name, "ns", f"uid-{name}", True, ip or None, 30000, "Running", gated=gated, gate=gate
    )


def swap(name: str) -> PodAction:
    return PodAction(name, ActionKind.SWAP, "/old")


class TestRollout:
    def test_swaps_on_gated_pods_in_rotation_go_max_unavailable_at_a_time(self) -> None:
        pods = {n: pod(n) for n in "abcde"}
        actions = [swap(n) for n in "abcde"]
        rolled = rollout(actions, pods, 2)
        assert rolled.at_once == ()
        assert [[a.pod for a in w] for w in rolled.waves] == [["a", "b"], ["c", "d"], ["e"]]

    def test_loads_ungated_pods_and_pods_out_of_rotation_run_at_once(self) -> None:
        pods = {
            "a": pod("a"),
            "b": pod("b", gated=False, gate=None),
            "c": pod("c", gate=FALSE),
            "d": pod("d"),
        }
        actions = [swap("a"), swap("b"), swap("c"), PodAction("d", ActionKind.LOAD)]
        rolled = rollout(actions, pods, 1)
        assert [a.pod for a in rolled.at_once] == ["b", "c", "d"]
        assert [[a.pod for a in w] for w in rolled.waves] == [["a"]]

    def test_max_unavailable_below_one_still_rolls_one_at_a_time(self) -> None:
        pods = {n: pod(n) for n in "ab"}
        assert len(rollout([swap("a"), swap("b")], pods, 0).waves) == 2


def slice_of(*endpoints: dict) -> dict:
    return {"endpoints": list(endpoints)}


def endpoint(name: str, ready: bool | None, uid: str = "") -> dict:
    ref = {"kind": "Pod", "name": name, **({"uid": uid} if uid else {})}
    conditions = {} if ready is None else {"ready": ready}
    return {"addresses": ["10.0.0.1"], "targetRef": ref, "conditions": conditions}


class TestRotation:
    def test_ready_in_any_slice_is_in_rotation(self) -> None:
        slices = [slice_of(endpoint("a", False)), slice_of(endpoint("a", True))]
        assert rotation(slices, pod("a")) is Rotation.IN

    def test_listed_but_ready_nowhere_is_out(self) -> None:
        slices = [slice_of(endpoint("a", False)), slice_of(endpoint("b", True))]
        assert rotation(slices, pod("a")) is Rotation.OUT

    def test_ready_absent_counts_as_ready_as_the_api_defines_it(self) -> None:
        assert rotation([slice_of(endpoint("a", None))], pod("a")) is Rotation.IN

    def test_an_endpoint_of_an_older_pod_of_the_same_name_is_not_this_pod(self) -> None:
        slices = [slice_of(endpoint("a", True, uid="older"))]
        assert rotation(slices, pod("a")) is Rotation.ABSENT

    def test_without_a_target_ref_the_address_decides(self) -> None:
        bare = {"addresses": ["10.0.0.9"], "conditions": {"ready": True}}
        assert rotation([slice_of(bare)], pod("a", ip="10.0.0.9")) is Rotation.IN
        assert rotation([slice_of(bare)], pod("a", ip="10.0.0.8")) is Rotation.ABSENT

    def test_no_slice_at_all_is_absent(self) -> None:
        assert rotation([], pod("a")) is Rotation.ABSENT


class TestRollback:
    def test_the_replaced_revision_is_the_old_spec_path_of_the_same_adapter(self) -> None:
        new = Desired("sql", "/new", pinned=True, smoke=False)
        assert replaced({"name": "sql", "path": "/old"}, new) == Desired(
            "sql", "/old", pinned=True, smoke=False
        )
        assert replaced({"name": "sql", "path": "/new"}, new) is None
        assert replaced({"name": "other", "path": "/old"}, new) is None
        assert replaced({}, new) is None

    def test_failures_are_pods_that_did_not_load_and_were_not_waiting(self) -> None:
        outcomes = [
            PodOutcome("a", loaded=True, path="/new"),
            PodOutcome("b", loaded=False, reason="IncompatibleAdapter", error="rank 512 > 64"),
            PodOutcome("c", loaded=False, waiting=True),
        ]
        assert [o.pod for o in failures(outcomes)] == ["b"]

    def test_the_message_names_the_failed_pod_sglangs_words_and_where_the_old_serves(
        self,
    ) -> None:
        failed = said([PodOutcome("b", loaded=False, error="SGLang said: LoRA rank 512 > 64")])
        restored = [
            PodOutcome("a", loaded=True, path="/old"),
            PodOutcome("b", loaded=True, path="/old"),
            PodOutcome("c", loaded=False, error="connection refused"),
        ]
        assert rollback_message("sql", "/bad", "/old", failed, restored) == (
            "swapping sql to '/bad' failed (pod b: SGLang said: LoRA rank 512 > 64); rolled "
            "back to '/old': it serves again on a, b; NOT restored on c (connection refused) "
            "(the re-sync loop retries it)"
        )
