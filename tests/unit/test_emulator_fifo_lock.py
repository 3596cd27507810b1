"""The emulator's load lock serves waiters in arrival order, as SGLang's ``asyncio.Lock`` does:
a thread that lets it go and asks again at once queues behind those already waiting (a
``threading.Lock`` lets it take the lock straight back)."""

from __future__ import annotations

import threading
import time

from pulumi_lora.testing.emulator._engine import FifoLock


def _wait_for(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_holder_that_asks_again_queues_behind_the_waiters() -> None:
    lock = FifoLock()
    order: list[str] = []

    def take(name: str) -> None:
        with lock:
            order.append(name)

    lock.__enter__()
    waiters = [threading.Thread(target=take, args=(name,)) for name in ("b", "c")]
    for issued, waiter in enumerate(waiters, start=2):
        waiter.start()
        _wait_for(lambda issued=issued: lock._issued == issued)  # queued, in this order
    lock.__exit__()
    take("a-again")  # straight after letting go: behind b and c
    for waiter in waiters:
        waiter.join(5)
    assert order == ["b", "c", "a-again"]
    assert not lock.locked()


def test_locked_says_whether_anyone_holds_it() -> None:
    lock = FifoLock()
    assert not lock.locked()
    with lock:
        assert lock.locked()
    assert not lock.locked()
