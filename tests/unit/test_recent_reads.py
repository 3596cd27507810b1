"""A diff after this process read the same resource trusts that read: young enough (or in the
engine's one-command process), and with no own load or unload on the target since."""

from __future__ import annotations

import importlib.machinery
import sys
import time
import types
from typing import Any

import pytest

from pulumi_lora import _lifecycle as lifecycle
from pulumi_lora._args import AdapterArgs
from pulumi_lora._lifecycle import AdapterState, PodReport
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._pulumi._calls import RecentReads, serves_one_command
from pulumi_lora._pulumi._outputs import outputs

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
    return outputs(AdapterArgs.parse(GOOD), state)


def reads(*, whole_command: bool = False) -> RecentReads:
    return RecentReads(2.0, whole_command=lambda: whole_command)


class TestRecentReads:
    def test_a_young_read_with_the_same_outputs_vouches(self) -> None:
        recent = reads()
        recent.record("models/sql-lora", outs(), time.monotonic(), 0)
        assert recent.vouches_for("models/sql-lora", outs(), 0)

    def test_integers_handed_back_as_floats_still_match(self) -> None:
        recent = reads()
        recent.record("id", outs(), time.monotonic(), 0)
        assert recent.vouches_for("id", {**outs(), "generation": 1.0, "__provider": "pickled"}, 0)

    def test_other_outputs_an_old_read_or_another_id_do_not(self) -> None:
        recent = reads()
        now = time.monotonic()
        recent.record("id", outs(), now, 0)
        recent.record("old", outs(), now - 2.0, 0)
        assert not recent.vouches_for("id", {**outs(), "pods": []}, 0)
        assert not recent.vouches_for("old", outs(), 0)
        assert not recent.vouches_for("never-read", outs(), 0)

    def test_in_the_engines_process_an_old_read_vouches_for_the_whole_command(self) -> None:
        recent = reads(whole_command=True)
        recent.record("old", outs(), time.monotonic() - 600, 3)
        assert recent.vouches_for("old", outs(), 3)
        assert not recent.vouches_for("old", {**outs(), "pods": []}, 3)

    def test_an_own_load_or_unload_on_the_target_since_the_read_revokes_it(self) -> None:
        for whole_command in (False, True):
            recent = reads(whole_command=whole_command)
            recent.record("id", outs(), time.monotonic(), 3)
            assert not recent.vouches_for("id", outs(), 4)

    def test_only_the_engines_dynamic_provider_process_serves_one_command(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``python -m pulumi.dynamic`` runs the module below as ``__main__`` (on the real
        engine: tests/e2e/test_fleet_view.py counts one CR read per adapter)."""
        assert not serves_one_command()  # pytest's own __main__
        engine_main = types.ModuleType("__main__")
        engine_main.__spec__ = importlib.machinery.ModuleSpec("pulumi.dynamic.__main__", None)
        monkeypatch.setitem(sys.modules, "__main__", engine_main)
        assert serves_one_command()


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

        monkeypatch.setattr(lifecycle, "observe", observe)
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

    def test_a_diff_after_this_process_loaded_on_the_target_looks_again(
        self, looks: list[AdapterArgs]
    ) -> None:
        provider = LoRAAdapterProvider()
        read = provider.read("models/sql-evictable", {**GOOD})
        args = AdapterArgs.parse(GOOD)
        # Another adapter's load on the same target, in this process (it may have evicted ours).
        lifecycle.LOOKS.invalidate(lifecycle.Session(args, lifecycle.ProviderConfig()).scope)
        assert not provider.diff("models/sql-evictable", read.outs or {}, dict(GOOD)).changes
        assert len(looks) == 2
