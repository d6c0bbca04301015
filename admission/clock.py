"""The clock every timed part of fitgate takes by injection (leader election, the reconcile
runtime's retries and requeues), so tests run on a `FakeClock` they advance by hand.

`now()` is wall time (what goes into API objects: a Lease's renewTime); `monotonic()`
measures intervals; `sleep()` waits on the clock's own time.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime.datetime: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """Time moves only when a test calls `advance`; sleepers wake when their deadline
    is reached, in deadline order."""

    def __init__(self, start: datetime.datetime | None = None) -> None:
        self._start = start or datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self._t = 0.0
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def now(self) -> datetime.datetime:
        return self._start + datetime.timedelta(seconds=self._t)

    def monotonic(self) -> float:
        return self._t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._t + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float, *, step: float | None = None) -> None:
        """Move time forward, waking sleepers as their deadlines pass and letting the woken
        tasks run (in `step`-sized moves when given, so that loops that sleep again are
        woken again within the same advance)."""
        target = self._t + seconds
        while True:
            await _settle()
            due = self._sleepers[0][0] if self._sleepers else None
            nxt = target if due is None or due > target else due
            if step is not None:
                nxt = min(nxt, self._t + step) if nxt > self._t else nxt
            self._t = max(self._t, nxt)
            while self._sleepers and self._sleepers[0][0] <= self._t:
                _, _, fut = heapq.heappop(self._sleepers)
                if not fut.done():
                    fut.set_result(None)
            await _settle()
            if self._t >= target and not (self._sleepers and self._sleepers[0][0] <= target):
                return


async def _settle() -> None:
    """Let every runnable task run until none is left runnable (bounded)."""
    for _ in range(50):
        await asyncio.sleep(0)
