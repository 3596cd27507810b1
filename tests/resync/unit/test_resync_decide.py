"""The loop's pure decisions: pod events, the operation annotation, backoff, watches, the Lease,
and eviction detection. Tables, plus properties where a table can't cover the space."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulumi_lora._core._llmkube import PodEndpoint
from pulumi_lora._resync._decide import (
    CapacityNote,
    LeaseMove,
    LeaseRecord,
    LoadLedger,
    Permission,
    ReloadReason,
    WatchAction,
    after_watch_error,
    backoff_delay,
    capacity_message,
    classify_pod,
    lease_move,
    permission,
    strongest,
)

POD = PodEndpoint(
    name="llama-1",
    namespace="ns",
    uid="uid-1",
    ready=True,
    ip="10.0.0.5",
    port=30000,
    state="",
    restart_count=0,
    service="llama",
)
NOT_READY = replace(POD, ready=False)
RESTARTED = replace(POD, restart_count=1)
REPLACED = replace(POD, uid="uid-2")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

R = ReloadReason


class TestClassifyPod:
    @pytest.mark.parametrize(
        ("old", "new", "pending", "act", "still_pending", "invalidate", "readiness"),
        [
            # first sight of a pod
            (None, POD, None, R.NEW_POD, None, True, True),
            (None, NOT_READY, None, None, R.NEW_POD, True, False),
            # nothing changed
            (POD, POD, None, None, None, False, False),
            (NOT_READY, NOT_READY, None, None, None, False, False),
            # readiness flips
            (NOT_READY, POD, None, R.BECAME_READY, None, False, True),
            (POD, NOT_READY, None, None, None, False, True),
            # a restart: the kubelet marks it not Ready, bumps restartCount, then Ready again
            (NOT_READY, replace(RESTARTED, ready=False), None, None, R.RESTART, True, False),
            (replace(RESTARTED, ready=False), RESTARTED, R.RESTART, R.RESTART, None, False, True),
            # a restart seen while Ready throughout (a fast kubelet)
            (POD, RESTARTED, None, R.RESTART, None, True, False),
            # a replacement with the same name (StatefulSet-style): a new pod
            (POD, REPLACED, None, R.NEW_POD, None, True, True),
            (POD, replace(REPLACED, ready=False), None, None, R.NEW_POD, True, True),
            # a new pod that turns Ready is still counted as new, not as became_ready
            (replace(POD, ready=False), POD, R.NEW_POD, R.NEW_POD, None, False, True),
            # Ready but no IP yet is not serving
            (NOT_READY, replace(POD, ip=None), None, None, None, False, False),
        ],
    )
    def test_table(
        self,
        old: PodEndpoint | None,
        new: PodEndpoint,
        pending: ReloadReason | None,
        act: ReloadReason | None,
        still_pending: ReloadReason | None,
        invalidate: bool,
        readiness: bool,
    ) -> None:
        verdict = classify_pod(old, new, pending)
        assert (verdict.act, verdict.pending) == (act, still_pending)
        assert verdict.invalidate is invalidate
        assert verdict.readiness_changed is readiness

    @given(
        ready=st.booleans(),
        restarts=st.integers(0, 3),
        same_uid=st.booleans(),
        was_ready=st.booleans(),
        pending=st.sampled_from([None, *ReloadReason]),
    )
    def test_a_serving_pod_never_keeps_a_pending_cause(
        self,
        ready: bool,
        restarts: int,
        same_uid: bool,
        was_ready: bool,
        pending: ReloadReason | None,
    ) -> None:
        old = replace(POD, ready=was_ready)
        new = replace(POD, ready=ready, restart_count=restarts, uid="uid-1" if same_uid else "x")
        verdict = classify_pod(old, new, pending)
        if new.serving:
            assert verdict.pending is None
        else:
            assert verdict.act is None

    def test_strongest(self) -> None:
        assert strongest([R.VERIFY, R.CR_CHANGE, R.RESTART]) is R.RESTART
        assert strongest([]) is R.VERIFY


class TestPermission:
    @pytest.mark.parametrize(
        ("annotation", "expected"),
        [
            (None, Permission.ACT),
            ("", Permission.ACT),
            ("update@2026-12-01T11:58:00Z", Permission.HANDS_OFF),  # 2 min old
            ("update@2026-12-01T12:04:00Z", Permission.HANDS_OFF),  # a skewed clock: future
            ("update@2026-12-01T11:54:59Z", Permission.ACT),  # older than 5 min: abandoned
            ("update@2026-12-01T11:55:00Z", Permission.ACT),  # exactly the lease: expired
            ("delete@2026-12-01T11:59:00Z", Permission.DELETING),
            ("delete@2020-01-01T00:00:00Z", Permission.DELETING),  # forbids loads forever
            ("delete@garbage", Permission.DELETING),
            ("update@garbage", Permission.ACT),  # can't be proven young
            ("rename@2026-12-01T11:59:00Z", Permission.ACT),  # not an operation we know
        ],
    )
    def test_table(self, annotation: str | None, expected: Permission) -> None:
        assert permission(annotation, NOW) is expected

    def test_the_lease_is_a_parameter(self) -> None:
        assert (
            permission("update@2026-12-01T11:59:00Z", NOW, timedelta(seconds=30)) is Permission.ACT
        )


class TestBackoff:
    def test_doubles_up_to_the_cap_with_equal_jitter(self) -> None:
        assert backoff_delay(0, 0.5, base=1, cap=300) == 0
        assert [backoff_delay(n, 0.0, base=1, cap=300) for n in (1, 2, 3, 4)] == [0.5, 1, 2, 4]
        assert [backoff_delay(n, 0.999999, base=1, cap=300) for n in (1, 2)] == pytest.approx(
            [1, 2]
        )
        assert backoff_delay(20, 0.0, base=1, cap=300) == 150
        assert backoff_delay(10**6, 1.0, base=1, cap=300) == 300

    @given(
        failures=st.integers(1, 10_000),
        fraction=st.floats(0, 1),
        base=st.floats(0.01, 10),
        cap=st.floats(0.01, 1000),
    )
    def test_within_the_window(
        self, failures: int, fraction: float, base: float, cap: float
    ) -> None:
        window = min(cap, base * 2.0 ** min(failures - 1, 62))
        assert window / 2 <= backoff_delay(failures, fraction, base=base, cap=cap) <= window

    @given(failures=st.integers(1, 60), fraction=st.floats(0, 1))
    def test_never_shrinks_as_failures_grow(self, failures: int, fraction: float) -> None:
        low = backoff_delay(failures, 0.0, base=1, cap=300)
        assert backoff_delay(failures + 1, fraction, base=1, cap=300) >= low


class TestWatchPolicy:
    def test_gone_relists_at_once(self) -> None:
        assert after_watch_error(410, 1, 0.5) == (WatchAction.RELIST, 0.0)

    @pytest.mark.parametrize("code", [None, 500, 503, 429, 401])
    def test_anything_else_rewatches_after_a_bounded_backoff(self, code: int | None) -> None:
        action, delay = after_watch_error(code, 1, 0.0)
        assert action is WatchAction.REWATCH and delay == pytest.approx(0.1)
        assert after_watch_error(code, 50, 1.0)[1] == 5.0


class TestLeaseMove:
    HELD = LeaseRecord(holder="other", duration=15, renew_time="t1")

    @pytest.mark.parametrize(
        ("record", "unchanged_for", "move"),
        [
            (None, 0, LeaseMove.CREATE),
            (LeaseRecord("me", 15, "t"), 100, LeaseMove.RENEW),
            (HELD, 14.9, LeaseMove.WAIT),
            (HELD, 15, LeaseMove.TAKE_OVER),  # expired on our clock
            (LeaseRecord(None, 1, "t"), 0, LeaseMove.TAKE_OVER),  # released
            (LeaseRecord("", 15, None), 0, LeaseMove.TAKE_OVER),
        ],
    )
    def test_table(self, record: LeaseRecord | None, unchanged_for: float, move: LeaseMove) -> None:
        assert lease_move(record, "me", unchanged_for) is move


class TestLoadLedger:
    def test_an_adapter_missing_after_a_later_load_was_evicted(self) -> None:
        ledger = LoadLedger()
        ledger.listed({"keep": "/k"})
        ledger.loaded("a", "/a", {"keep": "/k", "a": "/a"})
        ledger.loaded("b", "/b", {"keep": "/k", "b": "/b"})  # limit 2: a made room for b
        assert ledger.evicted == {"a": "/a"} and ledger.loads == 2
        assert ledger.served == {"keep": "/k", "b": "/b"}

    def test_an_unload_of_ours_is_not_an_eviction(self) -> None:
        ledger = LoadLedger()
        ledger.listed({"a": "/old"})
        ledger.unloaded("a")
        ledger.loaded("a", "/new", {"a": "/new"})
        ledger.loaded("b", "/b", {"a": "/new", "b": "/b"})
        assert ledger.evicted == {}

    def test_reloading_an_evicted_adapter_clears_it(self) -> None:
        ledger = LoadLedger()
        ledger.loaded("a", "/a", {"a": "/a"})
        ledger.loaded("b", "/b", {"b": "/b"})
        ledger.loaded("a", "/a", {"a": "/a"})
        assert ledger.evicted == {"b": "/b"}

    def test_without_a_map_nothing_is_inferred(self) -> None:
        ledger = LoadLedger()
        ledger.listed(None)
        ledger.loaded("a", "/a", None)
        ledger.loaded("b", "/b", None)
        assert ledger.evicted == {} and ledger.served == {"a": "/a", "b": "/b"}

    def test_an_out_of_band_unload_is_no_eviction(self) -> None:
        ledger = LoadLedger()
        ledger.listed({"b": "/b"})  # a was unloaded by someone else before this run
        ledger.loaded("a", "/a", {"a": "/a", "b": "/b"})
        assert ledger.evicted == {}


class TestCapacity:
    def test_a_note_holds_until_the_declaration_changes(self) -> None:
        declared = frozenset({("a", "/a"), ("b", "/b")})
        note = CapacityNote("llama-1", frozenset({"a"}), declared)
        assert note.still_applies(declared)
        assert not note.still_applies(frozenset({("b", "/b")}))
        assert not note.still_applies(frozenset({("a", "/a2"), ("b", "/b")}))

    def test_the_message_names_the_limit_and_the_adapters(self) -> None:
        note = CapacityNote("llama-1", frozenset({"a"}), frozenset())
        text = capacity_message("ns/llama", "1", ["b", "a"], [note])
        assert text.startswith("InferenceService ns/llama serves with --max-loaded-loras 1 but 2")
        assert "(a, b)" in text and "pod llama-1 evicted a" in text
        assert "its --max-loaded-loras limit" in capacity_message("ns/l", None, ["a"], [])
