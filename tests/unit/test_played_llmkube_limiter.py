"""The played LLMKube controller's overall requeue limiter: controller-runtime's default bucket
(10 per second, a burst of 100), as ``workqueue.BucketRateLimiter`` reserves from it."""

from __future__ import annotations

import pytest

from pulumi_lora.testing.testbed._llmkube import Bucket


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
