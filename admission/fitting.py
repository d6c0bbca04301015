"""The engine as the pre-quota path sees it: plan a gang on the cluster the stores hold.

`Engine` is the surface the webhook and the gate controller need: `plan(gang, shapes=,
node_filter=)`, the same call as `admission/inventory.ClusterInventory` (the controller's
incremental inventory) offers. `StoreEngine` implements it directly over watch-backed
stores, for the gate and webhook until they are wired to the shared inventory, for tests
and for `bench/webhook.py`:

- it mirrors the stores' objects under a lock (store subscribers run on the event loop;
  a plan runs in a worker thread so the loop keeps answering),
- parses each object once (by identity: a watch replaces an object that changes),
- keeps one `gang.Snapshot` per set of allowed nodes, rebuilt from the previous one when
  something changed, so a change costs a pass over the nodes, not a re-read of every
  device.

Objects that do not parse are left out of the inventory and kept in `problems` (the
service keeps serving everything else).

`gang_of(obj, stores)` reads a Job or Workload as a gang with the ResourceClaimTemplates
and ResourceClaims of its namespace.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from admission import policy
from admission.kube import client, kinds, store
from fitcore import errors, gang, kube, model, plan, shapes, values, workload

NodeFilter = Callable[[model.Node], bool]

#: What the engine reads, by kind.
INVENTORY_KINDS = (kinds.NODE, kinds.RESOURCE_SLICE, kinds.DEVICE_CLASS, kinds.RESOURCE_CLAIM,
                   kinds.POD, kinds.NODE_SHAPE)
#: What an idle cluster is made of: the nodes, their devices and the shapes (no usage).
IDLE_KINDS = (kinds.NODE, kinds.RESOURCE_SLICE, kinds.DEVICE_CLASS, kinds.NODE_SHAPE)


def _view(kind: kinds.Kind, obj: client.Obj | None) -> Any:
    """What of an object a fit decision reads (a Node's heartbeat changes none of it)."""
    if obj is None:
        return None
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    spec = obj.get("spec")
    if kind == kinds.NODE:
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        taints = spec.get("taints") if isinstance(spec, Mapping) else None
        unschedulable = spec.get("unschedulable") if isinstance(spec, Mapping) else None
        return (meta.get("labels"), taints, unschedulable, status.get("allocatable"))
    if kind in (kinds.POD, kinds.RESOURCE_CLAIM):
        return (spec, obj.get("status"))  # where a pod runs, what a claim holds
    return (meta.get("labels"), spec)


def relevant(kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None) -> bool:
    """Whether a store event can change a fit decision."""
    if event.type != "MODIFIED" or before is None:
        return True
    return bool(_view(kind, event.object) != _view(kind, before))


class Engine(Protocol):
    def plan(self, gang_: gang.Gang, shapes: Collection[str] | None = None,
             node_filter: NodeFilter | None = None) -> plan.PlanResult:
        """Fit the gang on the nodes `node_filter` allows, or plan new nodes of the named
        shapes (None: every shape)."""


class Unreadable(Exception):
    """A Job or Workload the engine cannot read (the reasons name the fields)."""


def gang_of(obj: Mapping[str, Any], stores: Mapping[kinds.Kind, store.Store]) -> gang.Gang:
    """The gang of a batch/v1 Job or a Kueue Workload; raises Unreadable (with every field
    problem) for anything else or anything malformed."""
    kind = obj.get("kind")
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    ns = namespace if isinstance(namespace, str) and namespace else "default"
    refs = workload.References()
    rct = stores.get(kinds.RESOURCE_CLAIM_TEMPLATE)
    if rct is not None:
        refs.templates = {(ns, str(o["metadata"]["name"])): (o, None) for o in rct.list(ns)}
    rc = stores.get(kinds.RESOURCE_CLAIM)
    if rc is not None:
        refs.claims = {(ns, str(o["metadata"]["name"])): (o, None) for o in rc.list(ns)}
    try:
        if kind == "Workload":
            return workload.workload(obj, refs)
        if kind == "Job":
            return workload.job(obj, refs)
    except errors.InputError as exc:
        raise Unreadable(str(exc)) from exc
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        # The readers validate field by field; this is the net under them for shapes of
        # input nobody foresaw, so a hostile object is refused, never a crash.
        raise Unreadable(f"{kind or 'object'}: cannot be read: {exc!r}") from exc
    raise Unreadable(f"kind {kind!r} has no gang reader (Job and Workload have)")


class StoreEngine:
    """`Engine` over stores; see the module docstring.

    `idle`: plan on the cluster as if nothing ran on it (no allocated ResourceClaims, no
    bound Pods): the question "could this gang ever fit, as configured?", which the
    webhook and the gate ask before quota. Busy nodes are the check's business (it plans
    on the real usage once Kueue has reserved quota), and an idle cluster changes only
    when nodes, devices or shapes do, not with every pod."""

    def __init__(self, stores: Mapping[kinds.Kind, store.Store], *, idle: bool = False
                 ) -> None:
        self.idle = idle
        self._lock = threading.Lock()
        self._objects: dict[str, dict[store.Key, client.Obj]] = {
            k.kind: {} for k in INVENTORY_KINDS}
        self._version = 0
        for kind in IDLE_KINDS if idle else INVENTORY_KINDS:
            s = stores.get(kind)
            self._objects[kind.kind] = {store.key_of(o): o for o in s.list()} if s else {}
            if s is not None:
                s.subscribe(self._on_event(kind))
        # id(object) -> (object, parsed or None, why it could not be read or None)
        self._parsed: dict[int, tuple[client.Obj, Any, str | None]] = {}
        self._built_version = -1
        self._nodes: list[model.Node] = []
        self._inventory = model.Inventory()
        self._used: dict[str, dict[str, values.Quantity]] = {}
        self._shapes: dict[str, shapes.NodeShape] = {}
        self._snapshots: dict[frozenset[str] | None, gang.Snapshot] = {}
        self._previous: dict[frozenset[str] | None, gang.Snapshot] = {}
        self._plan_lock = threading.Lock()
        self.problems: list[str] = []

    @property
    def version(self) -> int:
        """Changes whenever an object the engine reads changes."""
        return self._version

    def _on_event(self, kind: kinds.Kind) -> store.Subscriber:
        def on_event(event: client.WatchEvent, before: client.Obj | None) -> None:
            if not relevant(kind, event, before):
                return  # a heartbeat: the object kept is as good for deciding
            with self._lock:
                objs = self._objects[kind.kind]
                if event.type == "DELETED":
                    objs.pop(store.key_of(event.object), None)
                else:
                    objs[store.key_of(event.object)] = event.object
                self._version += 1
        return on_event

    def _parse(self, obj: client.Obj, fn: Callable[[client.Obj], Any]) -> Any:
        have = self._parsed.get(id(obj))
        if have is None or have[0] is not obj:
            try:
                have = (obj, fn(obj), None)
            except errors.InputError as exc:
                have = (obj, None, str(exc))
            self._parsed[id(obj)] = have
        if have[2] is not None:
            self.problems.append(have[2])
        return have[1]

    def _rebuild(self) -> None:
        with self._lock:
            if self._built_version == self._version:
                return
            version = self._version
            objs = {k: list(v.values()) for k, v in self._objects.items()}
        self.problems = []
        live: set[int] = set()
        for items in objs.values():
            live.update(id(o) for o in items)
        self._parsed = {i: p for i, p in self._parsed.items() if i in live}
        self._nodes = [n for o in objs["Node"] if (n := self._parse(o, kube.node))]
        slices = [s for o in objs["ResourceSlice"]
                  if (s := self._parse(o, kube.resource_slice))]
        classes = {c.name: c for o in objs["DeviceClass"]
                   if (c := self._parse(o, kube.device_class))}
        results: list[model.AllocatedDevice] = []
        for o in objs["ResourceClaim"]:
            devices = self._parse(o, kube.allocated_devices)
            results.extend(devices or ())
        self._inventory = model.Inventory(tuple(slices), classes,
                                          model.AllocatedState.from_results(results))
        used: dict[str, dict[str, values.Quantity]] = {}
        for o in objs["Pod"]:
            usage = self._parse(o, workload.pod_usage)
            if usage is None:
                continue
            node_name, requests = usage
            into = used.setdefault(node_name, {})
            for k, q in requests.items():
                into[k] = into[k] + q if k in into else q
        self._used = used
        self._shapes = {s.name: s for o in objs["NodeShape"]
                        if (s := self._parse(o, workload.node_shape))}
        previous = self._snapshots
        self._snapshots = {}
        self._previous = previous
        self._built_version = version

    def _snapshot(self, node_filter: NodeFilter | None) -> gang.Snapshot:
        if node_filter is None:
            key: frozenset[str] | None = None
            nodes = self._nodes
        else:
            nodes = [n for n in self._nodes if node_filter(n)]
            key = frozenset(n.name for n in nodes)
        have = self._snapshots.get(key)
        if have is None:
            prev = self._snapshots.get(None) or self._previous.get(key) or \
                self._previous.get(None)
            have = self._snapshots[key] = gang.Snapshot(nodes, self._inventory, self._used,
                                                        previous=prev)
            if len(self._snapshots) > 64:  # one per policy scope in use; bounded
                self._snapshots.pop(next(iter(self._snapshots)))
        return have

    def plan(self, gang_: gang.Gang, shapes: Collection[str] | None = None,
             node_filter: NodeFilter | None = None) -> plan.PlanResult:
        with self._plan_lock:  # one decision at a time: snapshots are shared state
            self._rebuild()
            snap = self._snapshot(node_filter)
            offered = [s for name, s in sorted(self._shapes.items())
                       if shapes is None or name in shapes]
            return plan.plan(gang_, snap, offered)


# ----------------------------------------------------------------------- verdicts


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the validating hook concluded about a gang."""

    refuse: bool  # the gang can never fit as configured
    violation: bool  # ... but would fit without its FitPolicy
    messages: tuple[str, ...] = ()
    result: plan.PlanResult | None = None


def decide(engine: Engine, gang_: gang.Gang, scope: policy.Scope) -> Verdict:
    """Whether a gang can never fit as configured (runs in the engine's thread)."""
    result = engine.plan(gang_, shapes=scope.shapes, node_filter=scope.node_filter)
    if result.verdict != "unsatisfiable":
        return Verdict(False, False, result=result)
    if scope.restricted:
        free = engine.plan(gang_)
        if free.verdict in ("fits", "needs-capacity"):
            return Verdict(True, True, (f"allowed to it: {scope.description}",
                                        *reasons(result)), result)
    if result.category == "configuration":
        return Verdict(True, False, reasons(result), result)
    return Verdict(False, False, result=result)


def reasons(result: plan.PlanResult) -> tuple[str, ...]:
    """fitcore's reasons, the ones naming a claim and what a node offers first."""
    specific = [r for r in result.reasons if "ResourceClaim" in r or "offers" in r]
    return (*specific, *(r for r in result.reasons if r not in specific))


if TYPE_CHECKING:  # StoreEngine implements Engine (checked by mypy)
    _: Engine = StoreEngine({})
