"""The incremental inventory: the engine side of the admission service's watch caches.

The service feeds every watch event of Nodes, ResourceSlices, ResourceClaims, Pods,
DeviceClasses, DeviceTaintRules and NodeShapes into `Inventory.apply`, and asks `fit`,
`plan` and `verify` for a gang against the current view, as the default-feature scheduler
of one Kubernetes version (`kube_version`) would place it: DRA extended resources,
multi-node allocations, pod affinity, anti-affinity and topology spread against the bound
pods, DeviceTaintRules, structured reasons (`details`). This module, `gang` (types),
`plan` (result types), `workload` (`gang_of`), `errors`, `reasons` (codes) and `model`
(types) are all the service may use of fitcore.

What it keeps, and what a change costs:
- Parsed objects by name. `apply` reads (`fitcore.read`: versions, strict fields,
  defaults) and parses first and changes nothing when the object is bad
  (`errors.InputError` names the object and field); DELETED of an unknown object is a
  no-op. Inventories given one `kube.Parsed` parse each Node and ResourceSlice once
  between them (the service's live and idle engines) and hold the same model objects.
  Slices are indexed with the taints of the DeviceTaintRules the version applies;
  a rule that comes, changes or goes re-taints the slices (rules are few). Bound pods
  are kept as pod (anti-)affinity sees them (labels, namespace, anti-affinity). Events
  are applied in O(the object): a node is marked *dirty* when its Node, one of its
  node-local slices, an allocation in one of its pools, or a pod bound to it changes; a
  change to a slice that is not node-local (or a DeviceClass) marks all.
- The index of each node (`gang._NodeEntry`: label group, free resources, its node-local
  slices as one tuple) is recomputed at the next decision for dirty nodes only, from
  what was read of the node when it, its slices or its pods last changed
  (`snapshot.node_parts`, read while the event's objects are at hand; nodes with the
  same labels share one tuple of them). Each
  version of a node is a class of its own there (`Snapshot.entry(own_class=...)`: hashing
  every device of a realistic node buys nothing, its uuids make it unique); the gang's
  projection classes nodes instead. The tuple of a node's slices stays the same object
  while they do not change, so the per-node kept work of `fitcore.cache` (pools,
  selector results, compiled problems) is found again. A decision after a change costs
  a pass over the nodes (their projected classes are kept per node version) plus the
  search.
- Per gang content (up to `GANGS` of them; the content is the pod sets and the
  namespace, not the workload's name, so a queue of Workloads that ask alike share it):
  its first gang (the pod sets decided) and the view it shares. A view is kept per
  projection key (`Projection.key`: what a node's class depends on besides the node;
  gang contents that differ only in pod counts up to `projection.FREE_CAP`, or in
  namespace, have one key), so a queue over a few templates keeps a few views however
  many pod counts it asks for. A view holds the projection (`fitcore.projection`: node
  classes by what the claims can see), each node's projected class (recomputed for
  dirty nodes), the projected snapshot of every node (kept, and patched with every node
  changed since it was last used, however many: each costs its projection, as in a
  rebuild, and the rest a copy of the class tables; rebuilt only when nodes come or go
  or a node's labels change), and per namespace a `gang.Memo` of fills, kept by class,
  the version of the representative and the pod set without its pod counts, so they
  stay valid across changes elsewhere and serve every pod count. A second decision on
  an unchanged inventory calls the allocator no more; after a change only classes that
  are new call it. `views` counts how each decision had its view. Nodes `held` for
  other workloads are left out of the kept view in one pass over its entries
  (`Snapshot.without`), not by projecting every node again; a decision with a policy's
  node filter walks the nodes. The device part of a node's projected class (its pools
  as the gang's claims see them, the costly part) is kept per projection signature
  (`Projection.signature`: what the claims can see and take), so gangs that differ only
  in pod counts or node resources share it. At most `VIEWS` views are kept (least
  recently used out, with the contents that share them).
- A `cache.Store` of its own: kept entries per node (bounded by twice the nodes plus
  4,096), compiled problems (`kept_problems`, default `cache.KEPT_PROBLEMS`), selector
  results by (expression, device content) (bounded by `semantics.Selector`'s limit).
  The class-key interner is cleared, with everything keyed by it, when it passes
  `INTERNED`.

A decision runs with the cyclic garbage collector paused (`_collector_paused`): what
it builds and keeps is acyclic, and collections while it piles up only walk it again.

What a caller must keep stable: nothing. Objects passed to `apply` are parsed and not
kept. Results are immutable. The inventory is not thread-safe: apply and decide from one
task (the service's reconcilers run on one event loop).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import gc
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Literal, TypeVar

from fitcore import (
    assumed,
    cache,
    errors,
    fields,
    gang,
    kube,
    model,
    podaffinity,
    projection,
    snapshot,
    taintrules,
    values,
    versions,
    workload,
)
from fitcore import plan as planning  # `plan` and `shapes` are method names here
from fitcore import read as reading  # `read` is a parameter name here
from fitcore import reasons as codes
from fitcore import shapes as node_shapes

Event = Literal["ADDED", "MODIFIED", "DELETED"]
PoolKey = tuple[str, str]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

#: Gang contents kept (with the views they share), least recently used out.
GANGS = 64
#: Views kept (`_View`: a projection, its copy of every node's index entry, the projected
#: snapshot and its fills; at 10,000 nodes several MiB each), least recently used out
#: with the gang contents that share them (`views["evicted"]` counts them).
VIEWS = 12
#: Interned class keys before the interner and all kept decisions are dropped.
INTERNED = 2_000_000
#: Fills (and derived classes) kept per view and namespace before its memo starts
#: afresh. A fill holds a few pods' device results; multi-pod-set gangs that fail add
#: probes each decision.
FILLS = 50_000

#: The kinds `apply` takes.
KINDS = ("Node", "ResourceSlice", "ResourceClaim", "Pod", "DeviceClass", "DeviceTaintRule",
         "NodeShape")
_EMPTY_STATE = model.AllocatedState()
_NO_POOLS: list[Any] = []  # a node without local pools (one object: compared by identity)
_NO_USE: dict[str, values.Quantity] = {}


@dataclasses.dataclass(slots=True)
class _View:
    """What is kept for the gang contents of one projection key (`Projection.key`: they
    differ at most in pod counts and namespaces, and class every node alike)."""

    projection: projection.Projection
    entries: dict[str, tuple[gang._NodeEntry, gang._NodeEntry]]  # base -> projected
    # Fills by namespace (extended-resource claims are made in the gang's namespace);
    # pod sets are keyed by their content without pod counts (`gang.Memo.keep`).
    memos: dict[str, gang.Memo] = dataclasses.field(default_factory=dict)
    # (snapshot number, inventory version, the projected snapshot)
    view: tuple[int, int, gang.Snapshot] | None = None
    # The last view without held nodes: (the view it was made from, the positions left
    # out, the view without them).
    held: tuple[gang.Snapshot, tuple[int, ...], gang.Snapshot] | None = None

    def memo(self, namespace: str) -> gang.Memo:
        """The fills kept for gangs of this namespace (afresh past `FILLS`)."""
        memo = self.memos.get(namespace)
        if memo is None or len(memo.fills) + len(memo.derived) > FILLS:
            memo = self.memos[namespace] = gang.Memo()
        return memo


@dataclasses.dataclass(slots=True)
class _GangState:
    """What is kept for one gang content."""

    first: gang.Gang  # the first gang seen with this content: the pod sets decided
    shared: _View  # shared with the contents that project alike


class Inventory:
    """Nodes, slices, claims, pods, classes and shapes, kept current event by event."""

    def __init__(self, *, kube_version: str = workload.DEFAULT_KUBE_VERSION,
                 lenient: bool = False, kept_problems: int | None = None,
                 parsed: kube.Parsed | None = None, views: int | None = None) -> None:
        """`kube_version`: the Kubernetes minor version (1.36, 1.37) whose default-feature
        scheduler and allocator the answers follow (ValueError for another). `lenient`:
        unknown fields of applied objects are returned as notes instead of refused.
        `parsed`: Nodes and ResourceSlices parsed once for every inventory given the same
        one (`kube.Parsed`; they then hold the same model objects). `views`: the views
        kept at most (`VIEWS` unless told)."""
        self.kube = versions.parse(kube_version)
        self._lenient = lenient
        self._parsed = parsed
        self._nodes: dict[str, model.Node] = {}
        self._names: list[str] = []  # node names, sorted
        self._slices: dict[str, model.ResourceSlice] = {}  # as published
        # DeviceTaintRules by name; the slices with their taints (as the version applies
        # them) are the ones indexed (`_pool_slices`).
        self._rules: dict[str, taintrules.Rule] = {}
        self._pool_slices: dict[PoolKey, dict[str, model.ResourceSlice]] = {}
        # The same slices as a list per pool, and per node its node-local pools with
        # those lists: made as slices come and go, so that a cold decision does not
        # gather them for every node (`_entry`).
        self._pool_list: dict[PoolKey, list[model.ResourceSlice]] = {}
        self._owner: dict[PoolKey, str] = {}  # node-local pools -> their node
        self._node_pools: dict[str, set[PoolKey]] = {}
        self._node_local: dict[str, list[tuple[PoolKey, list[model.ResourceSlice]]]] = {}
        self._global: set[PoolKey] = set()  # pools that are not node-local
        self._classes: dict[str, model.DeviceClass] = {}
        self._claims: dict[Key, tuple[model.AllocatedDevice, ...]] = {}
        # Per pool, the claims with devices in it: their results in the pool and what
        # those take (`_taken`), made when the claim is applied, so that the first
        # decision finds a pool of one claim's table made (`_allocated_in`).
        self._pool_claims: dict[PoolKey, dict[Key, tuple[tuple[model.AllocatedDevice, ...],
                                                          list[tuple[Any, ...]]]]] = {}
        self._allocated: dict[PoolKey, list[tuple[Any, ...]]] = {}
        self._pods: dict[Key, tuple[str, dict[str, values.Quantity]]] = {}
        # Bound pods as pod (anti-)affinity sees them, also in key order (kept sorted as
        # pods come and go: sorting tens of thousands of keys per decision cost more than
        # the rest of a patched view); decisions see a copy made again after a change.
        self._bound: dict[Key, podaffinity.BoundPod] = {}
        self._bound_keys: list[Key] = []
        self._bound_sorted: list[podaffinity.BoundPod] = []
        self._bound_list: list[podaffinity.BoundPod] | None = None
        self._used: dict[str, dict[str, values.Quantity]] = {}
        # Promised pods counted as in use (`assume`): owner -> node -> their keys.
        self._assumed: dict[str, dict[str, list[Key]]] = {}
        self._shapes: dict[str, node_shapes.NodeShape] = {}
        self._store = cache.Store(size=4096, kept_problems=kept_problems)
        self._keys: dict[Any, int] = {}
        # Device keys per view (what gangs can see of devices), by device identity.
        self._device_keys: dict[projection.DeviceView, projection.DeviceKeys] = {}
        # Nodes' device parts per projection signature (shared by gangs that differ only
        # in pod counts and node resources).
        self._parts: dict[str, projection.NodeDevices] = {}
        self._entries: dict[str, gang._NodeEntry] = {}
        # Per node, what its index entry reads of it (`snapshot.node_parts`), with the
        # Node and the list of its local pools it was made from: made when the node, its
        # slices or its pods change (`_read_node`), while their objects are at hand.
        self._node_parts: dict[str, tuple[model.Node, list[Any], snapshot.NodeParts]] = {}
        # Nodes' labels but the hostname, one tuple per set of labels (a rack's nodes
        # share theirs): a view's index finds each node's label group by it.
        self._label_sets: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
        self._dirty: set[str] = set()
        self._dirty_pools: set[PoolKey] = set()
        self._all_dirty = False
        self._version = 0
        self._snapshot: tuple[int, gang.Snapshot] | None = None
        self._gangs: collections.OrderedDict[str, _GangState] = collections.OrderedDict()
        # Views by projection key, of the contents kept, least recently used first.
        self._shared: collections.OrderedDict[str, _View] = collections.OrderedDict()
        self._max_views = VIEWS if views is None else views
        self._scratch: dict[Any, Any] = {}  # hypothetical nodes of shapes, across snapshots
        self._devices = 0
        self._generation = 0  # numbers each version of a node's index entry
        # Snapshots are numbered; the log says which nodes each one recomputed, so that
        # a gang's view of an earlier one is patched instead of rebuilt. It is cleared
        # when nodes come or go (positions shift).
        self._snap_no = 0
        self._log: collections.deque[tuple[int, frozenset[str]]] = collections.deque(maxlen=256)
        self._index: dict[str, int] = {}  # node name -> position in name order
        self._layout_changed = True
        # How each whole view a decision used was had (kept, patched, rebuilt and why),
        # and the nodes patched in: for benchmarks and the tests of kept work.
        self.views: collections.Counter[str] = collections.Counter()

    # ------------------------------------------------------------------ events

    def apply(self, event: Event, obj: Mapping[str, Any], *, read: bool = True
              ) -> list[str]:
        """Apply one watch event. Kinds: Node, ResourceSlice, ResourceClaim (its
        allocation), Pod (bound to a node and not finished: its requests count, its labels
        and anti-affinity are seen by pod (anti-)affinity), DeviceClass (with its
        extended resource), DeviceTaintRule (applied to the devices it selects when the
        version applies rules), NodeShape. A bad object, an unknown kind or event raises
        errors.InputError and leaves the inventory as it was. Bad includes what would
        break later decisions though the API server keeps it: a DeviceClass or a
        ResourceClaim whose selector does not compile or is over the API server's cost
        limit, a quantity beyond 1e100 (a capacity of 1e10000). An allocated
        ResourceClaim with such a spec is applied all the same (its devices are in use),
        with a note.

        The object is first read as the API server hands it to the scheduler
        (`fitcore.read`: a served apiVersion, v1beta1/v1beta2 converted to v1, strict
        fields, defaults), unless `read` is False because the caller did that already.
        An object with only `generateName` gets a name derived from its content (the same
        for a DELETED event of the same object; watch events always carry a name).
        Returns notes: unknown fields ignored when lenient (see also `notes`)."""
        kind = obj.get("kind") if isinstance(obj, Mapping) else None
        if read and event != "DELETED" and self._parsed is not None \
                and kind in kube.Parsed.KINDS:
            hit = self._parsed.get(str(kind), obj, self._lenient)
            if hit is not None:  # parsed already (by another inventory)
                if kind == "Node":
                    self._node(hit[0].name, hit[0])  # type: ignore[arg-type]
                else:
                    self._slice(hit[0].name, hit[0])  # type: ignore[arg-type]
                self._version += 1
                return list(hit[1])
        if kind not in KINDS:
            raise errors.InputError([errors.FieldError(
                kube.describe(obj, "object"), "kind",
                f"unsupported kind {kind!r}; expected one of {', '.join(KINDS)}")])
        if event not in ("ADDED", "MODIFIED", "DELETED"):
            raise errors.InputError([errors.FieldError(
                kube.describe(obj, str(kind)), "", f"unknown event {event!r}; expected "
                "ADDED, MODIFIED or DELETED")])
        deleted = event == "DELETED"
        notes: list[str] = []
        source = obj  # as given: what the shared parse compares (`Parsed`)
        if read and not deleted:
            got = reading.one(obj, lenient=self._lenient)
            if got.problems:
                raise errors.InputError(got.problems)
            if not got.objects:  # a kind of the same name in another API
                raise errors.InputError([errors.FieldError(
                    kube.describe(obj, str(kind)), "apiVersion",
                    f"{obj.get('apiVersion')!r} is not an API of the kinds fitgate reads")])
            obj = got.objects[0][0]
            notes = got.warnings
        elif read and not _named(obj):
            obj = reading.normalize(obj)  # the name generateName gave it when ADDED
        key = _key(obj, str(kind))
        if kind in kube.Parsed.KINDS:
            parsed = None if deleted else (
                kube.node(obj) if kind == "Node" else kube.resource_slice(obj))
            if self._parsed is not None:
                self._parsed.keep(str(kind), key[1], source if read else None, self._lenient,
                                  parsed, notes)
            if kind == "Node":
                self._node(key[1], parsed)  # type: ignore[arg-type]
            else:
                self._slice(key[1], parsed)  # type: ignore[arg-type]
        elif kind == "ResourceClaim":
            held = () if deleted else tuple(kube.allocated_devices(obj))
            if not deleted:
                try:
                    kube.resource_claim(obj)  # its spec, selectors compiled and costed
                except errors.InputError as exc:
                    if not held:
                        raise
                    # Devices in use are in use, whatever the spec says.
                    notes.append(f"{exc}; its allocation is counted all the same")
            self._claim(key, held)
        elif kind == "Pod":
            if deleted:
                self._pod(key, None, None)
            else:
                usage, bound = workload.pod_usage(obj), workload.bound_pod(obj)
                self._pod(key, usage, bound)
        elif kind == "DeviceClass":
            self._device_class(key[1], None if deleted else kube.device_class(obj))
        elif kind == "DeviceTaintRule":
            self._rule(key[1], None if deleted else taintrules.rule(obj))
        else:
            self._shape(key[1], None if deleted else workload.node_shape(obj))
        self._version += 1
        return notes

    def _node(self, name: str, node: model.Node | None) -> None:
        if node is None:
            if self._nodes.pop(name, None) is not None:
                self._names.remove(name)
                self._layout_changed = True
                self._entries.pop(name, None)
                self._node_parts.pop(name, None)
                self._dirty.discard(name)
            return
        if name not in self._nodes:
            bisect.insort(self._names, name)
            self._layout_changed = True
        self._nodes[name] = node
        self._dirty.add(name)
        self._read_node(name)

    def _slice(self, name: str, s: model.ResourceSlice | None) -> None:
        old = self._slices.pop(name, None)
        if old is None and s is None:
            return
        touched: set[PoolKey] = set()
        if old is not None:
            pk = (old.driver, old.pool)
            del self._pool_slices[pk][name]
            self._devices -= len(old.devices)
            touched.add(pk)
        if s is not None:
            self._slices[name] = s
            pk = (s.driver, s.pool)
            self._pool_slices.setdefault(pk, {})[name] = self._tainted(s)
            self._devices += len(s.devices)
            touched.add(pk)
        for pk in touched:
            self._place_pool(pk)

    def _tainted(self, s: model.ResourceSlice) -> model.ResourceSlice:
        """The slice as the scheduler sees it: with the taints of the DeviceTaintRules
        that select its devices (the same object when none does)."""
        if not self._rules:
            return s
        return taintrules.apply([s], list(self._rules.values()), self.kube)[0][0]

    def _rule(self, name: str, rule: taintrules.Rule | None) -> None:
        """A rule came, changed or went: every slice whose devices it selected or selects
        is seen anew (rules are few and change rarely)."""
        if rule is None and name not in self._rules:
            return
        if rule is None:
            del self._rules[name]
        else:
            self._rules[name] = rule
        for slice_name, s in self._slices.items():
            pk = (s.driver, s.pool)
            seen = self._tainted(s)
            if seen != self._pool_slices[pk][slice_name]:
                self._pool_slices[pk][slice_name] = seen
                self._place_pool(pk)

    def _place_pool(self, pk: PoolKey) -> None:
        """Recompute whether a pool is node-local (and to which node); mark who sees it."""
        before = self._owner.pop(pk, None)
        if before is not None:
            self._node_pools[before].discard(pk)
            self._dirty.add(before)
        was_global = pk in self._global
        self._global.discard(pk)
        group = self._pool_slices.get(pk)
        owner = None
        if not group:
            self._pool_slices.pop(pk, None)
            self._pool_list.pop(pk, None)
        else:
            slices = self._pool_list[pk] = list(group.values())
            owners = {s.node_name for s in slices}
            if len(owners) == 1 and None not in owners:
                owner = next(iter(owners))
                assert owner is not None
                self._owner[pk] = owner
                self._node_pools.setdefault(owner, set()).add(pk)
                self._dirty.add(owner)
            else:
                self._global.add(pk)
        if was_global or pk in self._global:
            self._all_dirty = True
        for name in {before, owner} - {None}:
            assert name is not None
            self._list_local(name)

    def _list_local(self, name: str) -> None:
        """The node's node-local pools with their slices, as `Snapshot.entry` takes them."""
        pools = self._node_pools.get(name)
        if pools:
            self._node_local[name] = [(pk, self._pool_list[pk]) for pk in pools]
        else:
            self._node_local.pop(name, None)
        self._read_node(name)

    def _read_node(self, name: str) -> None:
        """What the node's index entry reads of it, its slices and its pods' requests
        (`snapshot.node_parts`), made again after one of them changed: here they were
        just read, where a cold decision would read every node of the cluster from
        memory again. `_entry` checks the Node and the list of local pools by identity
        (the pods' requests are summed in place: `_pod` calls this)."""
        node = self._nodes.get(name)
        if node is None:
            self._node_parts.pop(name, None)
            return
        local = self._node_local.get(name, _NO_POOLS)
        parts = snapshot.node_parts(node, self._used.get(name, _NO_USE), local)
        labels = self._label_sets.get(parts[0])
        if labels is None:
            if len(self._label_sets) > 2 * len(self._nodes) + 64:
                self._label_sets.clear()  # sets of labels no node has any more
            labels = self._label_sets[parts[0]] = parts[0]
        elif labels is not parts[0]:
            parts = (labels, *parts[1:])
        self._node_parts[name] = (node, local, parts)

    def _claim(self, key: Key, results: tuple[model.AllocatedDevice, ...]) -> None:
        old = self._claims.pop(key, ())
        if results:
            self._claims[key] = results
        for pk in {(r.id.driver, r.id.pool) for r in old}:
            self._pool_claims[pk].pop(key, None)
            self._dirty_pools.add(pk)
        by_pool: dict[PoolKey, list[model.AllocatedDevice]] = {}
        for r in results:
            by_pool.setdefault((r.id.driver, r.id.pool), []).append(r)
        for pk, in_pool in by_pool.items():
            self._pool_claims.setdefault(pk, {})[key] = (tuple(in_pool), _taken(in_pool))
            self._dirty_pools.add(pk)

    def _pod(self, key: Key, usage: tuple[str, dict[str, values.Quantity]] | None,
             bound: podaffinity.BoundPod | None) -> None:
        if self._bound.pop(key, None) is not None:
            i = bisect.bisect_left(self._bound_keys, key)
            del self._bound_keys[i], self._bound_sorted[i]
            self._bound_list = None
        if bound is not None:
            self._bound[key] = bound
            i = bisect.bisect_left(self._bound_keys, key)
            self._bound_keys.insert(i, key)
            self._bound_sorted.insert(i, bound)
            self._bound_list = None
        old = self._pods.pop(key, None)
        if old is not None:
            into = self._used[old[0]]
            for k, q in old[1].items():
                into[k] = into[k] - q
            self._dirty.add(old[0])
        if usage is not None:
            self._pods[key] = usage
            into = self._used.setdefault(usage[0], {})
            for k, q in usage[1].items():
                into[k] = into[k] + q if k in into else q
            self._dirty.add(usage[0])
        for name in {old[0] if old is not None else None,
                     usage[0] if usage is not None else None} - {None}:
            assert name is not None
            self._read_node(name)

    def _device_class(self, name: str, dc: model.DeviceClass | None) -> None:
        if dc is None and name not in self._classes:
            return
        classes = dict(self._classes)  # a new object: kept problems are keyed by its id
        if dc is None:
            del classes[name]
        else:
            classes[name] = dc
        self._classes = classes
        self._gangs.clear()  # what gangs can see of devices, and their fills, change
        self._shared.clear()
        self._parts = {}
        self._all_dirty = True

    def _shape(self, name: str, shape: node_shapes.NodeShape | None) -> None:
        if shape is None:
            self._shapes.pop(name, None)
        else:
            self._shapes[name] = shape

    # --------------------------------------------------------------- the view

    def _current(self) -> gang.Snapshot:
        """The current index: a snapshot whose entries are every node's, in name order,
        rebuilt for dirty nodes only; not itself indexed into cells (see `_view`)."""
        if self._snapshot is not None and self._snapshot[0] == self._version:
            return self._snapshot[1]
        if len(self._keys) > INTERNED:
            self._keys = {}
            self._device_keys = {}
            self._parts = {}
            self._entries.clear()
            self._gangs.clear()
            self._shared.clear()
            self._scratch = {}
            self._all_dirty = True
            self._layout_changed = True
        for pk in self._dirty_pools:
            self._allocated_in(pk)
            owner = self._owner.get(pk)
            if owner is not None:
                self._dirty.add(owner)
            elif pk in self._global:
                self._scratch = {}
        self._dirty_pools.clear()
        if self._all_dirty:
            self._dirty.update(self._names)
            self._scratch = {}
        global_slices = [s for pk in sorted(self._global) for s in self._pool_list.get(pk, ())]
        # The owner and allocation tables are shared with the snapshot, not copied: a
        # snapshot is only decided on while it is current.
        if self._bound_list is None:
            self._bound_list = list(self._bound_sorted)
        snap = gang.Snapshot.indexed(
            model.Inventory((), self._classes, _EMPTY_STATE), global_slices, self._owner,
            self._allocated, self._keys, self._bound_list, self.kube)
        snap.devices = self._devices
        snap.scratch = self._scratch
        # The node entries, in name order. They are not inserted: decisions run on the
        # gang's projected view of them (`_view`), which indexes them itself.
        previous = self._snapshot[1] if self._snapshot is not None else None
        self._snap_no += 1
        if previous is None or self._layout_changed:
            self._index = {name: i for i, name in enumerate(self._names)}
            self._log.clear()
            entries = snap.entries
            for name in self._names:
                e = self._entries.get(name)
                if e is None or name in self._dirty:
                    e = self._entry(snap, name, e)
                entries.append(e)
        else:
            snap.entries = entries = list(previous.entries)
            changed = self._dirty & self._nodes.keys()
            for name in changed:
                entries[self._index[name]] = self._entry(snap, name, self._entries.get(name))
            self._log.append((self._snap_no, frozenset(changed)))
        self._layout_changed = False
        self._dirty.clear()
        self._all_dirty = False
        self._store.size = 2 * len(self._names) + 4096
        self._snapshot = (self._version, snap)
        return snap

    def _allocated_in(self, pk: PoolKey) -> None:
        """The pool's allocation table: its one claim's, made when it was applied, or
        made from the results of its claims."""
        claims = self._pool_claims.get(pk)
        if not claims:
            self._allocated.pop(pk, None)
            self._pool_claims.pop(pk, None)
            return
        if len(claims) == 1:
            self._allocated[pk] = next(iter(claims.values()))[1]
        else:
            self._allocated[pk] = _taken([r for rs, _ in claims.values() for r in rs])

    def _entry(self, snap: gang.Snapshot, name: str, old: gang._NodeEntry | None
               ) -> gang._NodeEntry:
        node = self._nodes[name]
        local = self._node_local.get(name, _NO_POOLS)
        parts = self._node_parts.get(name)
        if parts is None or parts[0] is not node or parts[1] is not local:
            self._read_node(name)  # not expected: every change reads the node again
            parts = self._node_parts[name]
        self._generation += 1
        e = snap.entry(node, self._used.get(name, _NO_USE), None, local,
                       own_class=self._generation, parts=parts[2])
        if old is not None and len(old.local_slices) == len(e.local_slices) and all(
                a is b for a, b in zip(old.local_slices, e.local_slices, strict=True)):
            e.local_slices = old.local_slices  # the same tuple: kept work is found again
        self._entries[name] = e
        return e

    def _gang_state(self, g: gang.Gang) -> _GangState:
        # Kept by what the decision depends on: the pod sets and the namespace (pod
        # affinity, extended-resource claims), not the workload's name or kind, so that
        # the Workloads of a queue that ask alike share their projection and fills.
        content = repr(dataclasses.replace(g, name="", kind="", source=None))
        state = self._gangs.get(content)
        if state is not None:
            self._gangs.move_to_end(content)
            self._shared.move_to_end(state.shared.projection.key)
            return state
        view = projection.device_view(g, self._classes)
        proj = projection.Projection(g, self._classes, self._store.selector, self._keys,
                                     self._device_keys.setdefault(view, {}), self._devices_of)
        shared = self._shared.get(proj.key)
        if shared is None:
            shared = self._shared[proj.key] = _View(proj, {})
        else:
            self._shared.move_to_end(proj.key)
        state = self._gangs[content] = _GangState(g, shared)
        if len(self._gangs) > GANGS or len(self._shared) > self._max_views:
            self._evict()
        return state

    def _evict(self) -> None:
        """Drop the least recently used gang contents past `GANGS` and views past the
        views bound (with every content that shares an evicted view), then the device
        parts and device keys no kept view uses. What is dropped is kept work only: a
        later decision makes it again, and decides the same."""
        while len(self._gangs) > GANGS:
            self._gangs.popitem(last=False)
        alive = {id(s.shared) for s in self._gangs.values()}
        for k in [k for k, v in self._shared.items() if id(v) not in alive]:
            del self._shared[k]
        while len(self._shared) > self._max_views:
            _, view = self._shared.popitem(last=False)
            self.views["evicted"] += 1
            for content in [c for c, st in self._gangs.items() if st.shared is view]:
                del self._gangs[content]
        signatures = {v.projection.signature for v in self._shared.values()}
        self._parts = {k: p for k, p in self._parts.items() if k in signatures}
        seen = {v.projection.view for v in self._shared.values()}
        self._device_keys = {k: d for k, d in self._device_keys.items() if k in seen}

    def _devices_of(self, signature: str) -> projection.NodeDevices:
        """The device parts kept for projections of this signature."""
        parts = self._parts.get(signature)
        if parts is None:
            if len(self._parts) >= GANGS:
                self._parts = {}  # projections alive keep theirs
            parts = self._parts[signature] = {}
        elif len(parts) > 2 * len(self._names) + 64:
            parts.clear()  # nodes that are gone
        return parts

    def _view(self, state: _View, node_filter: Callable[[model.Node], bool] | None,
              held: Collection[str]) -> tuple[gang.Snapshot, list[str], list[str]]:
        """The snapshot under the gang's projection, without the nodes `node_filter`
        refuses and the `held` ones (returned by name: refused, held). Without a filter,
        the held nodes are left out of the gang's kept view (`_without_held`)."""
        snap = self._current()
        if self._global:
            state.memos.clear()  # fills of nodes that see shared pools are not kept
        if node_filter is None:
            view = self._whole_view(state, snap)
            if not held:
                return view, [], []
            return self._without_held(state, view, held)
        entries = []
        refused: list[str] = []
        kept_out: list[str] = []
        for e in snap.entries:
            if e.node.name in held:
                kept_out.append(e.node.name)
                continue
            if not node_filter(e.node):
                refused.append(e.node.name)
                continue
            entries.append(self._projected(state, e))
        view = snap.with_entries(entries)
        view.scratch = self._scratch
        return view, refused, kept_out

    def _whole_view(self, state: _View, snap: gang.Snapshot) -> gang.Snapshot:
        """The gang's view of every node: kept, patched with the nodes changed since, or
        made anew (and kept)."""
        if state.view is not None:
            if state.view[0] == self._snap_no:
                self.views["kept"] += 1
                return state.view[2]
            patched = self._patched(state, snap)
            if patched is not None:
                self.views["patched"] += 1
                state.view = (self._snap_no, self._version, patched)
                return patched
        else:
            self.views["rebuilt: new"] += 1
        view = snap.with_entries(self._projected_all(state, snap.entries))
        view.scratch = self._scratch
        state.view = (self._snap_no, self._version, view)
        return view

    def _projected(self, state: _View, e: gang._NodeEntry) -> gang._NodeEntry:
        """The entry under the gang's projection, kept per version of the node."""
        kept = state.entries
        hit = kept.get(e.node.name)
        if hit is None or hit[0] is not e:
            if len(kept) > 2 * len(self._names) + 64:
                kept.clear()
            hit = kept[e.node.name] = projection.pair(e, self._project(state.projection, e))
        return hit[1]

    def _projected_all(self, state: _View, entries: list[gang._NodeEntry]
                       ) -> list[gang._NodeEntry]:
        """Every entry under the gang's projection, kept per version of the node (as
        `_projected`, in one call)."""
        return state.projection.entries(entries, state.entries, 2 * len(self._names) + 64,
                                        self._allocated)

    def _without_held(self, state: _View, view: gang.Snapshot, held: Collection[str]
                      ) -> tuple[gang.Snapshot, list[str], list[str]]:
        """The gang's whole view without the held nodes (the view's positions are the
        nodes' name order), and their names; the last one is kept for the next decision
        with the same view and held nodes."""
        positions = tuple(sorted(i for name in held
                                 if (i := self._index.get(name)) is not None))
        names = [self._names[i] for i in positions]
        if not positions:
            return view, [], []
        last = state.held
        if last is not None and last[0] is view and last[1] == positions:
            return last[2], [], names
        smaller = view.without(frozenset(positions))
        smaller.scratch = self._scratch
        state.held = (view, positions, smaller)
        return smaller, [], names

    def _patched(self, state: _View, snap: gang.Snapshot) -> gang.Snapshot | None:
        """The gang's previous view with the nodes recomputed since patched in, however
        many (each costs its projection, as in a rebuild; the rest is a copy of the
        entries and class tables, far less than inserting every node again), or None
        when it must be rebuilt (nodes came or went, labels changed, the log of changes
        no longer reaches back to the view)."""
        assert state.view is not None
        since = state.view[0]
        if not self._log or self._log[0][0] > since + 1:
            self.views["rebuilt: layout or log"] += 1
            return None
        changed = set().union(*(names for no, names in self._log if no > since))
        previous = state.view[2]
        changes = {}
        for name in changed:
            i = self._index[name]
            e = snap.entries[i]
            projected = self._project(state.projection, e)
            state.entries[name] = (e, projected)
            if projected.labels != previous.entries[i].labels:
                self.views["rebuilt: labels"] += 1
                return None
            changes[i] = projected
        self.views["patched nodes"] += len(changes)
        view = previous.replaced(changes)
        view.scratch = self._scratch
        view.pods = snap.pods  # bound pods may have come or gone anywhere
        # And what the current index holds beside the nodes (classes, pools that are not
        # node-local, the device count).
        view.inventory, view.global_slices, view.devices = (
            snap.inventory, snap.global_slices, snap.devices)
        return view

    def _project(self, proj: projection.Projection, e: gang._NodeEntry) -> gang._NodeEntry:
        if e.sees_global:
            return e
        # The base entry is a class of its own per version of the node: fills found on
        # it as a representative are kept under that version.
        return proj.entry(e, self._allocated)

    # -------------------------------------------------------------- decisions

    def fit(self, g: gang.Gang, *,
            node_filter: Callable[[model.Node], bool] | None = None,
            held: Collection[str] = ()) -> planning.PlanResult:
        """Whether the gang fits the existing nodes now (verdict `fits`, else `unsatisfiable`
        or `undecided`); `node_filter` says which nodes it may use (a FitPolicy), `held`
        names nodes held for other workloads (left out, and named in the reasons)."""
        return self._decide(g, [], node_filter, held)

    def plan(self, g: gang.Gang, *, shapes: Collection[str] | None = None,
             node_filter: Callable[[model.Node], bool] | None = None,
             held: Collection[str] = ()) -> planning.PlanResult:
        """Fit on the existing nodes, or the cheapest new nodes of the named NodeShapes
        (None: all known shapes) that make the gang fit. A shape name that is not known
        is reported in `rejected`. `node_filter` restricts the existing nodes the gang
        may use (a FitPolicy); refused nodes are named in the reasons. `held` names
        existing nodes held for other workloads (promised to a gang whose pods are
        binding, brought by another gang's request): left out, and named apart."""
        if shapes is None:
            chosen = [self._shapes[n] for n in sorted(self._shapes)]
            missing: list[str] = []
        else:
            chosen = [self._shapes[n] for n in sorted(shapes) if n in self._shapes]
            missing = sorted(n for n in shapes if n not in self._shapes)
        result = self._decide(g, chosen, node_filter, held)
        if missing:
            why = "no NodeShape of this name"
            result = dataclasses.replace(
                result, rejected=(*result.rejected, *((n, why) for n in missing)),
                rejected_details=(*result.rejected_details, *(
                    codes.reason(codes.SHAPE_UNKNOWN, why, object=f"NodeShape {n}", shape=n)
                    for n in missing)))
        return result

    def _decide(self, g: gang.Gang, chosen: list[node_shapes.NodeShape],
                node_filter: Callable[[model.Node], bool] | None,
                held: Collection[str]) -> planning.PlanResult:
        with cache.use(self._store), _collector_paused():
            state = self._gang_state(g)
            view, refused, kept_out = self._view(state.shared, node_filter, held)
            result = planning.plan(_as(g, state), view, chosen,
                                   memo=state.shared.memo(g.namespace))
        return _left_out(result, g, refused, kept_out)

    def verify(self, g: gang.Gang, p: planning.Plan, *,
               node_filter: Callable[[model.Node], bool] | None = None,
               held: Collection[str] = ()) -> planning.VerifyResult:
        """Whether the gang fits now that the plan's nodes should exist, and how the new
        nodes differ from their shapes (`planning.verify`). Use the `node_filter` the plan was
        made with; `held` as for `plan`."""
        with cache.use(self._store), _collector_paused():
            state = self._gang_state(g)
            view, refused, kept_out = self._view(state.shared, node_filter, held)
            result = planning.verify(_as(g, state), view, p, list(self._shapes.values()))
        return _left_out(result, g, refused, kept_out)

    # ----------------------------------------------------------------- reading

    def notes(self) -> list[str]:
        """What a person should know about the inventory besides the verdicts: the
        DeviceTaintRules the version does not apply."""
        return taintrules.apply([], [self._rules[n] for n in sorted(self._rules)], self.kube)[1]

    def shapes(self) -> list[node_shapes.NodeShape]:
        """The known NodeShapes, by name."""
        return [self._shapes[n] for n in sorted(self._shapes)]

    def nodes(self) -> list[model.Node]:
        """The known Nodes, by name."""
        return [self._nodes[n] for n in self._names]

    def stats(self) -> dict[str, int]:
        """Sizes: objects held, kept work (for metrics and the memory bounds)."""
        return {
            "nodes": len(self._nodes), "devices": self._devices, "slices": len(self._slices),
            "allocated claims": len(self._claims), "pods": len(self._pods),
            "device classes": len(self._classes), "device taint rules": len(self._rules),
            "shapes": len(self._shapes),
            "gangs kept": len(self._gangs),
            "views kept": len(self._shared),
            "views evicted": self.views["evicted"],
            "fills kept": sum(len(m.fills) for v in self._shared.values()
                              for m in v.memos.values()),
            "device parts kept": sum(len(p) for p in self._parts.values()),
            "interned keys": len(self._keys),
            "promised pods": sum(len(keys) for nodes in self._assumed.values()
                                 for keys in nodes.values()),
            **self._store.stats(),
        }

    # -------------------------------------------------------------- promises

    def assume(self, owner: str, g: gang.Gang, placements: Collection[gang.Placement]
               ) -> None:
        """Count the placements of a promised gang (`owner`: its uid) as in use until
        `forget`: each pod's requests on its node, and its own claims' devices
        (`fitcore.assumed`). Replaces what `owner` was assumed to hold before."""
        self.forget(owner)
        kept: dict[str, list[Key]] = {}
        for i, pod in enumerate(assumed.pods(g, list(placements))):
            key = ("", f"assumed/{owner}/{i}")  # no real object has an empty namespace
            self._pod(key, (pod.node, pod.requests), None)
            self._claim(key, pod.devices)
            kept.setdefault(pod.node, []).append(key)
        if kept:
            self._assumed[owner] = kept
        self._version += 1

    def forget(self, owner: str, nodes: Collection[str] | None = None) -> None:
        """Stop counting what `owner` was assumed to hold on `nodes` (None: everywhere)."""
        held = self._assumed.get(owner)
        if not held:
            return
        for node in list(held) if nodes is None else [n for n in nodes if n in held]:
            for key in held.pop(node):
                self._pod(key, None, None)
                self._claim(key, ())
        if not held:
            del self._assumed[owner]
        self._version += 1

    def assumed_nodes(self) -> dict[str, frozenset[str]]:
        """The owners assumed to hold something, and on which nodes."""
        return {owner: frozenset(nodes) for owner, nodes in self._assumed.items()}


