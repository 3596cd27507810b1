"""SharedViews: bounded age, invalidation by own writes (even mid-look), single flight;
OwnWrites laid over a shared CR listing, so N creates list once and still see their own CRs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pulumi_lora import _lifecycle as lifecycle
from pulumi_lora._args import AdapterArgs
from pulumi_lora._core._caches import OwnWrites, SharedViews
from pulumi_lora._core._llmkube import Target
from pulumi_lora._errors import ClusterError
from pulumi_lora._kube import _objects as k8s
from pulumi_lora._kube._source import KubeSource


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Counter:
    """A look that counts how often it was taken and returns that count."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self.calls += 1
            return self.calls


def views(clock: Clock, max_age: float = 2.0) -> SharedViews[tuple[str, str], int]:
    """Keys are (scope, variant): invalidation works per scope."""
    return SharedViews(max_age, scope_of=lambda key: key[0], clock=clock)


class TestAge:
    def test_a_look_is_reused_within_its_max_age(self) -> None:
        clock, take = Clock(), Counter()
        shared = views(clock)
        assert shared.get(("llama", "a"), take) == 1
        clock.now += 1.9
        assert shared.get(("llama", "a"), take) == 1
        assert take.calls == 1

    def test_a_look_expires_at_its_max_age_counted_from_when_it_started(self) -> None:
        clock = Clock()
        shared = views(clock)

        def slow() -> int:
            clock.now += 1.5  # the look itself took 1.5 s
            return 7

        assert shared.get(("llama", "a"), slow) == 7
        clock.now += 0.5  # 2.0 s after it started
        assert shared.get(("llama", "a"), lambda: 8) == 8

    def test_keys_are_separate(self) -> None:
        clock, take = Clock(), Counter()
        shared = views(clock)
        assert shared.get(("llama", "a"), take) == 1
        assert shared.get(("llama", "b"), take) == 2
        assert shared.get(("mistral", "a"), take) == 3


class TestInvalidation:
    def test_invalidate_retires_every_look_of_the_scope_only(self) -> None:
        clock, take = Clock(), Counter()
        shared = views(clock)
        shared.get(("llama", "a"), take)
        shared.get(("llama", "b"), take)
        shared.get(("mistral", "a"), take)
        shared.invalidate("llama")
        assert shared.get(("llama", "a"), take) == 4
        assert shared.get(("llama", "b"), take) == 5
        assert shared.get(("mistral", "a"), take) == 3

    def test_a_look_taken_across_a_write_is_returned_but_not_kept(self) -> None:
        """The look may predate this process's own load: the next caller must look again."""
        clock = Clock()
        shared = views(clock)

        def across_a_write() -> int:
            shared.invalidate("llama")  # our own load finished while the look was taken
            return 1

        assert shared.get(("llama", "a"), across_a_write) == 1
        assert shared.get(("llama", "a"), lambda: 2) == 2

    def test_a_caller_after_a_write_does_not_join_a_look_started_before_it(self) -> None:
        clock = Clock()
        shared = views(clock)
        started, release = threading.Event(), threading.Event()

        def before_the_write() -> int:
            started.set()
            assert release.wait(5)
            return 1

        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(shared.get, ("llama", "a"), before_the_write)
            assert started.wait(5)
            shared.invalidate("llama")
            assert shared.get(("llama", "a"), lambda: 2) == 2
            release.set()
            assert first.result(5) == 1
        assert shared.get(("llama", "a"), lambda: 3) == 2


