"""What holds the event loop, and why the controllers reconcile: `bench.controller`'s
instruments (`--slow`).

- `SlowCallbacks` times every callback the loop runs (`asyncio.Handle._run`: task steps,
  `call_soon` and timer callbacks, I/O handlers) and keeps, per callback, how many ran
  longer than `threshold` seconds, their total and their longest; a task's step is named
  by its coroutine, the innermost coroutine and line it resumed at and the one it stopped
  at next (or returned): what ran in between held the loop. Garbage collections over the
  threshold are listed beside them (they run in whichever thread allocates). The timing
  costs a few microseconds per callback. Each is listed with the loop thread's CPU time
  in it: on a loaded machine the rest is waiting for a core or for the GIL.
- `reconciles()` reads the runtime's counters: reconciles per controller, and why keys
  were queued (the kind of store event, or requeue / retry / again) with what the add did
  (`admission.runtime.workqueue.ADDS`; absent on trees without it).
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import prometheus_client


def _where(coro: Any, chain: bool = False) -> str:
    """The innermost coroutine a task's coroutine awaits, and its line (`chain`: every
    coroutine from the task's down to it)."""
    inner, names = coro, []
    while True:
        frame = getattr(inner, "cr_frame", None)
        name = getattr(inner, "__qualname__", type(inner).__name__)
        names.append(f"{name}:{frame.f_lineno}" if frame is not None else f"{name} (returned)")
        nxt = getattr(inner, "cr_await", None)
        if nxt is None or not hasattr(nxt, "cr_frame"):
            break
        inner = nxt
    return " > ".join(names) if chain else names[-1]


def _task(handle: asyncio.Handle) -> asyncio.Task[Any] | None:
    owner = getattr(getattr(handle, "_callback", None), "__self__", None)
    return owner if isinstance(owner, asyncio.Task) else None


def _name(handle: asyncio.Handle, resumed: str | None) -> str:
    task = _task(handle)
    if task is not None:
        coro: Any = task.get_coro()
        return f"task: from {resumed} to {_where(coro, chain=True)}"
    callback: Any = getattr(handle, "_callback", None)
    return str(getattr(callback, "__qualname__", None) or repr(callback))


class SlowCallbacks:
    """See the module docstring. `install()` patches `asyncio.Handle._run` in this
    process (a benchmark's, never the service's)."""

    def __init__(self, threshold: float = 0.02) -> None:
        self.threshold = threshold
        # name -> [count, total s, max s, CPU s of the loop's thread]
        self.slow: dict[str, list[float]] = {}
        self.callbacks = 0
        self.busy_s = 0.0

    def install(self) -> None:
        run = asyncio.Handle._run
        watch = self

        def timed(handle: asyncio.Handle) -> None:
            task = _task(handle)
            resumed = _where(task.get_coro()) if task is not None else None
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                run(handle)
            finally:
                took = time.perf_counter() - started
                watch.callbacks += 1
                watch.busy_s += took
                if took > watch.threshold:
                    entry = watch.slow.setdefault(_name(handle, resumed), [0, 0.0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += took
                    entry[2] = max(entry[2], took)
                    entry[3] += time.thread_time() - cpu

        asyncio.Handle._run = timed  # type: ignore[method-assign,assignment]
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        """Collections, by generation: those over the threshold, with the others'
        callbacks (a collection runs in whichever thread allocates)."""
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = time.perf_counter() - getattr(self, "_gc_started", time.perf_counter())
        if took > self.threshold:
            entry = self.slow.setdefault(f"garbage collection, generation "
                                         f"{info.get('generation')} (any thread)",
                                         [0, 0.0, 0.0, float("nan")])
            entry[0] += 1
            entry[1] += took
            entry[2] = max(entry[2], took)

    def reset(self) -> None:
        self.slow.clear()
        self.callbacks = 0
        self.busy_s = 0.0

    def report(self, top: int = 12) -> list[dict[str, Any]]:
        ranked = sorted(self.slow.items(), key=lambda x: -x[1][1])[:top]
        return [{"callback": n, "count": int(c), "total_s": t, "max_s": m, "cpu_s": u}
                for n, (c, t, m, u) in ranked]


def _samples(name: str) -> list[Any]:
    for metric in prometheus_client.REGISTRY.collect():
        if metric.name == name:
            return list(metric.samples)
    return []


def reconciles() -> dict[str, float]:
    """Counters as "reconciles controller" and "adds controller cause outcome"."""
    out: dict[str, float] = {}
    for s in _samples("fitgate_reconcile"):
        if s.name.endswith("_total"):
            k = f"reconciles {s.labels['controller']}"
            out[k] = out.get(k, 0.0) + s.value
    for s in _samples("fitgate_workqueue_adds"):
        if s.name.endswith("_total"):
            out[f"adds {s.labels['controller']} {s.labels['cause']} "
                f"{s.labels['outcome']}"] = s.value
    return out


def handoffs() -> dict[str, float]:
    """The running loop's batched hand-offs of decision results (trees with
    `admission.runtime.handoff`): results delivered and wake-ups sent for them."""
    try:
        from admission.runtime import handoff
    except ImportError:
        return {}
    box = handoff.mailbox()
    return {"handoff delivered": box.delivered, "handoff wakeups": box.wakeups}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()
            if v - before.get(k, 0.0) > 0}
