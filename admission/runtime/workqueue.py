"""A small reconcile runtime: work queues of keys, one per controller.

How to write a controller (ctl-logic's Workload reconciler, webhook's gate controller and
the AdmissionCheck reconciler use this): an object with

    name: str                        # "workload", "gate", "admissioncheck": logs, metrics
    leader_only: bool                # True: runs only on the replica holding the Lease
    watches: tuple[kinds.Kind, ...]  # the stores whose events may concern it
    def keys(self, kind, event, before) -> Iterable[str]:
        # map one store event (client.WatchEvent, the object before it or None) to the
        # keys to reconcile: usually `controller.key_of(event.object)`, or the owner's key
        # for a dependent object (a ProvisioningRequest -> its Workload). May yield none.
    async def reconcile(self, key: str) -> float | None:
        # read the stores, write through the client; return seconds until it wants to be
        # called again for this key (a requeue), or None when it is done until the next
        # event. Raising an exception retries the key with rate-limited backoff.

and register it: `runtime.register(controller)` (serve does it for the controllers of
`admission.app.components`). Keys are `namespace/name` (or `name` for cluster-scoped kinds):
`key_of(obj)` and `split(key)`.

Guarantees:
- De-duplication: a key waiting in the queue is there once (the earliest due time wins).
- Per-key serialization: a key is never reconciled twice at the same time; an event that
  arrives while its key is being reconciled queues it again for after.
- Retries: an exception is logged and the key retried after base·2^(failures-1) seconds
  (at most `backoff_max`); a success resets the count.
- Requeue after: the reconcile's return value.
- When a controller starts (at start, or when this replica becomes leader for leader-only
  ones), every object already in its watched stores is offered to `keys` as ADDED, so
  nothing decided before a restart or a leadership change is missed.
- Time comes from the injected `clock.Clock` (tests use `clock.FakeClock`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import prometheus_client
import structlog

from admission import clock as clock_
from admission.kube import client, kinds, store

log = structlog.get_logger("fitgate.controller")

RECONCILES = prometheus_client.Counter(
    "fitgate_reconcile_total", "Reconciles by controller and result (ok, requeue, error)",
    ["controller", "result"])
RECONCILE_SECONDS = prometheus_client.Histogram(
    "fitgate_reconcile_seconds", "Time spent in one reconcile", ["controller"])
# Why keys were queued: by the kind of the store event that named them (or "requeue",
# "retry", "again": the reconcile's own return, a failure's backoff, an event during the
# reconcile), and what the add did: "queued" (a new entry), "merged" (the key was already
# waiting: nothing added), "again" (the key was being reconciled: it runs once more after).
ADDS = prometheus_client.Counter(
    "fitgate_workqueue_adds_total", "Keys offered to a controller's queue, by cause and "
    "outcome", ["controller", "cause", "outcome"])
QUEUE_DEPTH = prometheus_client.Gauge(
    "fitgate_workqueue_depth", "Keys waiting in a controller's queue", ["controller"])
# From the moment a key is due (queued by an event, or its requeue-after or retry delay
# over) to the start of its reconcile: the time it waited for a worker. With the
# reconcile's own time it is what a Workload waits on fitgate per pass.
QUEUE_WAIT = prometheus_client.Histogram(
    "fitgate_workqueue_wait_seconds", "Time a due key waited for a worker", ["controller"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))


class Controller(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def leader_only(self) -> bool: ...

    @property
    def watches(self) -> tuple[kinds.Kind, ...]: ...

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]: ...

    async def reconcile(self, key: str) -> float | None: ...


def key_of(obj: client.Obj) -> str:
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{ns}/{name}" if ns else name


def split(key: str) -> tuple[str | None, str]:
    """(namespace or None, name)."""
    ns, sep, name = key.rpartition("/")
    return (ns if sep else None), name


StoreOf = Callable[[kinds.Kind], store.Store]


@dataclasses.dataclass
class Retry:
    base: float = 0.1
    maximum: float = 300.0

    def delay(self, failures: int) -> float:
        return float(min(self.maximum, self.base * 2 ** max(0, failures - 1)))


class Queue:
    """The work queue of one controller, and the workers that drain it."""

    def __init__(self, ctrl: Controller, clock: clock_.Clock, *, workers: int = 4,
                 retry: Retry | None = None) -> None:
        self.ctrl = ctrl
        self.clock = clock
        self.workers = workers
        self.retry = retry or Retry()
        self.failures: dict[str, int] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}  # key -> due time (monotonic), while queued
        self._active: set[str] = set()  # keys being reconciled
        self._again: dict[str, float] = {}  # keys queued while active
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._running = False
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._log = log.bind(controller=ctrl.name)

    def __len__(self) -> int:
        return len(self._due)

    @property
    def running(self) -> bool:
        return self._running

    def add(self, key: str, after: float = 0.0, cause: str = "other") -> None:
        """Queue a key (ignored while the queue is stopped). `cause`: what asks for it
        (counted in `fitgate_workqueue_adds_total`)."""
        if not self._running:
            return
        due = self.clock.monotonic() + max(0.0, after)
        if key in self._active:
            self._again[key] = min(due, self._again.get(key, due))
            ADDS.labels(self.ctrl.name, cause, "again").inc()
            return
        have = self._due.get(key)
        if have is not None and have <= due:
            ADDS.labels(self.ctrl.name, cause, "merged").inc()
            return
        ADDS.labels(self.ctrl.name, cause, "merged" if have is not None else "queued").inc()
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        QUEUE_DEPTH.labels(self.ctrl.name).set(len(self._due))
        self._wake.set()

    def start(self) -> None:
        if self._running:
            return
        self._running = True
        self._task = asyncio.create_task(self._dispatch(), name=f"queue-{self.ctrl.name}")

    async def stop(self) -> None:
        """Stop dispatching, wait for reconciles in flight to be cancelled, and forget
        every queued key (a later start re-reads the stores)."""
        self._running = False
        tasks = [t for t in (self._task, *self._inflight) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._inflight.clear()
        self._heap.clear()
        self._due.clear()
        self._again.clear()
        self._active.clear()
        self.failures.clear()
        QUEUE_DEPTH.labels(self.ctrl.name).set(0)

    async def _dispatch(self) -> None:
        slots = asyncio.Semaphore(self.workers)
        while True:
            now = self.clock.monotonic()
            while self._heap and (self._heap[0][2] not in self._due
                                  or self._due[self._heap[0][2]] != self._heap[0][0]):
                heapq.heappop(self._heap)  # superseded entry
            if self._heap and self._heap[0][0] <= now:
                await slots.acquire()
                due, _, key = heapq.heappop(self._heap)
                if self._due.get(key) != due or due > self.clock.monotonic():
                    # Superseded while waiting for a worker, or not due: look again.
                    if self._due.get(key) == due:
                        heapq.heappush(self._heap, (due, next(self._seq), key))
                    slots.release()
                    continue
                del self._due[key]
                QUEUE_DEPTH.labels(self.ctrl.name).set(len(self._due))
                QUEUE_WAIT.labels(self.ctrl.name).observe(
                    max(0.0, self.clock.monotonic() - due))
                self._active.add(key)
                task = asyncio.create_task(self._one(key, slots))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
                continue
            self._wake.clear()
            waits: list[asyncio.Task[object]] = [asyncio.create_task(self._wake.wait())]
            if self._heap:
                waits.append(asyncio.create_task(self.clock.sleep(self._heap[0][0] - now)))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
                await asyncio.gather(*waits, return_exceptions=True)

    async def _one(self, key: str, slots: asyncio.Semaphore) -> None:
        name = self.ctrl.name
        started = time.perf_counter()
        after: float | None = None
        try:
            after = await self.ctrl.reconcile(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            n = self.failures[key] = self.failures.get(key, 0) + 1
            after = self.retry.delay(n)
            RECONCILES.labels(name, "error").inc()
            self._log.warning("reconcile.error", key=key, failures=n, retry_in=after,
                              error=f"{type(exc).__name__}: {exc}", exc_info=exc)
        else:
            self.failures.pop(key, None)
            RECONCILES.labels(name, "requeue" if after is not None else "ok").inc()
        finally:
            RECONCILE_SECONDS.labels(name).observe(time.perf_counter() - started)
            self._active.discard(key)
            slots.release()
        again = self._again.pop(key, None)
        if again is not None:
            self.add(key, max(0.0, again - self.clock.monotonic()), "again")
        if after is not None:
            self.add(key, after, "retry" if key in self.failures else "requeue")


class Runtime:
    """The controllers of one process, their queues and their store subscriptions."""

    def __init__(self, store_of: StoreOf, *, clock: clock_.Clock | None = None,
                 workers: int = 4, retry: Retry | None = None) -> None:
        self.store_of = store_of
        self.clock = clock or clock_.SystemClock()
        self.workers = workers
        self.retry = retry or Retry()
        self.queues: dict[str, Queue] = {}

    def register(self, ctrl: Controller) -> Queue:
        if ctrl.name in self.queues:
            raise ValueError(f"two controllers are named {ctrl.name!r}")
        q = Queue(ctrl, self.clock, workers=self.workers, retry=self.retry)
        self.queues[ctrl.name] = q
        for kind in ctrl.watches:
            self.store_of(kind).subscribe(self._subscriber(q, kind))
        return q

    def _subscriber(self, q: Queue, kind: kinds.Kind) -> store.Subscriber:
        def on_event(event: client.WatchEvent, before: client.Obj | None) -> None:
            if not q.running:
                return
            try:
                keys = list(q.ctrl.keys(kind, event, before))
            except Exception as exc:  # a bad object must not stop the informer
                log.warning("controller.keys_failed", controller=q.ctrl.name,
                            kind=kind.kind, object=key_of(event.object), error=str(exc))
                return
            for k in keys:
                q.add(k, cause=kind.kind)
        return on_event

    def start(self, *, leader_only: bool) -> None:
        """Start the leader-only controllers, or the every-replica ones, and offer them
        every object already cached."""
        for q in self.queues.values():
            if q.ctrl.leader_only == leader_only and not q.running:
                q.start()
                for kind in q.ctrl.watches:
                    sub = self._subscriber(q, kind)
                    for obj in self.store_of(kind).list():
                        sub(client.WatchEvent("ADDED", obj), None)

    async def stop(self, *, leader_only: bool | None = None) -> None:
        """Stop the leader-only controllers, the every-replica ones, or all (None)."""
        await asyncio.gather(*(q.stop() for q in self.queues.values()
                               if leader_only is None or q.ctrl.leader_only == leader_only))