_Result = TypeVar("_Result", planning.PlanResult, planning.VerifyResult)


def _taken(results: list[model.AllocatedDevice]) -> list[tuple[Any, ...]]:
    """What results in one pool take, as the index reads it: ("d", device) for each
    device allocated exclusively, ("s", device) shared, ("c", device, its consumed
    capacity summed, by name). Never changed once made: tables are compared by identity."""
    # As `model.AllocatedState.from_results` counts them, by device name (one pool).
    dedicated: dict[str, None] = {}
    shared: dict[str, None] = {}
    consumed: dict[str, dict[str, values.Quantity]] = {}
    for r in results:
        if r.admin_access:
            continue
        device = r.id.device
        if r.share_id is None:
            dedicated[device] = None
            continue
        shared[device] = None
        into = consumed.setdefault(device, {})
        for name, amount in r.consumed_capacity.items():
            into[name] = into[name] + amount if name in into else amount
    taken: list[tuple[Any, ...]] = [("d", d) for d in dedicated]
    taken += [("s", d) for d in shared]
    taken += [("c", d, tuple(sorted(a.items()))) for d, a in consumed.items()]
    return taken


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (a decision). A decision makes
    tens of thousands of objects that it keeps (class keys, projected entries, device
    parts; acyclic): collections while they pile up walk them again and again (a
    cold decision on 5,000 realistic nodes spent 10-15% of its time so). Reference
    counting still frees what is dropped; the collector runs again after the block,
    as it was (left off if the caller had turned it off)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _as(g: gang.Gang, state: _GangState) -> gang.Gang:
    """The gang as decided: its own name, kind and source with the pod sets of the first
    gang of its content (the memo finds a pod set's key by its identity: the same
    objects every time, looked up once)."""
    if g.pod_sets is state.first.pod_sets:
        return g
    return dataclasses.replace(g, pod_sets=state.first.pod_sets)


