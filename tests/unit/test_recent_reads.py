"""A diff right after this process read the same resource trusts that read (bounded age)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pulumi_lora import _operations as ops
from pulumi_lora._models import AdapterArgs
from pulumi_lora._operations import AdapterState, PodReport
from pulumi_lora._provider import LoRAAdapterProvider, RecentReads, outputs

GOOD = {
    "adapter_name": "sql-lora",
    "path": "/adapters/sql",
    "inference_service": "llama",
    "namespace": "models",
}


def outs() -> dict[str, Any]:
    state = AdapterState(
        uid="u1",
        generation=1,
        spec={"path": "/adapters/sql"},
        annotations={},
        pods=(PodReport("p0", ready=True, loaded=True, path="/adapters/sql"),),
    )
    return outputs(AdapterArgs.model_validate(GOOD), state)


class TestRecentReads:
    def test_a_young_read_with_the_same_outputs_vouches(self) -> None:
        reads = RecentReads(2.0)
        reads.record("models/sql-lora", outs(), time.monotonic())
        assert reads.vouches_for("models/sql-lora", outs())

    def test_integers_handed_back_as_floats_still_match(self) -> None:
        reads = RecentReads(2.0)
        reads.record("id", outs(), time.monotonic())
        assert reads.vouches_for("id", {**outs(), "generation": 1.0, "__provider": "pickled"})

    def test_other_outputs_an_old_read_or_another_id_do_not(self) -> None:
        reads = RecentReads(2.0)
        now = time.monotonic()
        reads.record("id", outs(), now)
        reads.record("old", outs(), now - 2.0)
        assert not reads.vouches_for("id", {**outs(), "pods": []})
        assert not reads.vouches_for("old", outs())
        assert not reads.vouches_for("never-read", outs())


class TestDiffAfterRead:
    @pytest.fixture
    def looks(self, monkeypatch: pytest.MonkeyPatch) -> list[AdapterArgs]:
        """Every live look a diff or read takes (the cluster answers with ``outs()``'s state)."""
        taken: list[AdapterArgs] = []
        live = AdapterState(
            uid="u1",
            generation=1,
            spec={"path": "/adapters/sql"},
            annotations={},
            pods=(PodReport("p0", ready=True, loaded=True, path="/adapters/sql"),),
        )

        def observe(args: AdapterArgs, *_: Any) -> AdapterState:
            taken.append(args)
            return live

        monkeypatch.setattr(ops, "observe", observe)
        return taken

    def test_a_diff_after_this_processs_read_does_not_look_again(
        self, looks: list[AdapterArgs]
    ) -> None:
        provider = LoRAAdapterProvider()
        read = provider.read("models/sql-refreshed", {**GOOD})
        assert len(looks) == 1
        assert not provider.diff("models/sql-refreshed", read.outs or {}, dict(GOOD)).changes
        assert len(looks) == 1

    def test_a_diff_without_a_read_looks(self, looks: list[AdapterArgs]) -> None:
        provider = LoRAAdapterProvider()
        assert not provider.diff("models/sql-unread", outs(), dict(GOOD)).changes
        assert len(looks) == 1