class TestSingleFlight:
    def test_concurrent_callers_share_one_look(self) -> None:
        clock = Clock()
        shared = views(clock)
        calls, release = Counter(), threading.Event()

        def take() -> int:
            assert release.wait(5)
            return calls()

        callers = 20
        with ThreadPoolExecutor(callers) as pool:
            results = [pool.submit(shared.get, ("llama", "a"), take) for _ in range(callers)]
            _wait_until(lambda: len(shared._pending) == 1)
            release.set()
            assert [r.result(5) for r in results] == [1] * callers
        assert calls.calls == 1

    def test_a_failed_look_raises_in_every_waiter_and_is_not_kept(self) -> None:
        clock = Clock()
        shared = views(clock)
        started, release = threading.Event(), threading.Event()

        def failing() -> int:
            started.set()
            assert release.wait(5)
            raise RuntimeError("apiserver away")

        with ThreadPoolExecutor(2) as pool:
            leader = pool.submit(shared.get, ("llama", "a"), failing)
            assert started.wait(5)
            waiter = pool.submit(shared.get, ("llama", "a"), lambda: 99)
            release.set()
            for future in (leader, waiter):
                with pytest.raises(RuntimeError, match="apiserver away"):
                    future.result(5)
        assert shared.get(("llama", "a"), lambda: 2) == 2


class TestOperationsInvalidateTheirTarget:
    def test_execute_retires_the_shared_looks_at_its_target(self) -> None:
        args = AdapterArgs(adapter_name="sql-lora", path="/adapters/sql", inference_service="llama")
        session = lifecycle.Session(args, lifecycle.ProviderConfig(kube=KubeSource("/nowhere")))
        key = lifecycle.LookKey(session.scope, args.transport, None, None, session.timeouts)
        other = lifecycle.LookKey(
            (session.source, "default", "mistral"), args.transport, None, None, session.timeouts
        )
        first, second = lifecycle.TargetLook(None), lifecycle.TargetLook(None)
        assert lifecycle.LOOKS.get(key, lambda: first) is first
        assert lifecycle.LOOKS.get(other, lambda: first) is first
        session.execute(None, [], {})
        assert lifecycle.LOOKS.get(key, lambda: second) is second
        assert lifecycle.LOOKS.get(other, lambda: second) is first


class TestOwnWrites:
    def test_writes_since_a_listing_started_are_laid_over_it(self) -> None:
        clock = Clock()
        writes: OwnWrites[str, int] = OwnWrites(2.0, clock=clock)
        writes.record("before", 1)
        clock.now += 0.5
        started = clock.now
        writes.record("after", 2)
        writes.record("gone", None)
        assert writes.since(started) == {"after": 2, "gone": None}

    def test_writes_older_than_any_usable_listing_are_forgotten(self) -> None:
        clock = Clock()
        writes: OwnWrites[str, int] = OwnWrites(2.0, clock=clock)
        writes.record("old", 1)
        clock.now += 2.5
        writes.record("new", 2)
        assert writes.since(0.0) == {"new": 2}


def cr(namespace: str, name: str, adapter: str, target: str = "llama") -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "spec": {"name": adapter, "path": "/a", "inferenceServiceRef": {"name": target}},
    }


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """What the cluster lists, one entry per LIST request made."""
    calls: list[list[dict[str, Any]]] = []
    stored = [cr("models", "other", "chat-lora")]

    def list_adapters(_client: object, _namespace: str | None = None) -> list[dict[str, Any]]:
        calls.append(list(stored))
        return list(stored)

    monkeypatch.setattr(k8s, "list_adapters", list_adapters)
    monkeypatch.setattr(lifecycle.Session, "kube", property(lambda _self: None))
    return calls


def session(adapter: str, name: str, kubeconfig: str = "/bench") -> lifecycle.Session:
    """A session for ``models/name`` declaring ``adapter`` on ``llama`` (cluster ``kubeconfig``)."""
    args = AdapterArgs(
        adapter_name=adapter,
        path="/a",
        inference_service="llama",
        namespace="models",
        resource_name=name,
    )
    return lifecycle.Session(args, lifecycle.ProviderConfig(kube=KubeSource(kubeconfig)))