def _left_out(result: _Result, g: gang.Gang, refused: list[str], held: list[str]) -> _Result:
    """The result with a reason for each kind of node the decision left out, unless it
    fits anyway."""
    if result.verdict == "fits" or not (refused or held):
        return result
    why: list[codes.Reason] = []
    if refused:
        why.append(codes.reason(codes.NODE_POLICY, f"{_count(refused)} not allowed for this "
                                f"workload by policy ({_example(refused)})",
                                object=g.label, node=refused[0]))
    if held:
        why.append(codes.reason(
            codes.NODE_HELD, f"{_count(held)} held for other workloads until their pods are "
            f"on them ({_example(held)})", object=g.label, node=held[0]))
    return dataclasses.replace(result, reasons=(*result.reasons, *(w.message for w in why)),
                               details=(*result.details, *why))


def _count(names: list[str]) -> str:
    return f"{len(names)} node{'s are' if len(names) != 1 else ' is'}"


def _example(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _named(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata")
    return isinstance(meta, Mapping) and bool(meta.get("name"))


def _key(obj: Mapping[str, Any], kind: str) -> Key:
    c = kube.collector(obj, kind)
    r = fields.Reader(c)
    name, namespace = fields.meta_name(r, obj)
    c.raise_if_any()
    return (namespace or "", name)

