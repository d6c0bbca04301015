"""The fitcore inventory, kept current from the watch caches, and decisions off the loop.

`ClusterInventory` subscribes to the Node, Pod, ResourceSlice, ResourceClaim, DeviceClass
and NodeShape stores and feeds their events to one `fitcore.inventory.Inventory`, the
engine's incremental inventory (parsed objects by name, per-node index entries recomputed
for changed nodes only, kept work per gang content); it also keeps the
ResourceClaimTemplates and ResourceClaims that gangs' pod templates name
(`references()`), and the parsed NodeShapes (`shapes()`).

Threads. The engine's inventory is not thread-safe, and a decision on a large cluster can
take seconds, which must not stall the event loop (health checks, Lease renewals,
watches). So:

- On the loop's thread, a store event is only queued (coalesced per object: the latest
  event of an object replaces an earlier one still waiting) — a few microseconds. A
  MODIFIED Node or Pod that changed none of the fields fitcore reads (a heartbeat, a
  status update) is not even queued.
- One decision thread owns the engine's inventory: it applies the queued events (as soon
  as any are queued, and before every decision) and runs the decisions, one at a time.
- The `*_async` forms run a decision there and answer `undecided` (with the reason) past
  `timeout` seconds; the synchronous forms (tests, tools) run on the caller's thread
  under the same lock.
- A decision past its deadline cannot be stopped from outside (a thread cannot be
  killed), and it holds the engine: every later decision would queue behind it. So the
  overrunning decision is abandoned with its engine and its thread, which finish on
  their own and are then dropped, and decisions go on at once on a fresh engine and
  thread rebuilt from the stores (`_abandon`; counted in
  `fitgate_inventory_abandoned_decisions_total`, at most `MAX_ABANDONED` still running).
  The Workload whose decision overran is answered `undecided` and retried with Kueue's
  backoff; the others are not held up. The GIL: fitcore's CEL runtime (cel-cpp) holds it
  within one evaluation, which its comprehension iteration budget bounds (a few ms, see
  docs), and Python code yields it every few ms, so the event loop keeps running beside
  an abandoned decision.

Bad objects: `Inventory.apply` refuses an object that does not parse (and keeps what it
had for it); `problems()` names each such object and why. Every other object keeps
being served. Decisions are bounded by fitcore's work budget (a verdict `undecided`,
never an unbounded search).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import prometheus_client

import fitcore
from admission.kube import client, kinds, store
from admission.runtime import handoff

NodeFilter = Callable[[fitcore.Node], bool]
StoreOf = Callable[[kinds.Kind], store.Store]
Key = tuple[str, str]
# (The methods `plan` and `shapes` hide those modules' names inside the class.)
PlanResult = fitcore.PlanResult
VerifyResult = fitcore.VerifyResult
Plan = fitcore.Plan
NodeShape = fitcore.NodeShape

#: The kinds the engine's inventory reads.
ENGINE_KINDS = (kinds.DEVICE_CLASS, kinds.NODE, kinds.RESOURCE_SLICE, kinds.RESOURCE_CLAIM,
                kinds.POD, kinds.NODE_SHAPE)
#: Every kind whose store ClusterInventory subscribes to.
WATCHED = (*ENGINE_KINDS, kinds.RESOURCE_CLAIM_TEMPLATE)
#: What an idle cluster is made of: nodes, their devices, classes and shapes (no usage).
IDLE_KINDS = (kinds.DEVICE_CLASS, kinds.NODE, kinds.RESOURCE_SLICE, kinds.NODE_SHAPE)

EVENT_SECONDS = prometheus_client.Histogram(
    "fitgate_inventory_event_seconds",
    "Time to take one cache event on the event loop (queue it for the engine)",
    buckets=(2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 1e-3, 1e-2))
APPLY_SECONDS = prometheus_client.Histogram(
    "fitgate_inventory_apply_seconds",
    "Time to apply one batch of queued events to the engine's inventory",
    buckets=(1e-4, 1e-3, 1e-2, 0.1, 1, 10))
ABANDONED = prometheus_client.Counter(
    "fitgate_inventory_abandoned_decisions_total",
    "Decisions past their deadline left to finish on their own engine and thread")
#: Abandoned decision threads still running at most; past it, decisions wait for them.
MAX_ABANDONED = 8
# The queue's kind for a promised gang's placements (`ClusterInventory.assume`).
_PROMISE = "~promise"

#: Nodes and ResourceSlices parsed once for every engine of the process (the live one, the
#: gate's idle one, a fresh one after an abandoned decision): they hold the same objects.
PARSED = fitcore.Parsed()

DECISION_SECONDS = prometheus_client.Histogram(
    "fitgate_inventory_decision_seconds", "Time of one fit, plan or verify (queued events "
    "applied first included)", ["decision"], buckets=(1e-3, 1e-2, 0.1, 0.5, 1, 5, 30))


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _label(kind: str, key: Key) -> str:
    return f"{kind} {key[0]}/{key[1]}" if key[0] else f"{kind} {key[1]}"


def _node_fields(o: client.Obj) -> tuple[Any, ...]:
    """What fitcore reads of a Node (heartbeats change none of it)."""
    meta, status = o.get("metadata") or {}, o.get("status") or {}
    return (meta.get("labels"), o.get("spec"), status.get("allocatable"))


def _pod_fields(o: client.Obj) -> tuple[Any, ...]:
    """What fitcore reads of a Pod (its spec: node and requests; whether it finished)."""
    return (o.get("spec"), (o.get("status") or {}).get("phase"))


_UNCHANGED: dict[str, Callable[[client.Obj], tuple[Any, ...]]] = {
    kinds.NODE.kind: _node_fields, kinds.POD.kind: _pod_fields}


@dataclasses.dataclass(eq=False)
class _Lane:
    """One engine with its lock and the events queued for it. A decision thread works on
    the lane it started on; `ClusterInventory._abandon` replaces the whole lane, so an
    abandoned decision never touches the fresh engine or its queue."""

    engine: fitcore.Inventory
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    queue: collections.OrderedDict[tuple[str, Key], tuple[str, client.Obj]] = \
        dataclasses.field(default_factory=collections.OrderedDict)


class ClusterInventory:
    """See the module docstring. `store_of`: the cache's stores (`Informers.store`)."""

    def __init__(self, store_of: StoreOf, *, timeout: float = 30.0,
                 kept_problems: int | None = None, background: bool = True,
                 idle: bool = False, kube_version: str = fitcore.DEFAULT_KUBE_VERSION,
                 parsed: fitcore.Parsed | None = PARSED) -> None:
        """`background`: apply queued events on the decision thread as they come (the
        service); False leaves them queued until the next decision or `sync` (tests and
        benchmarks that time the engine's work on their own thread).

        `idle`: read only what an idle cluster is made of (`IDLE_KINDS`: no allocated
        ResourceClaims, no bound Pods), to ask "could this gang ever fit, as configured?"
        (the webhook and the gate, before quota).

        `parsed`: where Nodes and ResourceSlices parsed by any engine given the same one
        are found again (`fitcore.Parsed`; the process's `PARSED` unless told, None: each
        engine parses its own)."""
        self.timeout = timeout
        self._background = background
        self.generation = 0  # bumped on every event queued for the engine
        self._kept_problems = kept_problems
        self._kube_version = kube_version
        self._parsed = parsed
        self._lane = _Lane(self._new_engine())
        self._executor = self._new_executor()
        self._abandoned: list[concurrent.futures.Future[None]] = []  # overran, still running
        self._queue_lock = threading.Lock()
        self._drain_scheduled = False
        self._problems: dict[str, str] = {}
        self._problems_lock = threading.Lock()
        self._refs = fitcore.References()
        self._shapes: dict[str, NodeShape] = {}
        self._node_names: set[str] = set()
        self._store_of = store_of
        # Promised gangs' placements (`assume`), kept to feed a fresh engine.
        self._promised: dict[str, tuple[fitcore.Gang, tuple[fitcore.Placement, ...]]] = {}
        self._kinds = (*IDLE_KINDS, kinds.RESOURCE_CLAIM_TEMPLATE) if idle else WATCHED
        for kind in self._kinds:
            s = store_of(kind)
            for obj in s.list():
                self._on_event(kind, client.WatchEvent("ADDED", obj), None)
            s.subscribe(self._subscriber(kind))

    def _new_engine(self) -> fitcore.Inventory:
        return fitcore.Inventory(kept_problems=self._kept_problems,
                                 kube_version=self._kube_version, parsed=self._parsed)

    def _new_executor(self) -> concurrent.futures.ThreadPoolExecutor:
        executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="fitgate-decide")
        # An inventory dropped without close() (tests) does not leave its thread behind.
        weakref.finalize(self, executor.shutdown, wait=False)
        return executor

    # ------------------------------------------------------------ loop side

    def _subscriber(self, kind: kinds.Kind) -> store.Subscriber:
        def on_event(event: client.WatchEvent, before: client.Obj | None) -> None:
            started = time.perf_counter()
            self._on_event(kind, event, before)
            EVENT_SECONDS.observe(time.perf_counter() - started)
        return on_event

    def _on_event(self, kind: kinds.Kind, event: client.WatchEvent,
                  before: client.Obj | None) -> None:
        obj, key = event.object, _key(event.object)
        if kind == kinds.RESOURCE_CLAIM_TEMPLATE:
            self._ref(self._refs.templates, event, key)
            return
        if kind == kinds.RESOURCE_CLAIM:
            self._ref(self._refs.claims, event, key)
        elif kind == kinds.NODE_SHAPE:
            self._on_shape(event, key)
        elif kind == kinds.NODE:
            (self._node_names.discard if event.type == "DELETED"
             else self._node_names.add)(key[1])
        same = _UNCHANGED.get(kind.kind)
        if (same is not None and event.type == "MODIFIED" and before is not None
                and same(obj) == same(before)):
            return
        if "kind" not in obj:  # the engine dispatches on it; list items may lack it
            obj = {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
        with self._queue_lock:
            qk = (kind.kind, key)
            queue = self._lane.queue
            queue.pop(qk, None)  # the latest event of an object is what counts
            queue[qk] = (event.type, obj)
        self.generation += 1
        if self._background and not self._drain_scheduled:
            self._drain_scheduled = True
            try:
                self._executor.submit(self._drain_in_background)
            except RuntimeError:  # closed (shutting down): the event stays queued
                self._drain_scheduled = False

    def _on_shape(self, event: client.WatchEvent, key: Key) -> None:
        if event.type == "DELETED":
            self._shapes.pop(key[1], None)
            return
        try:
            self._shapes[key[1]] = fitcore.node_shape(event.object)
        except fitcore.InputError:
            self._shapes.pop(key[1], None)  # the engine reports it in problems()

    @staticmethod
    def _ref(into: dict[Key, fitcore.Document], event: client.WatchEvent, key: Key) -> None:
        ref_key = (key[0] or "default", key[1])  # as fitcore.workload keys references
        if event.type == "DELETED":
            into.pop(ref_key, None)
        else:
            into[ref_key] = (event.object, None)

    # ------------------------------------------------------------ engine side

    @property
    def _lock(self) -> threading.Lock:
        """The current engine's lock (applying events, deciding)."""
        return self._lane.lock

    @property
    def _queue(self) -> collections.OrderedDict[tuple[str, Key], tuple[str, client.Obj]]:
        return self._lane.queue

    def _drain_in_background(self) -> None:
        lane = self._lane
        with lane.lock:
            if lane is self._lane:
                self._drain_scheduled = False
            self._drain(lane)

    def _drain(self, lane: _Lane) -> None:
        """Apply every event queued for `lane` to its engine (holding its lock)."""
        with self._queue_lock:
            batch = list(lane.queue.items())
            lane.queue.clear()
        if not batch:
            return
        started = time.perf_counter()
        for (kind, key), (etype, obj) in batch:
            if kind == _PROMISE:
                promised: tuple[fitcore.Gang, tuple[fitcore.Placement, ...]] | None = obj  # type: ignore[assignment]
                if promised is None:
                    lane.engine.forget(key[0])
                else:
                    lane.engine.assume(key[0], *promised)
                continue
            label = _label(kind, key)
            try:
                lane.engine.apply(etype, obj)  # type: ignore[arg-type]
            except fitcore.InputError as exc:
                with self._problems_lock:
                    self._problems[label] = str(exc)
                continue
            if self._problems:
                with self._problems_lock:
                    self._problems.pop(label, None)
        APPLY_SECONDS.observe(time.perf_counter() - started)

    # ------------------------------------------------------------ promises

    def assume(self, owner: str, gang_: fitcore.Gang,
               placements: Sequence[fitcore.Placement]) -> None:
        """Count a promised gang's placements as in use until `forget`
        (`fitcore.Inventory.assume`; `owner`: the gang's uid). Applied in order with the
        store events, before the next decision; kept across a fresh engine."""
        self._promised[owner] = (gang_, tuple(placements))
        self._queue_promise(owner)

    def forget(self, owner: str, nodes: Collection[str] | None = None) -> None:
        """Stop counting what `owner` was assumed to hold on `nodes` (None: everywhere)."""
        kept = self._promised.get(owner)
        if kept is None:
            return
        left = () if nodes is None else tuple(p for p in kept[1] if p.node not in nodes)
        if left:
            self._promised[owner] = (kept[0], left)
        else:
            del self._promised[owner]
        self._queue_promise(owner)

    def assumed(self) -> dict[str, frozenset[str]]:
        """The promised gangs counted as in use (`assume`), and on which nodes."""
        return {owner: frozenset(p.node for p in placements)
                for owner, (_, placements) in self._promised.items()}

    def _queue_promise(self, owner: str) -> None:
        """Queue the engine's update for `owner`'s promise (the latest replaces one still
        waiting, as for an object's events)."""
        with self._queue_lock:
            qk = (_PROMISE, (owner, ""))
            self._lane.queue.pop(qk, None)
            self._lane.queue[qk] = ("", self._promised.get(owner))  # type: ignore[assignment]
        self.generation += 1
        if self._background and not self._drain_scheduled:
            self._drain_scheduled = True
            try:
                self._executor.submit(self._drain_in_background)
            except RuntimeError:
                self._drain_scheduled = False

    def _decide(self, name: str, fn: Callable[[fitcore.Inventory], Any]) -> Any:
        lane = self._lane
        with lane.lock:
            started = time.perf_counter()
            self._drain(lane)
            try:
                return fn(lane.engine)
            finally:
                DECISION_SECONDS.labels(name).observe(time.perf_counter() - started)

    # ------------------------------------------------------------ decisions

    def fit(self, gang_: fitcore.Gang, *, node_filter: NodeFilter | None = None,
            held: Collection[str] = ()) -> PlanResult:
        """Does the gang fit the existing nodes now (no new nodes considered)? `held`:
        nodes held for other workloads (left out, named apart in the reasons)."""
        result: PlanResult = self._decide(
            "fit", lambda engine: engine.fit(gang_, node_filter=node_filter, held=held))
        return result

    def plan(self, gang_: fitcore.Gang, *, shapes: Iterable[str] | None = None,
             node_filter: NodeFilter | None = None, held: Collection[str] = ()
             ) -> PlanResult:
        """Fit on existing nodes, or the cheapest new nodes of the allowed NodeShapes
        (`shapes`: names; None = all) that make the gang fit."""
        allowed = None if shapes is None else sorted(set(shapes))
        result: PlanResult = self._decide(
            "plan", lambda engine: engine.plan(gang_, shapes=allowed, node_filter=node_filter,
                                              held=held))
        return result

    def verify(self, gang_: fitcore.Gang, plan_: Plan, *,
               node_filter: NodeFilter | None = None, held: Collection[str] = ()
               ) -> VerifyResult:
        """After provisioning: does the gang fit the real inventory, and how do the new
        nodes differ from what their shapes promised?"""
        result: VerifyResult = self._decide(
            "verify", lambda engine: engine.verify(gang_, plan_, node_filter=node_filter,
                                                  held=held))
        return result

    async def _off_loop(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        # The result comes back through the loop's mailbox (`handoff`: results that
        # finish together share one wake-up of the loop).
        result, future = handoff.submit(self._executor, lambda: fn(*args, **kw))
        try:
            return await asyncio.wait_for(result, self.timeout)
        except TimeoutError:
            # Not started (queued behind another decision): cancelled. Started: it
            # overran and holds the engine; leave it and go on with a fresh one.
            if not future.cancel() and not future.done():
                self._abandon(future)
            raise

    def _abandon(self, running: concurrent.futures.Future[None]) -> None:
        """Leave the decision `running` (past its deadline) to finish on the current
        engine and thread, and decide from now on with a fresh engine and thread, fed
        every object the stores hold (module docstring)."""
        self._abandoned = [f for f in self._abandoned if not f.done()]
        if len(self._abandoned) >= MAX_ABANDONED:
            return  # decisions wait for the engine the overrunning one holds
        self._abandoned.append(running)
        ABANDONED.inc()
        old = self._executor
        self._executor = self._new_executor()
        with self._queue_lock:
            self._lane = _Lane(self._new_engine())
        self._drain_scheduled = False
        for kind in self._kinds:
            for obj in self._store_of(kind).list():
                self._on_event(kind, client.WatchEvent("ADDED", obj), None)
        for owner in list(self._promised):
            self._queue_promise(owner)
        old.shutdown(wait=False, cancel_futures=True)

    def _too_long(self) -> str:
        return (f"the decision took longer than {self.timeout:g} s (fitgate's "
                "decision_timeout); it is tried again later")

    async def fit_async(self, gang_: fitcore.Gang, *, node_filter: NodeFilter | None = None,
                        held: Collection[str] = ()) -> PlanResult:
        """`fit` on the decision thread; past `timeout` seconds, `undecided`."""
        try:
            result: PlanResult = await self._off_loop(self.fit, gang_,
                                                      node_filter=node_filter, held=held)
        except TimeoutError:
            return fitcore.PlanResult("undecided", reasons=(self._too_long(),))
        return result

    async def plan_async(self, gang_: fitcore.Gang, *, shapes: Iterable[str] | None = None,
                         node_filter: NodeFilter | None = None, held: Collection[str] = ()
                         ) -> PlanResult:
        """`plan` on the decision thread; past `timeout` seconds, `undecided`."""
        try:
            result: PlanResult = await self._off_loop(self.plan, gang_, shapes=shapes,
                                                      node_filter=node_filter, held=held)
        except TimeoutError:
            return fitcore.PlanResult("undecided", reasons=(self._too_long(),))
        return result

    async def verify_async(self, gang_: fitcore.Gang, plan_: Plan, *,
                           node_filter: NodeFilter | None = None, held: Collection[str] = ()
                           ) -> VerifyResult:
        """`verify` on the decision thread; past `timeout` seconds, `undecided`."""
        try:
            result: VerifyResult = await self._off_loop(self.verify, gang_, plan_,
                                                        node_filter=node_filter, held=held)
        except TimeoutError:
            return fitcore.VerifyResult("undecided", reasons=(self._too_long(),))
        return result

    # ------------------------------------------------------------ reading

    def sync(self) -> None:
        """Apply every queued event now (waits for a decision in progress): afterwards
        `problems()` and `stats()` describe everything the stores held."""
        lane = self._lane
        with lane.lock:
            self._drain(lane)

    def shapes(self) -> list[NodeShape]:
        """The NodeShapes that parse, by name."""
        return [self._shapes[n] for n in sorted(self._shapes)]

    def problems(self) -> dict[str, str]:
        """Objects the engine refused ("Kind namespace/name" → why), as of the events
        applied so far (`sync` first to include those still queued)."""
        with self._problems_lock:
            return dict(self._problems)

    def references(self) -> fitcore.References:
        """ResourceClaimTemplates and ResourceClaims a gang's pod templates may name, for
        `fitcore.workload.workload(obj, refs)` (kept current; do not modify)."""
        return self._refs

    def nodes(self) -> int:
        return len(self._node_names)

    def stats(self) -> dict[str, int]:
        """The engine's sizes (objects, kept work), after applying what is queued."""
        lane = self._lane
        with lane.lock:
            self._drain(lane)
            return lane.engine.stats()

    def close(self) -> None:
        """Stop the decision thread (a decision still running finishes on its own)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
