"""The cyclic garbage collector in a long-running service: full collections kept short.

`serve` freezes the initial list once it is applied (`gc.freeze()`: out of the
collector's sight). What comes after grows too: the engine's kept work per gang content
(views, projected entries, fills), the Workloads, requests and Events of a burst.
CPython runs a full (generation 2) collection whenever the objects that survived into
the oldest generation since the last one reach a quarter of those already there, and
each walks every object not frozen: `make bench-controller --slow` at 1,000 nodes
(machine load 7 to 9 on 2 cores) counted 9 full collections in a 172 s burst, 30 s in
all, the longest 5.3 s, on whichever thread allocated, holding the GIL and so the event
loop (that was the loop's worst lag).

`freeze_survivors()` installs a collector callback: after each full collection, its
survivors (alive by definition at that moment) are frozen too, so the next full
collection walks only what was made since, and the cost of all of them stays linear in
what is allocated instead of growing with the heap. The freeze is scheduled on the event
loop, out of the collector's callback.

What it costs: a frozen object that later becomes part of unreachable cyclic garbage is
not collected (reference counting still frees everything acyclic, which is what the
engine keeps: its parts are immutable trees). To bound that, every `full_every` seconds
(an hour by default) the frozen objects are handed back (`gc.unfreeze()`), so the next
full collection looks at everything once, frees such cycles, and its survivors are
frozen again.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable
from typing import Any

import prometheus_client

FREEZES = prometheus_client.Counter(
    "fitgate_gc_freezes_total", "Full collections whose survivors were frozen")
FULL_SECONDS = prometheus_client.Histogram(
    "fitgate_gc_full_collection_seconds", "Time of one full (generation 2) collection",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5))


class Survivors:
    """The installed callback (see the module docstring); `remove()` takes it out."""

    def __init__(self, loop: asyncio.AbstractEventLoop, full_every: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._loop = loop
        self._full_every = full_every
        self._clock = clock
        self._last_full = clock()
        self._started = 0.0
        self.freezes = 0
        gc.callbacks.append(self._on_collection)

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        FULL_SECONDS.observe(time.perf_counter() - self._started)
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self._freeze)

    def _freeze(self) -> None:
        """On the loop: freeze what survived, or hand everything back once per
        `full_every` so that the next full collection sees it all."""
        now = self._clock()
        if now - self._last_full >= self._full_every:
            self._last_full = now
            gc.unfreeze()
        else:
            gc.freeze()  # O(1): the collector's lists are spliced, not walked
            self.freezes += 1
            FREEZES.inc()


def freeze_survivors(full_every: float = 3600.0) -> Survivors:
    """Install the policy for the running loop (call after the initial `gc.freeze()`)."""
    return Survivors(asyncio.get_running_loop(), full_every)