class TestCollisionChecksShareOneListing:
    """N creates list the cluster's CRs once per max age, and still see their own writes."""

    def test_one_listing_serves_many_checks_and_own_writes_are_seen(
        self, listed: list[list[dict[str, Any]]]
    ) -> None:
        target = Target("models", "llama", "sglang", 1)
        first = session("sql-lora", "first", kubeconfig="/own-writes")
        assert first.claims(target, None, shared=True) == []
        lifecycle.OWN_CRS.record(
            (first.source, "models", "first"), cr("models", "first", "sql-lora")
        )
        second = session("sql-lora", "second", kubeconfig="/own-writes")
        claimed = second.claims(target, None, shared=True)
        assert [c["metadata"]["name"] for c in claimed] == ["first"]
        lifecycle.OWN_CRS.record((first.source, "models", "first"), None)
        assert second.claims(target, None, shared=True) == []
        assert len(listed) == 1

    def test_own_writes_on_another_cluster_are_not_laid_over(
        self, listed: list[list[dict[str, Any]]]
    ) -> None:
        target = Target("models", "llama", "sglang", 1)
        elsewhere = session("sql-lora", "first", kubeconfig="/elsewhere")
        lifecycle.OWN_CRS.record(
            (elsewhere.source, "models", "first"), cr("models", "first", "sql-lora")
        )
        here = session("sql-lora", "second", kubeconfig="/here")
        assert here.claims(target, None, shared=True) == []

    def test_a_fresh_check_lists_every_time(self, listed: list[list[dict[str, Any]]]) -> None:
        target = Target("models", "llama", "sglang", 1)
        fresh = session("chat-lora", "mine", kubeconfig="/fresh")
        assert len(fresh.claims(target, None)) == 1
        assert len(fresh.claims(target, None)) == 1
        assert len(listed) == 2


class TestReadsShareOneListing:
    """A refresh's reads take their CR from the shared listing, not a GET each."""

    def test_many_reads_one_listing_and_own_writes_laid_over(
        self, listed: list[list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        got: list[tuple[str, str]] = []

        def get_adapter(_client: object, namespace: str, name: str) -> dict[str, Any] | None:
            got.append((namespace, name))
            return None

        monkeypatch.setattr(k8s, "get_adapter", get_adapter)
        other = session("chat-lora", "other", kubeconfig="/reads")
        assert other.shared_cr() == cr("models", "other", "chat-lora")
        mine = session("sql-lora", "mine", kubeconfig="/reads")
        assert mine.shared_cr() is None  # absent from the listing and from the cluster
        written = {**cr("models", "mine", "sql-lora"), "status": {"loadedPath": "/a"}}
        lifecycle.OWN_CRS.record((mine.source, "models", "mine"), written)
        assert mine.shared_cr() == written  # a status this process wrote is what it reads
        assert len(listed) == 1
        assert got == [("models", "mine")]  # only an absence is confirmed by a read

    def test_a_cr_made_since_the_listing_is_read_not_called_gone(
        self, listed: list[list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        made = cr("models", "new", "sql-lora")
        monkeypatch.setattr(k8s, "get_adapter", lambda _client, _ns, _name: made)
        assert session("chat-lora", "other", kubeconfig="/late").shared_cr() is not None
        assert session("sql-lora", "new", kubeconfig="/late").shared_cr() == made
        assert len(listed) == 1

    def test_without_the_cluster_wide_listing_a_read_gets_its_cr(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def forbidden(_client: object, _namespace: str | None = None) -> list[dict[str, Any]]:
            raise ClusterError("listing LoRAAdapters: forbidden")

        got: list[tuple[str, str]] = []

        def get_adapter(_client: object, namespace: str, name: str) -> dict[str, Any]:
            got.append((namespace, name))
            return cr(namespace, name, "sql-lora")

        monkeypatch.setattr(k8s, "list_adapters", forbidden)
        monkeypatch.setattr(k8s, "get_adapter", get_adapter)
        monkeypatch.setattr(lifecycle.Session, "kube", property(lambda _self: None))
        reader = session("sql-lora", "mine", "/rbac")
        assert reader.shared_cr() == cr("models", "mine", "sql-lora")
        assert got == [("models", "mine")]


def _wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not met")
