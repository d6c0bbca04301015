"""Results of work done in threads, handed to the event loop in batches.

The gate's and the check's decisions run in threads (the engine's decision thread, the
gate's, the idle engine's). `loop.run_in_executor` and `asyncio.wrap_future` hand each
result back with `call_soon_threadsafe`: the finished thread writes a byte to the loop's
self-pipe (a system call), which on a loaded machine also makes it wait for the GIL back
before it can take its next decision; the loop then reads that byte. Profiles of
`make bench-controller` put that write first among the single entries (19% of the busy
samples at 5,000 nodes).

Here a finished thread appends its result to a `collections.deque` (no system call, no
GIL handover) and wakes the loop only when no wake-up is already pending: every result
that finishes before the loop gets to them shares one wake-up, and the loop resolves
them all in one callback (`_Mailbox._drain`). A result is the callable's return value
or the exception it raised, delivered to its own awaiting coroutine exactly as
`run_in_executor` would: a decision that raises is still answered per Workload.

`run(executor, fn, *args)` is the drop-in for `loop.run_in_executor(executor, fn,
*args)`; it also returns the executor's `concurrent.futures.Future` through `submit`
for callers that must know whether the work started (`ClusterInventory` abandons an
overrunning decision). The callable runs in a copy of the caller's context, as under
`asyncio.to_thread`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Delivery = tuple["asyncio.Future[Any]", bool, Any]  # (future, ok, value or exception)


class _Mailbox:
    """The results waiting for one event loop, and whether a wake-up is on its way."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: `_mailboxes` is keyed by the loop, which this value must not keep alive.
        self._loop = weakref.ref(loop)
        self._ready: collections.deque[_Delivery] = collections.deque()
        self._lock = threading.Lock()
        self._woken = False
        self.wakeups = 0  # wake-ups sent (tests, benchmarks)
        self.delivered = 0  # results delivered

    def post(self, future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        """From any thread: queue a result; wake the loop unless a wake-up is pending."""
        self._ready.append((future, ok, value))
        with self._lock:
            if self._woken:
                return  # the pending drain takes this one too (appended before it reset)
            self._woken = True
            self.wakeups += 1
        loop = self._loop()
        if loop is None:
            return  # the loop is gone: nobody waits for the result any more
        with contextlib.suppress(RuntimeError):  # closed: the same
            loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        """On the loop: resolve every queued result."""
        with self._lock:
            self._woken = False  # a result appended from now on wakes the loop again
        ready = self._ready
        while ready:
            future, ok, value = ready.popleft()
            self.delivered += 1
            if future.done():  # cancelled while the thread ran (a timeout)
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


_mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox] = \
    weakref.WeakKeyDictionary()


def mailbox(loop: asyncio.AbstractEventLoop | None = None) -> _Mailbox:
    """The running (or given) loop's mailbox."""
    loop = loop or asyncio.get_running_loop()
    box = _mailboxes.get(loop)
    if box is None:
        box = _mailboxes[loop] = _Mailbox(loop)
    return box


def _call(box: _Mailbox, future: asyncio.Future[Any], call: Callable[[], Any]) -> None:
    """In the worker thread: run, then post the value or the exception."""
    if future.done():  # cancelled before it started
        return
    try:
        value = call()
    except StopIteration as exc:  # cannot be set on a Future, as in concurrent.futures
        box.post(future, False, RuntimeError(f"StopIteration raised: {exc!r}"))
    except BaseException as exc:
        box.post(future, False, exc)
    else:
        box.post(future, True, value)


def submit(executor: concurrent.futures.Executor, fn: Callable[..., T], *args: Any
           ) -> tuple[asyncio.Future[T], concurrent.futures.Future[None]]:
    """Run `fn(*args)` on `executor`; (the loop's future of its result, the executor's
    future of the run). Raises RuntimeError if the executor is shut down."""
    loop = asyncio.get_running_loop()
    box = mailbox(loop)
    future: asyncio.Future[T] = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    ran = executor.submit(_call, box, future, call)
    return future, ran


async def run(executor: concurrent.futures.Executor, fn: Callable[..., T], *args: Any) -> T:
    """`await loop.run_in_executor(executor, fn, *args)`, handed back in batches."""
    future, ran = submit(executor, fn, *args)
    try:
        return await future
    except asyncio.CancelledError:
        ran.cancel()  # not started yet: it never runs
        raise
