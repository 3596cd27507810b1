"""The played LLMKube controller's work queue: controller-runtime's default rate limiter (the
larger of a per-key back-off and an overall bucket of 10 per second, a burst of 100), events
queued at once and once, ``RequeueAfter`` delays."""

from __future__ import annotations

import pytest

from pulumi_lora.testing.testbed._workqueue import Bucket, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_first_hundred_requeues_wait_for_nothing_then_ten_a_second() -> None:
    bucket = Bucket()
    assert [bucket.reserve(0.0) for _ in range(100)] == [0.0] * 100
    waits = [bucket.reserve(0.0) for _ in range(3)]
    assert waits == pytest.approx([0.1, 0.2, 0.3])


def test_tokens_come_back_with_time_up_to_the_burst() -> None:
    bucket = Bucket()
    for _ in range(105):
        bucket.reserve(0.0)
    assert bucket.reserve(0.6) == pytest.approx(0.0)  # 6 tokens back, 5 owed, 1 taken
    assert bucket.reserve(1000.0) == 0.0
    assert [bucket.reserve(1000.0) for _ in range(99)] == [0.0] * 99  # full again, not more
    assert bucket.reserve(1000.0) == pytest.approx(0.1)


def test_a_failing_key_backs_off_doubling_and_forgetting_resets_it() -> None:
    queue = WorkQueue(clock=Clock())
    key = ("models", "sql")
    delays = [queue.add_rate_limited(key) for _ in range(4)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04])
    queue.forget(key)
    assert queue.add_rate_limited(key) == pytest.approx(0.005)


def test_many_failing_keys_are_held_to_the_bucket() -> None:
    queue = WorkQueue(clock=Clock())
    delays = [queue.add_rate_limited(("models", f"cr-{i}")) for i in range(102)]
    assert delays[:100] == pytest.approx([0.005] * 100)  # each key's first back-off
    assert delays[100:] == pytest.approx([0.1, 0.2])  # then ten a second over all keys


def test_events_queue_a_key_once_and_delays_come_due_in_order() -> None:
    clock = Clock()
    queue = WorkQueue(time_scale=0.5, clock=clock)
    queue.add(("a", "1"))
    queue.add(("a", "1"))
    queue.add_after(("a", "2"), 30.0)  # 15 s at half the controller's time
    assert queue.get() == ("a", "1")
    assert queue.get() is None
    assert queue.idle_for(1.0) == 1.0
    clock.now += 14.0
    assert queue.idle_for(5.0) == pytest.approx(1.0)
    clock.now += 1.0
    assert queue.get() == ("a", "2")
    assert queue.idle_for(1.0) == 1.0
