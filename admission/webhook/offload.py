"""Reading large requests off the event loop, in a bounded pool of threads.

Parsing an AdmissionReview and reading a Job's gang cost time in proportion to the object
(about 45 us per container for the gang reader). On the event loop, 16 clients posting
1.8 MiB Jobs held every other request behind them (issue #20 item 8: the pod hook,
which fails closed, went to a 7.4 s median). Here a request body of at least
`threshold` bytes is parsed, and its Job read, by one of `workers` threads; smaller ones
stay on the loop, where a thread hop would cost more than the work. The threads share
the GIL with the loop, but Python switches between them every switch interval
(`fitgate serve` sets 1 ms), so the loop keeps answering `/healthz` and the small
reviews while large ones are read; at most `workers` large requests are being read at
once and the rest wait their turn in the pool's queue (their number is bounded by the
server's connection cap). A review abandoned by its budget cancels its queued work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Offload:
    """Runs a function inline for a small request and in the pool for a large one."""

    def __init__(self, *, workers: int = 2, threshold: int = 64 * 1024) -> None:
        self.threshold = threshold
        self.workers = workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def large(self, size: int) -> bool:
        return size >= self.threshold

    async def run(self, size: int, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)`: on the loop when `size` (bytes of the request) is below the
        threshold, else in the pool. Exceptions propagate either way."""
        if not self.large(size):
            return fn(*args)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="fitgate-webhook-read")
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(fn, *args))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
