"""Where the webhook's decisions run: never on the event loop, one at a time.

`Hooks` hands a question the verdict cache does not hold to a `Decider`
(`submit(obj, gang, scope) -> concurrent.futures.Future[Verdict]`) and waits for it at
most its decision budget. Two deciders:

- `ThreadDecider(engine)`: one thread running `fitting.decide` on an engine in this
  process (tests, tools, fakes of the engine).
- `ProcessDecider(stores)`: a child process with a fitcore inventory of its own, of the
  idle cluster (Nodes, ResourceSlices, DeviceClasses, NodeShapes), which `fitgate serve`
  uses for the webhook.

Why a process (measured with `make bench-webhook`, docs/gate.md): a decision on a
5,000-node cluster is hundreds of milliseconds of pure Python, and the engine keeps per
gang content a projection of every node (up to 64 gang contents). In a thread it shares
the GIL with the loop (a wait of up to the switch interval at every turn of the loop) and,
worse, the objects it keeps make the cyclic garbage collector's full collections take
hundreds of milliseconds, during which every thread, the loop included, stands still:
the webhook's p99 was the GC pause. In a child process neither the GIL nor the engine's
heap is shared; the loop pays only for forwarding the store events a decision can see.

The child: the parent sends, in order, batches of store events (the initial lists on
start, then every event `fitting.relevant` lets through) and questions (the job, the
ResourceClaimTemplates and ResourceClaims it names, the FitPolicy scope). The child reads
the gang again (`fitting.read_gang`: a fitcore gang holds values that do not pickle) and
answers with the verdict's conclusions (refuse, violation, messages). A reader thread in
the parent resolves the futures.

Failure: a child that exits, or takes longer than `timeout` seconds over one question
(it is killed), fails the questions in flight (`Unavailable`; the hooks allow those
reviews unchecked, the AdmissionCheck decides); the next question starts a new child
(at most one start per `restart_backoff` seconds) with a fresh list of the stores.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import os
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

import fitcore
from admission.engine import fitting
from admission.kube import client, kinds, store
from admission.policy import fitpolicy as policy

log = structlog.get_logger("fitgate.webhook")

Verdicts = concurrent.futures.Future[fitting.Verdict]
#: How much lower the decision process's CPU priority is (`nice`).
NICE = 10


class Decider(Protocol):
    def submit(self, obj: Mapping[str, Any], gang_: fitcore.Gang, scope: policy.Scope
               ) -> Verdicts:
        """Decide `gang_` (read from `obj`, a Job or Workload) within `scope`."""

    def close(self) -> None: ...


class Unavailable(Exception):
    """The decision process exited or was stopped before answering."""


class ThreadDecider:
    """Decisions in one worker thread of this process, on `engine`."""

    def __init__(self, engine: fitting.Engine) -> None:
        self.engine = engine
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="fitgate-webhook-engine")

    def submit(self, obj: Mapping[str, Any], gang_: fitcore.Gang, scope: policy.Scope
               ) -> Verdicts:
        return self._executor.submit(fitting.decide, self.engine, gang_, scope)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class _ChildEngine:
    """`fitting.Engine` over the child's fitcore inventory."""

    def __init__(self, inventory: fitcore.Inventory) -> None:
        self.inventory = inventory

    def plan(self, gang_: fitcore.Gang, shapes: Any = None, node_filter: Any = None
             ) -> fitcore.PlanResult:
        allowed = None if shapes is None else sorted(set(shapes))
        return self.inventory.plan(gang_, shapes=allowed, node_filter=node_filter)


