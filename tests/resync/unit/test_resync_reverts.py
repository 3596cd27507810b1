"""The loop rolls back a swap whose new revision fails for good (``_reverts``): every pod is given
the old path again for that generation, the status says ``SwapRolledBack`` once every pod serves
it, and a new generation ends it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from test_resync_world import NOW, cr, pod, world

from pulumi_lora._core._reconcile import PodOutcome
from pulumi_lora._models import ConditionKind, LoRAAdapterStatus
from pulumi_lora._resync._reverts import REASON, Revert
from pulumi_lora._resync._status import rolled_back
from pulumi_lora._resync._views import AdapterCR
from pulumi_lora._resync._world import AdapterTask, World

OLD, NEW = "/adapters/sql", "/adapters/sql-v2"


def established() -> AdapterCR:
    """The CR as the loop last saw it: its adapter loaded at ``OLD`` (``status.loadedPath``)."""
    return replace(cr("sql"), status={"loadedPath": OLD})


def swapped(base: AdapterCR, path: str = NEW, generation: int = 2) -> AdapterCR:
    return replace(base, path=path, generation=generation, status=base.status)


def a_world() -> tuple[World, AdapterCR]:
    w = world(established())
    for name in ("llama-0", "llama-1"):
        w.put_pod(pod(name), 0.0)
    new = swapped(established())
    w.put_cr(new)
    return w, new


def task(w: World, pod_name: str, when: datetime = NOW) -> AdapterTask:
    (found,) = w.pod_work(("models", pod_name), when).tasks
    return found


class TestReverts:
    def test_a_failed_new_revision_gives_every_pod_the_old_path_again(self) -> None:
        w, new = a_world()
        assert task(w, "llama-0").path == NEW
        assert w.reverts.failed(new, NEW, "pod llama-1: rank 512 > 64")
        assert task(w, "llama-0").path == OLD and task(w, "llama-1").path == OLD
        assert w.reverts.active(new) == Revert(2, OLD, NEW, "pod llama-1: rank 512 > 64")
        assert not w.reverts.failed(new, NEW, "again")  # one revert per generation

    def test_nothing_is_reverted_without_an_established_old_revision(self) -> None:
        w = world(cr("sql"))  # never loaded: no loadedPath
        new = swapped(cr("sql"))
        w.put_cr(new)
        assert not w.reverts.failed(new, NEW, "pod llama-0: bad")
        assert w.reverts.path(new) == NEW

    def test_a_failure_of_another_path_or_generation_reverts_nothing(self) -> None:
        w, new = a_world()
        assert not w.reverts.failed(new, OLD, "pod llama-0: the old one failed")
        assert not w.reverts.failed(replace(new, generation=3), NEW, "pod llama-0: bad")

    def test_a_new_generation_ends_the_revert(self) -> None:
        w, new = a_world()
        w.reverts.failed(new, NEW, "pod llama-1: bad")
        restored = swapped(new, path=OLD, generation=3)  # the provider applies the old spec
        w.put_cr(restored)
        assert w.reverts.active(restored) is None and task(w, "llama-0").path == OLD
        w.put_cr(swapped(restored, path="/adapters/sql-v3", generation=4))
        assert task(w, "llama-0").path == "/adapters/sql-v3"

    def test_a_status_write_keeps_the_revert(self) -> None:
        w, new = a_world()
        w.reverts.failed(new, NEW, "pod llama-1: bad")
        w.put_cr(replace(new, status={"loadedPath": OLD}))  # the loop's own status write
        assert w.reverts.path(w.crs[new.key]) == OLD

    def test_the_status_waits_until_every_pod_serves_the_old_path(self) -> None:
        w, new = a_world()
        w.record(("models", "llama-0"), task(w, "llama-0"), PodOutcome("llama-0", True, NEW))
        w.reverts.failed(new, NEW, "pod llama-1: bad")
        w.record(("models", "llama-1"), task(w, "llama-1"), PodOutcome("llama-1", True, OLD))
        assert w.outcomes_for(new) is None  # llama-0 still serves the failed path
        w.record(("models", "llama-0"), task(w, "llama-0"), PodOutcome("llama-0", True, OLD))
        outcomes = w.outcomes_for(new)
        assert outcomes is not None and [o.path for o in outcomes] == [OLD, OLD]


def test_the_rolled_back_status_says_where_it_failed_and_where_the_old_path_serves() -> None:
    revert = Revert(2, OLD, NEW, "pod llama-1: SGLang said: LoRA rank 512 exceeds 64")
    pods = [PodOutcome("llama-0", True, OLD), PodOutcome("llama-1", True, OLD)]
    now = datetime(2026, 12, 7, tzinfo=UTC)
    status = rolled_back(
        LoRAAdapterStatus(loaded_path=NEW), revert, adapter="sql", pods=pods, generation=2, now=now
    )
    by_type = {c.type: c for c in status.conditions or []}
    message = (
        f"swapping sql to {NEW!r} failed (pod llama-1: SGLang said: LoRA rank 512 exceeds 64); "
        f"rolled back to {OLD!r}: it serves again on llama-0, llama-1"
    )
    for kind, verdict in (
        (ConditionKind.ERROR, "True"),
        (ConditionKind.LOADED, "False"),
        (ConditionKind.READY, "False"),
    ):
        condition = by_type[kind.value]
        assert (condition.status.value, condition.reason, condition.message) == (
            verdict,
            REASON,
            message,
        )
        assert condition.observed_generation == 2
    assert status.loaded_path == OLD
