"""The fitcore inventory, kept current from the watch caches, incrementally.

`ClusterInventory` subscribes to the Node, Pod, ResourceSlice, ResourceClaim, DeviceClass
and NodeShape stores (and ResourceClaimTemplates, for the references a gang's pod
templates make). On each event it parses only the object that changed and keeps the
parsed piece per object:

- Node → `model.Node`; ResourceSlice → `model.ResourceSlice`; DeviceClass →
  `model.DeviceClass`; ResourceClaim → its allocated devices; Pod → (node, requests) of a
  bound, unfinished pod, summed per node; NodeShape → `shapes.NodeShape`.
- When the parsed piece equals the one kept (a Node's heartbeat, a Pod's status update),
  the kept object stays (same identity) and nothing is marked changed.
- An object that cannot be parsed is dropped from the inventory and listed by
  `problems()` with why; every other object keeps being served.

A decision (`fit`, `plan`, `verify`) rebuilds the `gang.Snapshot` only when something
changed since the last one, passing the previous snapshot so that nodes whose objects are
unchanged (by identity) keep their index entries: a rebuild is a pass over the nodes, never
a re-list or re-parse of the world. A `node_filter` (FitPolicy: which nodes a gang may
use) builds a filtered snapshot the same way, reusing the full snapshot's entries.

Decisions run fitcore with its work budget (`budget`, allocator steps): past it, the
verdict is `undecided` with a reason, never an unbounded search. They run on the calling
thread (fitcore's index structures are not shared across threads).

When fitcore gains its own incremental `Inventory` (branch fitcore-scale), this class
delegates to it behind the same methods.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import prometheus_client

from admission.kube import client, kinds, store
from fitcore import api, errors, gang, kube, model, plan, shapes, values, workload

NodeFilter = Callable[[model.Node], bool]
# (The methods `plan` and `shapes` hide those modules' names inside the class.)
PlanResult = plan.PlanResult
VerifyResult = plan.VerifyResult
Plan = plan.Plan
NodeShape = shapes.NodeShape
StoreOf = Callable[[kinds.Kind], store.Store]
Key = tuple[str, str]

#: The kinds whose events change the inventory.
WATCHED = (kinds.DEVICE_CLASS, kinds.NODE, kinds.RESOURCE_SLICE, kinds.RESOURCE_CLAIM,
           kinds.POD, kinds.NODE_SHAPE, kinds.RESOURCE_CLAIM_TEMPLATE)

EVENT_SECONDS = prometheus_client.Histogram(
    "fitgate_inventory_event_seconds", "Time to apply one cache event to the inventory",
    buckets=(1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2, 0.1))
SNAPSHOT_SECONDS = prometheus_client.Histogram(
    "fitgate_inventory_snapshot_seconds", "Time to rebuild the placement snapshot")


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _label(kind: kinds.Kind, key: Key) -> str:
    return f"{kind.kind} {key[0]}/{key[1]}" if key[0] else f"{kind.kind} {key[1]}"


@dataclasses.dataclass
class _Dirty:
    slices: bool = True
    claims: bool = True
    snapshot: bool = True


class ClusterInventory:
    """See the module docstring. `store_of`: the cache's stores (`Informers.store`)."""

    def __init__(self, store_of: StoreOf, *, budget: int = api.DEFAULT_BUDGET,
                 engine: api.Engine = "auto") -> None:
        self.budget = budget
        self.engine: api.Engine = engine
        self.generation = 0  # bumped on every change that matters to decisions
        self._nodes: dict[str, model.Node] = {}
        self._slices: dict[str, model.ResourceSlice] = {}
        self._classes: dict[str, model.DeviceClass] = {}
        self._claims: dict[Key, tuple[model.AllocatedDevice, ...]] = {}
        self._pods: dict[Key, tuple[str, dict[str, values.Quantity]]] = {}
        self._used: dict[str, dict[str, values.Quantity]] = {}
        self._shapes: dict[str, NodeShape] = {}
        self._problems: dict[str, str] = {}
        self._refs = workload.References()
        self._dirty = _Dirty()
        self._slice_tuple: tuple[model.ResourceSlice, ...] = ()
        self._allocated = model.AllocatedState()
        self._snapshot: gang.Snapshot | None = None
        handlers: dict[str, Callable[[client.WatchEvent], None]] = {
            kinds.NODE.kind: self._on_node, kinds.RESOURCE_SLICE.kind: self._on_slice,
            kinds.DEVICE_CLASS.kind: self._on_class,
            kinds.RESOURCE_CLAIM.kind: self._on_claim, kinds.POD.kind: self._on_pod,
            kinds.NODE_SHAPE.kind: self._on_shape,
            kinds.RESOURCE_CLAIM_TEMPLATE.kind: self._on_template}
        for kind in WATCHED:
            s = store_of(kind)
            handler = handlers[kind.kind]
            for obj in s.list():
                handler(client.WatchEvent("ADDED", obj))
            s.subscribe(self._timed(handler))

    # ------------------------------------------------------------------ events

    @staticmethod
    def _timed(handler: Callable[[client.WatchEvent], None]) -> store.Subscriber:
        def on_event(event: client.WatchEvent, before: client.Obj | None) -> None:
            started = time.perf_counter()
            handler(event)
            EVENT_SECONDS.observe(time.perf_counter() - started)
        return on_event

    def _parse(self, kind: kinds.Kind, event: client.WatchEvent, fn: Callable[..., Any]
               ) -> tuple[Key, Any, bool]:
        """(key, parsed or None, deleted). A parse error is recorded as a problem and
        treated as if the object were gone."""
        key = _key(event.object)
        label = _label(kind, key)
        if event.type == "DELETED":
            self._problems.pop(label, None)
            return key, None, True
        try:
            parsed = fn(event.object)
        except (errors.InputError, ValueError, TypeError, KeyError, AttributeError) as exc:
            self._problems[label] = str(exc) or type(exc).__name__
            return key, None, True
        self._problems.pop(label, None)
        return key, parsed, False

    def _changed(self) -> None:
        self._dirty.snapshot = True
        self.generation += 1

    def _on_node(self, event: client.WatchEvent) -> None:
        (_, name), parsed, gone = self._parse(kinds.NODE, event, kube.node)
        if self._put(self._nodes, name, parsed, gone):
            self._changed()

    def _on_slice(self, event: client.WatchEvent) -> None:
        (_, name), parsed, gone = self._parse(kinds.RESOURCE_SLICE, event, kube.resource_slice)
        if self._put(self._slices, name, parsed, gone):
            self._dirty.slices = True
            self._changed()

    def _on_class(self, event: client.WatchEvent) -> None:
        (_, name), parsed, gone = self._parse(kinds.DEVICE_CLASS, event, kube.device_class)
        if self._put(self._classes, name, parsed, gone):
            self._dirty.slices = True  # the Inventory object is rebuilt with its classes
            self._changed()

    def _on_claim(self, event: client.WatchEvent) -> None:
        key, parsed, gone = self._parse(kinds.RESOURCE_CLAIM, event,
                                        lambda o: tuple(kube.allocated_devices(o)))
        self._ref(self._refs.claims, event, key)
        if self._put(self._claims, key, parsed or None, gone or not parsed):
            self._dirty.claims = True
            self._changed()

    def _on_template(self, event: client.WatchEvent) -> None:
        self._ref(self._refs.templates, event, _key(event.object))

    def _on_pod(self, event: client.WatchEvent) -> None:
        key, parsed, gone = self._parse(kinds.POD, event, workload.pod_usage)
        old = self._pods.get(key)
        new = None if gone else parsed
        if old == new:
            return
        if old is not None:
            self._add_usage(old[0], old[1], -1)
            del self._pods[key]
        if new is not None:
            self._pods[key] = new
            self._add_usage(new[0], new[1], 1)
        self._changed()

    def _on_shape(self, event: client.WatchEvent) -> None:
        (_, name), parsed, gone = self._parse(kinds.NODE_SHAPE, event, workload.node_shape)
        if self._put(self._shapes, name, parsed, gone):
            self.generation += 1

    @staticmethod
    def _put(into: dict[Any, Any], key: Any, parsed: Any, gone: bool) -> bool:
        """Keep `parsed` under `key` (or drop it); True when that changed anything."""
        if gone:
            return into.pop(key, None) is not None
        if into.get(key) == parsed:
            return False
        into[key] = parsed
        return True

    @staticmethod
    def _ref(into: dict[Key, workload.Document], event: client.WatchEvent, key: Key) -> None:
        # References are keyed as fitcore.workload keys them (namespace "default" if none).
        ref_key = (key[0] or "default", key[1])
        if event.type == "DELETED":
            into.pop(ref_key, None)
        else:
            into[ref_key] = (event.object, None)

    def _add_usage(self, node: str, requests: Mapping[str, values.Quantity], sign: int
                   ) -> None:
        into = self._used.setdefault(node, {})
        for k, q in requests.items():
            have = into.get(k)
            if sign > 0:
                into[k] = have + q if have is not None else q
            else:
                left = (have - q) if have is not None else None
                if left is None or left.value == 0:
                    into.pop(k, None)
                else:
                    into[k] = left
        if not into:
            del self._used[node]

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> gang.Snapshot:
        """The placement snapshot of the current inventory (rebuilt only after changes)."""
        if self._snapshot is not None and not self._dirty.snapshot:
            return self._snapshot
        started = time.perf_counter()
        if self._dirty.slices:
            self._slice_tuple = tuple(self._slices[n] for n in sorted(self._slices))
            self._dirty.slices = False
        if self._dirty.claims:
            results: list[model.AllocatedDevice] = []
            for devices in self._claims.values():
                results.extend(devices)
            self._allocated = model.AllocatedState.from_results(results)
            self._dirty.claims = False
        inv = model.Inventory(self._slice_tuple, dict(self._classes), self._allocated)
        self._snapshot = gang.Snapshot(list(self._nodes.values()), inv, self._used,
                                       previous=self._snapshot)
        self._dirty.snapshot = False
        SNAPSHOT_SECONDS.observe(time.perf_counter() - started)
        return self._snapshot

    def _snapshot_for(self, node_filter: NodeFilter | None) -> gang.Snapshot:
        full = self.snapshot()
        if node_filter is None:
            return full
        kept = [e.node for e in full.entries if node_filter(e.node)]
        return gang.Snapshot(kept, full.inventory, self._used, previous=full)

    # ------------------------------------------------------------------ decisions

    def fit(self, gang_: gang.Gang, *, node_filter: NodeFilter | None = None
            ) -> PlanResult:
        """Does the gang fit the existing nodes now (no new nodes considered)?"""
        return plan.plan(gang_, self._snapshot_for(node_filter), [], engine=self.engine,
                         budget=self.budget)

    def plan(self, gang_: gang.Gang, *, shapes: Iterable[str] | None = None,
             node_filter: NodeFilter | None = None) -> PlanResult:
        """Fit on existing nodes, or the cheapest new nodes of the allowed NodeShapes
        (`shapes`: names; None = all) that make the gang fit."""
        allowed = self.shapes() if shapes is None else [
            self._shapes[n] for n in sorted(set(shapes)) if n in self._shapes]
        return plan.plan(gang_, self._snapshot_for(node_filter), allowed, engine=self.engine,
                         budget=self.budget)

    def verify(self, gang_: gang.Gang, plan_: Plan, *,
               node_filter: NodeFilter | None = None) -> VerifyResult:
        """After provisioning: does the gang fit the real inventory, and how do the new
        nodes differ from what their shapes promised?"""
        return plan.verify(gang_, self._snapshot_for(node_filter), plan_, self.shapes(),
                           engine=self.engine, budget=self.budget)

    # ------------------------------------------------------------------ reading

    def shapes(self) -> list[NodeShape]:
        return [self._shapes[n] for n in sorted(self._shapes)]

    def problems(self) -> dict[str, str]:
        """Objects that could not be read ("Kind namespace/name" → why)."""
        return dict(self._problems)

    def references(self) -> workload.References:
        """ResourceClaimTemplates and ResourceClaims a gang's pod templates may name, for
        `fitcore.workload.workload(obj, refs)` (kept current; do not modify)."""
        return self._refs

    def nodes(self) -> int:
        return len(self._nodes)