def _child(conn: multiprocessing.connection.Connection, kube_version: str) -> None:
    """The decision process: apply event batches, answer questions, until the pipe
    closes or "stop". It runs at a lower CPU priority than the service: on a busy node
    the loop that answers reviews gets the CPU first, a decision waits."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
    inventory = fitcore.Inventory(kube_version=kube_version)
    engine = _ChildEngine(inventory)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "events":
            for etype, obj in msg[1]:
                # Refused objects are reported by the service's own inventory.
                with contextlib.suppress(fitcore.InputError):
                    inventory.apply(etype, obj)
        elif msg[0] == "decide":
            _, ident, obj, templates, claims, scope = msg
            try:
                verdict = fitting.decide(engine, fitting.read_gang(obj, templates, claims),
                                         scope)
                conn.send(("verdict", ident, (verdict.refuse, verdict.violation,
                                              verdict.messages), None))
            except Exception as exc:  # answered, never a dead child
                conn.send(("verdict", ident, None, f"{type(exc).__name__}: {exc}"))
        else:
            return


class ProcessDecider:
    """Decisions in a child process over its own inventory of the idle cluster the
    `stores` hold; see the module docstring."""

    def __init__(self, stores: Mapping[kinds.Kind, store.Store], *,
                 kube_version: str = fitcore.DEFAULT_KUBE_VERSION, timeout: float = 30.0,
                 restart_backoff: float = 10.0) -> None:
        self.stores = stores
        self.kube_version = kube_version
        self.timeout = timeout
        self.restart_backoff = restart_backoff
        self.starts = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()  # _pending, _conn, _proc
        # Questions in flight: when sent, the answer, the pipe of the child asked.
        self._pending: dict[int, tuple[float, Verdicts, Any]] = {}
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._conn: multiprocessing.connection.Connection | None = None
        self._proc: Any = None
        self._started_at = -restart_backoff
        self._closed = False
        for kind in fitting.IDLE_KINDS:
            s = stores.get(kind)
            if s is not None:
                s.subscribe(self._forward(kind))
        self._start()

    # ------------------------------------------------------------ the loop's side

    def _forward(self, kind: kinds.Kind) -> store.Subscriber:
        def on_event(event: client.WatchEvent, before: client.Obj | None) -> None:
            if self._conn is not None and fitting.relevant(kind, event, before):
                self._outbox.put(("event", event.type, _with_kind(kind, event.object)))
        return on_event

    def _start(self) -> None:
        """A new child, sent the stores' idle cluster (on the caller's thread: the loop's,
        which owns the stores)."""
        ctx = multiprocessing.get_context("spawn")  # no fork of a threaded process
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(child, self.kube_version), daemon=True,
                           name="fitgate-webhook-decisions")
        proc.start()
        child.close()
        self._outbox.put(None)  # the previous child's sender stops
        self._outbox = queue.SimpleQueue()
        for kind in fitting.IDLE_KINDS:
            s = self.stores.get(kind)
            for obj in s.list() if s is not None else ():
                self._outbox.put(("event", "ADDED", _with_kind(kind, obj)))
        with self._lock:
            self._conn, self._proc = parent, proc
        self._started_at = time.monotonic()
        self.starts += 1
        outbox = self._outbox
        threading.Thread(target=self._send, args=(parent, outbox), daemon=True,
                         name="fitgate-decisions-send").start()
        threading.Thread(target=self._read, args=(parent, proc), daemon=True,
                         name="fitgate-decisions-read").start()
        log.info("webhook.decision_process", pid=proc.pid, starts=self.starts)

    def submit(self, obj: Mapping[str, Any], gang_: fitcore.Gang, scope: policy.Scope
               ) -> Verdicts:
        fut: Verdicts = concurrent.futures.Future()
        if self._closed:
            fut.set_exception(Unavailable("the decision process is stopped"))
            return fut
        if self._conn is None:
            if time.monotonic() - self._started_at < self.restart_backoff:
                fut.set_exception(Unavailable("the decision process is restarting"))
                return fut
            self._start()
        ns = fitting.namespace_of(obj)
        template_names, claim_names = fitting.named_claims(obj)
        templates = _named(self.stores.get(kinds.RESOURCE_CLAIM_TEMPLATE), template_names, ns)
        claims = _named(self.stores.get(kinds.RESOURCE_CLAIM), claim_names, ns)
        ident = next(self._ids)
        with self._lock:
            self._pending[ident] = (time.monotonic(), fut, self._conn)
        self._outbox.put(("decide", ident, dict(obj), templates, claims, scope))
        return fut

    def close(self) -> None:
        self._closed = True
        self._outbox.put(None)
        with self._lock:
            proc = self._proc
        if proc is not None:
            proc.join(2)
            if proc.is_alive():
                proc.kill()
                proc.join(2)
        self._fail_all("the decision process is stopped")

    # ------------------------------------------------------------ threads

    def _send(self, conn: multiprocessing.connection.Connection,
              outbox: queue.SimpleQueue[tuple[Any, ...] | None]) -> None:
        """Send the outbox in order, consecutive events in one batch."""
        batch: list[tuple[str, client.Obj]] = []
        try:
            while True:
                item = outbox.get()
                while item is not None and item[0] == "event":
                    batch.append((item[1], item[2]))
                    if len(batch) >= 500:
                        break
                    try:
                        item = outbox.get_nowait()
                    except queue.Empty:
                        item = ("flush",)
                if batch:
                    conn.send(("events", batch))
                    batch = []
                if item is None:
                    conn.send(("stop",))
                    return
                if item[0] == "decide":
                    conn.send(item)
        except (OSError, ValueError, EOFError):
            return  # the reader sees the child go

    def _read(self, conn: multiprocessing.connection.Connection, proc: Any) -> None:
        """Resolve answers; kill a child stuck longer than `timeout` on one question."""
        while True:
            try:
                ready = conn.poll(1.0)
                if not ready:
                    with self._lock:
                        oldest = min((t for t, _, c in self._pending.values() if c is conn),
                                     default=None)
                    if oldest is not None and time.monotonic() - oldest > self.timeout:
                        log.warning("webhook.decision_process_stuck", pid=proc.pid,
                                    timeout=self.timeout)
                        proc.kill()
                    continue
                _, ident, answer, error = conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                entry = self._pending.pop(ident, None)
            if entry is None:
                continue
            if error is not None:
                entry[1].set_exception(RuntimeError(error))
            else:
                refuse, violation, messages = answer
                entry[1].set_result(fitting.Verdict(refuse, violation, tuple(messages)))
        with self._lock:
            if self._conn is conn:
                self._conn = None
        conn.close()
        if not self._closed:
            log.warning("webhook.decision_process_exited", pid=proc.pid,
                        exitcode=proc.exitcode)
        self._fail_all("the decision process exited", conn)

    def _fail_all(self, why: str, conn: Any = None) -> None:
        """Fail the questions in flight (to the child of `conn`; None: all)."""
        with self._lock:
            failed = [i for i, (_, _, c) in self._pending.items() if conn is None or c is conn]
            futs = [self._pending.pop(i)[1] for i in failed]
        for fut in futs:
            if not fut.done():
                fut.set_exception(Unavailable(why))


def _with_kind(kind: kinds.Kind, obj: client.Obj) -> client.Obj:
    """The engine dispatches on `kind`; list items may lack it."""
    return obj if "kind" in obj else {**obj, "apiVersion": kind.api_version,
                                      "kind": kind.kind}


def _named(s: store.Store | None, names: set[str], namespace: str) -> list[client.Obj]:
    if s is None:
        return []
    return [o for o in (s.get(n, namespace) for n in sorted(names)) if o is not None]
