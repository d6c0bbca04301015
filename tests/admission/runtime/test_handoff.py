"""Results of threads handed to the loop in batches: each caller gets its own value or
its own exception, results that finish together share one wake-up, and work cancelled
before it started never runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import gc
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from admission.runtime import handoff


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    yield executor
    executor.shutdown(wait=True)


def _square(n: int) -> int:
    return n * n


def _fail(n: int) -> int:
    raise ValueError(f"workload {n} has a bad claim")


async def test_each_caller_gets_its_own_value_or_its_own_exception(
        pool: concurrent.futures.ThreadPoolExecutor) -> None:
    calls = [handoff.run(pool, _fail if n % 3 == 0 else _square, n) for n in range(12)]
    got = await asyncio.gather(*calls, return_exceptions=True)
    for n, answer in enumerate(got):
        if n % 3 == 0:
            assert isinstance(answer, ValueError) and f"workload {n} " in str(answer)
        else:
            assert answer == n * n


async def test_results_that_finish_while_the_loop_is_busy_share_one_wake_up(
        pool: concurrent.futures.ThreadPoolExecutor) -> None:
    box = handoff.mailbox()
    woken, delivered = box.wakeups, box.delivered
    finished = threading.Barrier(5)

    def decide(n: int) -> int:
        if n < 4:
            finished.wait(timeout=5)
        return n

    pending = [asyncio.ensure_future(handoff.run(pool, decide, n)) for n in range(4)]
    await asyncio.sleep(0)  # the four are submitted
    finished.wait(timeout=5)  # all four run now; the loop is held here, busy
    deadline = time.monotonic() + 5
    while box.delivered == delivered and len(box._ready) < 4:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert await asyncio.gather(*pending) == [0, 1, 2, 3]
    assert box.delivered - delivered == 4
    assert box.wakeups - woken == 1


async def test_a_call_cancelled_before_it_starts_never_runs() -> None:
    one = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    gate, ran = threading.Event(), list[str]()
    try:
        first = asyncio.ensure_future(handoff.run(one, gate.wait, 5))
        second = asyncio.ensure_future(handoff.run(one, ran.append, "second"))
        await asyncio.sleep(0.01)
        second.cancel()
        gate.set()
        assert await first is True
        with pytest.raises(asyncio.CancelledError):
            await second
    finally:
        one.shutdown(wait=True)
    assert ran == []


async def test_stop_iteration_and_context(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    def stop() -> None:
        raise StopIteration("done")

    with pytest.raises(RuntimeError, match="StopIteration"):
        await handoff.run(pool, stop)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("workload-7")
    assert await handoff.run(pool, var.get) == "workload-7"


def test_a_mailbox_does_not_keep_its_loop_alive() -> None:
    loop = asyncio.new_event_loop()
    box = handoff.mailbox(loop)
    gone = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert gone() is None
    assert box.delivered == 0
