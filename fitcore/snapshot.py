"""The Snapshot index a gang decision works on: nodes in label groups and classes.

Two nodes are in one class when they have the same taints, the same free resources and
node-local ResourceSlices of the same shape with the same devices allocated; labels
matter only per group of nodes with identical labels (the hostname aside). A decision
works on *cells* (label group, class) with a node count (see `fitcore.gang` for the
design). `fitcore.inventory` keeps the entries of unchanged nodes across changes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from fractions import Fraction
from typing import Any

from fitcore import (
    extended,
    gangtypes,
    model,
    podaffinity,
    pools,
    values,
    versions,
)


def _load_compiled() -> Any:
    if os.environ.get("FITCORE_NO_EXTENSIONS", "") not in ("", "0"):
        return None
    try:
        from fitcore import _project
    except ImportError as exc:  # pragma: no cover - exercised by a packaging test
        raise ImportError(
            "fitcore's compiled per-node indexing (fitcore._project) is not built. Build it "
            "with `pip install -e .` (or `make setup`) from the repository root, or set "
            "FITCORE_NO_EXTENSIONS=1 to use the slower pure-Python indexing.") from exc
    return _project


#: The compiled per-node work (`fitcore._project`: `Snapshot.entry`'s and
#: `Projection.node_key`'s), None with FITCORE_NO_EXTENSIONS=1.
compiled: Any = _load_compiled()

_ZERO = Fraction(0)
_SHARED = operator.attrgetter("allow_multiple_allocations")
_UNBOUNDED = 1 << 40
PoolKey = tuple[str, str]


def _device_key(d: model.Device) -> tuple[Any, ...]:
    return (d.name, tuple(sorted(d.attributes.items())), tuple(sorted(d.capacity.items())),
            tuple((c.counter_set, tuple(sorted(c.counters.items())))
                  for c in d.consumes_counters),
            d.taints, d.allow_multiple_allocations, d.binding_conditions, d.binds_to_node)


def _minus(a: Fraction, b: Fraction) -> Fraction:
    """a - b, on the integers when both are whole (most quantities are: Fraction's own
    operator normalizes through gcd every time)."""
    if a.denominator == 1 and b.denominator == 1:
        return Fraction(a.numerator - b.numerator)
    return a - b


def slice_shape(s: model.ResourceSlice) -> tuple[Any, ...]:
    """What of a node-local slice matters to allocation, without slice/pool/node names."""
    return (s.driver, s.generation, s.resource_slice_count,
            tuple(_device_key(d) for d in s.devices),
            tuple((c.name, tuple(sorted(c.counters.items()))) for c in s.shared_counters))


NodeParts = tuple[tuple[tuple[str, str], ...],
                  list[tuple[PoolKey, list[model.ResourceSlice]]],
                  tuple[model.ResourceSlice, ...], tuple[PoolKey, ...], dict[str, Fraction],
                  bool]


def _node_parts(n: model.Node, used: Mapping[str, values.Quantity],
                local: list[tuple[PoolKey, list[model.ResourceSlice]]],
                allocated_by_pool: Mapping[PoolKey, Sequence[tuple[Any, ...]]],
                hostname: str) -> NodeParts:
    """What `Snapshot.entry` reads of a node and its node-local pools: (labels but the
    hostname, the pools sorted with their slices sorted by name, the slices in that
    order, the pools, free resources, nothing allocated locally). No device is read: the
    bound on local devices is counted for the nodes that ask (`device_bound`). The
    reference of the compiled `_project.node_parts`."""
    labels = tuple(sorted((k, v) for k, v in n.labels.items() if k != hostname))
    groups = [(pk, sorted(group, key=lambda s: s.name))
              for pk, group in sorted(local, key=lambda x: x[0])]
    local_slices = tuple(s for _, group in groups for s in group)
    free: dict[str, Fraction] = {k: q.value for k, q in n.allocatable.items()}
    for k, q in used.items():
        free[k] = _minus(free.get(k, _ZERO), q.value)
    pristine = not any(allocated_by_pool.get(pk) for pk, _ in groups)
    return labels, groups, local_slices, tuple(pk for pk, _ in groups), free, pristine


def node_parts(n: model.Node, used: Mapping[str, values.Quantity],
               local: list[tuple[PoolKey, list[model.ResourceSlice]]]) -> NodeParts:
    """What `Snapshot.entry` reads of a node and its node-local pools (`_node_parts`,
    compiled unless FITCORE_NO_EXTENSIONS=1), without what is allocated in its pools
    (`pristine` is True here: `Snapshot.entry` tells it from the snapshot's allocations).
    For a caller that makes them when the node, its slices or its pods change, while
    their objects are at hand (`fitcore.inventory`), instead of in a cold decision that
    reads every node of the cluster from memory (at 10,000 nodes, 6 µs a node against
    1 µs)."""
    return (compiled.node_parts if compiled is not None else _node_parts)(
        n, used, local, _NOTHING, gangtypes.HOSTNAME_LABEL)


_NOTHING: dict[PoolKey, list[tuple[Any, ...]]] = {}


def device_bound(local_slices: Sequence[model.ResourceSlice], local_pools: Sequence[PoolKey],
                 allocated_by_pool: Mapping[PoolKey, Sequence[tuple[Any, ...]]]) -> int:
    """Local devices not allocated exclusively (unbounded with a device that allows
    multiple allocations): an upper bound for counting pods on a node. It reads every
    local device, so it is counted for class representatives only (`Snapshot.
    device_bound`), not for every node indexed."""
    if any(any(map(_SHARED, s.devices)) for s in local_slices):
        return _UNBOUNDED  # shared devices: counting cannot bound the pods
    devices = sum(len(s.devices) for s in local_slices)
    for pk in local_pools:
        devices -= sum(1 for t in allocated_by_pool.get(pk, ()) if t[0] == "d")
    return devices


@dataclasses.dataclass(slots=True)
class _NodeEntry:
    node: model.Node
    labels: tuple[tuple[str, str], ...]  # labels but the hostname: the label group's key
    local_pools: tuple[PoolKey, ...]  # in allocator order (driver, pool name)
    local_slices: tuple[model.ResourceSlice, ...]
    sees_global: bool
    key: int  # class id (interned class key)
    free: dict[str, Fraction]
    # Local devices not allocated exclusively (an upper bound for counting), None until a
    # decision asks (`Snapshot.device_bound`: class representatives only).
    devices: int | None
    pristine: bool  # nothing allocated on its local devices
    # What the entry was computed from, by identity (node, slices) and value (allocated
    # devices, bound pods' requests): a rebuilt snapshot reuses an entry that matches.
    fingerprint: tuple[Any, ...] = ()
    # With a gang's projection (fitcore.projection): the node's devices in canonical
    # order, pool by pool (pool, device names: a class representative's map onto
    # another node by position), and the id of
    # its exact content, under which fills found on it are kept (-1: `key` is exact).
    order: tuple[tuple[PoolKey, tuple[str, ...]], ...] | None = None
    exact: int = -1
    # The devices of `order` as ids, made when a placement first maps onto or from this
    # node (kept with the entry: later decisions on the same view reuse them).
    ids: tuple[model.DeviceId, ...] | None = None

    def device_ids(self) -> tuple[model.DeviceId, ...]:
        """`order` as device ids (projected entries only)."""
        if self.ids is None:
            assert self.order is not None
            self.ids = tuple(model.DeviceId(*pool, name) for pool, names in self.order
                             for name in names)
        return self.ids


class Snapshot:
    """Nodes and inventory indexed for gang placement.

    Built once per inventory (O(nodes + devices)); a gang decision then works on *cells*,
    (label group, node class) pairs with a node count, and touches single nodes only in
    the domain it places pods in. `used`: what pods already bound to each node request
    (cpu, memory, pods, ...).

    `previous`: the snapshot of the inventory before some change. Nodes whose Node object,
    ResourceSlice objects (by identity: a watch cache replaces objects that change),
    allocated devices and bound pods are unchanged keep their index entry, so a rebuild
    costs a pass over the nodes instead of re-reading every device.
    """

    def __init__(self, nodes: Sequence[model.Node], inventory: model.Inventory,
                 used: Mapping[str, Mapping[str, values.Quantity]] | None = None,
                 previous: Snapshot | None = None,
                 pods: Sequence[podaffinity.BoundPod] = (),
                 kube: versions.KubeVersion = versions.DEFAULT) -> None:
        self.inventory = inventory
        self.pods = pods  # bound pods, for pod (anti-)affinity
        self.kube = kube  # whose scheduler (default features) decides
        self.entries: list[_NodeEntry] = []
        # Class keys are large tuples: interned once, then compared as ints. Shared by
        # extended and rebuilt snapshots, so ids stay valid across them.
        self.keys: dict[Any, int] = previous.keys if previous is not None else {}
        self.label_groups: list[Mapping[str, str]] = []
        self.group_nodes: list[list[int]] = []  # node indices per label group, name order
        self.node_group: list[int] = []  # label group per node
        self._group_index: dict[tuple[tuple[str, str], ...], int] = {}
        self._own_groups: set[int] = set()  # groups whose node list this snapshot owns
        self.cells: dict[tuple[int, int], int] = {}  # (label group, class) -> nodes
        self.class_rep: dict[int, int] = {}  # class -> its first node
        self.devices = sum(len(s.devices) for s in inventory.slices)
        # Data derived from this snapshot that decisions may share while it lives (the
        # hypothetical nodes of NodeShapes, see fitcore.plan).
        self.scratch: dict[Any, Any] = {}
        by_pool: dict[PoolKey, list[model.ResourceSlice]] = {}
        for s in inventory.slices:
            by_pool.setdefault((s.driver, s.pool), []).append(s)
        owner: dict[PoolKey, str] = {}
        self.global_slices: list[model.ResourceSlice] = []
        local: dict[str, list[tuple[PoolKey, list[model.ResourceSlice]]]] = {}
        for key, group in by_pool.items():
            owners = {s.node_name for s in group}
            if len(owners) == 1 and None not in owners:
                name = next(iter(owners))
                assert name is not None
                owner[key] = name
                local.setdefault(name, []).append((key, group))
            else:
                self.global_slices.extend(group)
        self.owner: Mapping[PoolKey, str] = owner
        self._allocated_by_pool: dict[PoolKey, list[tuple[Any, ...]]] = {}
        alloc = inventory.allocated
        for ident in alloc.dedicated:
            self._allocated_by_pool.setdefault((ident.driver, ident.pool), []).append(
                ("d", ident.device))
        for ident in alloc.shared:
            self._allocated_by_pool.setdefault((ident.driver, ident.pool), []).append(
                ("s", ident.device))
        for ident, amounts in alloc.consumed.items():
            self._allocated_by_pool.setdefault((ident.driver, ident.pool), []).append(
                ("c", ident.device, tuple(sorted(amounts.items()))))
        used = used or {}
        reuse: dict[str, _NodeEntry] = {}
        if previous is not None and len(previous.global_slices) == len(self.global_slices) \
                and all(a is b for a, b in zip(previous.global_slices, self.global_slices,
                                               strict=True)):
            reuse = {e.node.name: e for e in previous.entries}
        for n in sorted(nodes, key=lambda n: n.name):
            node_used = used.get(n.name, {})
            node_local = local.get(n.name, [])
            fingerprint = (id(n), tuple(sorted(id(s) for _, g in node_local for s in g)),
                           tuple(sorted((pk, tuple(sorted(self._allocated_by_pool.get(pk, ()))))
                                        for pk, _ in node_local)),
                           tuple(sorted((k, q.value) for k, q in node_used.items())))
            old = reuse.get(n.name)
            if old is not None and old.fingerprint == fingerprint:
                self.insert(old)
            else:
                self.insert(self.entry(n, node_used, None, node_local, fingerprint))

    def _pool_shape(self, group_slices: list[model.ResourceSlice],
                    shapes: dict[Any, int] | None) -> int:
        """The interned shape of one pool's slices. `shapes`: a cache for slices that
        share their device tuples (the hypothetical nodes of one NodeShape, while the
        shape is alive), so that their shape is computed and hashed once."""
        if shapes is None:
            return self.intern(("pool", tuple(slice_shape(s) for s in group_slices)))
        ck = tuple((id(s.devices), id(s.shared_counters), s.driver, s.generation,
                    s.resource_slice_count) for s in group_slices)
        have = shapes.get(ck)
        if have is None:
            have = shapes[ck] = self.intern(("pool", tuple(slice_shape(s)
                                                           for s in group_slices)))
        return have

    def entry(self, n: model.Node, used: Mapping[str, values.Quantity],
              shapes: dict[Any, int] | None,
              local: list[tuple[PoolKey, list[model.ResourceSlice]]],
              fingerprint: tuple[Any, ...] = (), own_class: int | None = None,
              parts: NodeParts | None = None) -> _NodeEntry:
        """Index one node (with its node-local pools) without adding it.

        `own_class`: the node is a class of its own, told apart by this number (a caller
        that classes nodes itself, `fitcore.inventory`, numbers each version of a node),
        and the shapes of its pools are not computed. `parts`: `node_parts(n, used,
        local)`, made by the caller beforehand (read here otherwise)."""
        if parts is not None and own_class is not None and compiled is not None and \
                not fingerprint and not self.global_slices:
            own: _NodeEntry = compiled.own_entry(  # this path, compiled
                _NodeEntry, self.keys, self._allocated_by_pool, n, parts, own_class)
            return own
        if parts is None:
            parts = (compiled.node_parts if compiled is not None else _node_parts)(
                n, used, local, self._allocated_by_pool, gangtypes.HOSTNAME_LABEL)
            labels, groups, local_slices, local_pools, free, pristine = parts
        else:
            labels, groups, local_slices, local_pools, free, _ = parts
            allocated = self._allocated_by_pool
            pristine = not any(allocated.get(pk) for pk in local_pools)
        pool_shapes: list[Any] = []  # per pool: its shape id, then what is allocated
        if own_class is None:
            for pk, group_slices in groups:
                pool_shapes.append(self._pool_shape(group_slices, shapes))
                pool_shapes.append(tuple(sorted(self._allocated_by_pool.get(pk, ()))))
        sees_global = bool(self.global_slices) and any(
            pools.slice_relevant(n, s) for s in self.global_slices)
        key: tuple[Any, ...]
        if own_class is not None:
            key = ("own", n.name, own_class)
        else:
            # Whether the node advertises an extended resource decides whether a pod
            # asking for it gets devices instead (fitcore.extended); a free 0 does not tell.
            advertised = tuple(sorted(k for k, q in n.allocatable.items()
                                      if q.value and extended.is_extended(k)))
            key = (tuple(pool_shapes), n.taints, n.unschedulable,
                   tuple(sorted(free.items())), advertised)
            if sees_global:
                key = (*key, ("node", n.name))
        e = _NodeEntry(n, labels, local_pools, local_slices, sees_global, self.intern(key),
                       free, None, pristine, fingerprint)
        # Made by the ten thousand in a cold decision, kept, and acyclic: left out of the
        # collector's walks (see `_project.acyclic`).
        return e if compiled is None else compiled.acyclic(e, free, key)

    def device_bound(self, e: _NodeEntry) -> int:
        """The entry's `devices`, counted (and kept with it) the first time it is asked:
        its allocated devices are this snapshot's, which are the entry's own (an entry is
        made again when what is allocated in its pools changes)."""
        if e.devices is None:
            e.devices = device_bound(e.local_slices, e.local_pools, self._allocated_by_pool)
        return e.devices

    def insert(self, e: _NodeEntry) -> None:
        index = len(self.entries)
        group = self._group_index.get(e.labels)
        if group is None:
            group = self._group_index[e.labels] = len(self.label_groups)
            self.label_groups.append(e.node.labels)
            self.group_nodes.append([])
            self._own_groups.add(group)
        elif group not in self._own_groups:  # copy on write (extended snapshots)
            self.group_nodes[group] = list(self.group_nodes[group])
            self._own_groups.add(group)
        self.group_nodes[group].append(index)
        self.node_group.append(group)
        cid = e.key
        self.cells[(group, cid)] = self.cells.get((group, cid), 0) + 1
        self.class_rep.setdefault(cid, index)
        self.entries.append(e)

    def local_allocated(self, local_pools: Sequence[PoolKey]) -> model.AllocatedState:
        """The part of the allocated state in these pools (the rest cannot matter to a
        node that sees only them, and copying all of it costs O(cluster))."""
        dedicated, shared, consumed = set(), set(), {}
        for pk in local_pools:
            for t in self._allocated_by_pool.get(pk, ()):
                ident = model.DeviceId(pk[0], pk[1], t[1])
                if t[0] == "d":
                    dedicated.add(ident)
                elif t[0] == "s":
                    shared.add(ident)
                else:
                    consumed[ident] = dict(t[2])
        return model.AllocatedState(frozenset(dedicated), frozenset(shared), consumed)

    def intern(self, key: Any) -> int:
        have = self.keys.get(key)
        if have is None:
            have = self.keys[key] = len(self.keys)
        return have

    def prepare(self, nodes: Sequence[model.Node], slices: Sequence[model.ResourceSlice]
                ) -> tuple[list[_NodeEntry], dict[PoolKey, str]]:
        """Index new nodes with node-local slices in new pools (hypothetical nodes), to
        add them with `extended`. A new node identical to an existing one (free, no
        allocations) joins its class, so what was learnt about one serves the other."""
        owner: dict[PoolKey, str] = {}
        local: dict[str, dict[PoolKey, list[model.ResourceSlice]]] = {}
        for s in slices:
            key = (s.driver, s.pool)
            if s.node_name is None or key in self.owner:
                raise ValueError(f"hypothetical slice {s.name} must be node-local in a new pool")
            owner[key] = s.node_name
            local.setdefault(s.node_name, {}).setdefault(key, []).append(s)
        shapes: dict[Any, int] = {}
        entries = [self.entry(n, {}, shapes, list(local.get(n.name, {}).items())) for n in nodes]
        return entries, owner

    def extended(self, entries: Sequence[_NodeEntry]) -> Snapshot:
        """This snapshot plus prepared new nodes (see `prepare`). Costs O(new nodes +
        label groups + cells), not O(nodes)."""
        other = Snapshot.__new__(Snapshot)
        other.inventory = self.inventory
        other.entries = list(self.entries)
        other.keys = self.keys
        other.label_groups = list(self.label_groups)
        other.group_nodes = list(self.group_nodes)
        other.node_group = list(self.node_group)
        other._group_index = dict(self._group_index)
        other._own_groups = set()
        other.cells = dict(self.cells)
        other.class_rep = dict(self.class_rep)
        other.devices = self.devices + sum(len(s.devices) for e in entries
                                           for s in e.local_slices)
        other.scratch = {}
        other.pods = self.pods
        other.kube = self.kube
        other.global_slices = self.global_slices
        other._allocated_by_pool = self._allocated_by_pool
        owner = {pk: e.node.name for e in entries for pk in e.local_pools}
        other.owner = collections.ChainMap(owner, self.owner)  # type: ignore[arg-type]
        for e in entries:
            other.insert(e)
        return other

    def reordered(self, key: Callable[[str], Any]) -> Snapshot:
        """The same nodes in another order (by `key` of the node name): placement fills
        nodes in snapshot order."""
        return self.with_entries(sorted(self.entries, key=lambda e: key(e.node.name)))

    def with_entries(self, entries: Sequence[_NodeEntry]) -> Snapshot:
        """The same inventory over these node entries, in this order (entries of this
        snapshot, reordered, or recomputed under a gang's projection)."""
        other = Snapshot.indexed(self.inventory, self.global_slices, self.owner,
                                 self._allocated_by_pool, self.keys, self.pods, self.kube)
        other.devices = self.devices
        if compiled is not None:
            compiled.insert_all(other, entries)
        else:
            for e in entries:
                other.insert(e)
        return other

    def without(self, gone: Collection[int]) -> Snapshot:
        """This snapshot without the entries at the positions `gone`: the same index as
        `with_entries` of the other entries in order (label groups numbered by first
        appearance, cells and class representatives alike), made in one pass that reads
        only each entry's class and label group, so that leaving a few nodes out of a
        kept view costs no projection. `node_names` is that of the remaining entries."""
        other = Snapshot.indexed(self.inventory, self.global_slices, self.owner,
                                 self._allocated_by_pool, self.keys, self.pods, self.kube)
        other.devices = self.devices
        entries, node_group, group_nodes = other.entries, other.node_group, other.group_nodes
        label_groups, group_index = other.label_groups, other._group_index
        cells, class_rep = other.cells, other.class_rep
        renumbered: dict[int, int] = {}  # this snapshot's label group -> the other's
        old_groups = self.node_group
        for i, e in enumerate(self.entries):
            if i in gone:
                continue
            index = len(entries)
            group = renumbered.get(old_groups[i])
            if group is None:
                group = renumbered[old_groups[i]] = len(label_groups)
                label_groups.append(e.node.labels)
                group_nodes.append([])
                group_index[e.labels] = group
            group_nodes[group].append(index)
            node_group.append(group)
            cell = (group, e.key)
            cells[cell] = cells.get(cell, 0) + 1
            if e.key not in class_rep:
                class_rep[e.key] = index
            entries.append(e)
        other._own_groups = set(range(len(label_groups)))
        return other

    def replaced(self, changes: Mapping[int, _NodeEntry]) -> Snapshot:
        """This snapshot with the entries at these positions replaced by other entries of
        the same nodes, with the same labels (the hostname aside): what an incremental
        index (`fitcore.inventory`) does after a few nodes changed. Costs O(changes +
        classes) plus copying the entries list; the label groups are shared."""
        other = Snapshot.indexed(self.inventory, self.global_slices, self.owner,
                                 self._allocated_by_pool, self.keys, self.pods, self.kube)
        other.devices = self.devices
        other.entries = list(self.entries)
        other.label_groups = self.label_groups
        other.group_nodes = self.group_nodes
        other.node_group = self.node_group
        other._group_index = self._group_index  # not written: nothing is inserted
        other.cells = dict(self.cells)
        other.class_rep = dict(self.class_rep)
        lost: set[int] = set()
        for i, e in changes.items():
            old = other.entries[i]
            assert old.node.name == e.node.name and old.labels == e.labels
            other.entries[i] = e
            group = other.node_group[i]
            cell = (group, old.key)
            other.cells[cell] -= 1
            if not other.cells[cell]:
                del other.cells[cell]
            cell = (group, e.key)
            other.cells[cell] = other.cells.get(cell, 0) + 1
            if other.class_rep.get(old.key) == i:
                lost.add(old.key)
            rep = other.class_rep.get(e.key)
            if rep is None or i < rep:
                other.class_rep[e.key] = i
        lost = {k for k in lost if other.entries[other.class_rep[k]].key != k}
        if lost:  # a class lost its first node: find its new first node, if any
            for key in lost:
                other.class_rep.pop(key, None)
            for i, e in enumerate(other.entries):
                if e.key in lost and e.key not in other.class_rep:
                    other.class_rep[e.key] = i
        if "node_names" in self.__dict__:
            other.__dict__["node_names"] = self.__dict__["node_names"]
        return other

    @classmethod
    def indexed(cls, inventory: model.Inventory, global_slices: list[model.ResourceSlice],
                owner: Mapping[PoolKey, str],
                allocated_by_pool: dict[PoolKey, list[tuple[Any, ...]]],
                keys: dict[Any, int], pods: Sequence[podaffinity.BoundPod] = (),
                kube: versions.KubeVersion = versions.DEFAULT) -> Snapshot:
        """A snapshot without nodes over an index its caller keeps up to date
        (`fitcore.inventory`): the slices that are not node-local, the owner node of each
        node-local pool, and per pool what is allocated in it, as ("d", device),
        ("s", device) and ("c", device, sorted consumed amounts); the bound pods (for pod
        (anti-)affinity) and the Kubernetes version whose scheduler decides. Add nodes with
        `entry` and `insert`, in name order. `inventory.allocated` is not read."""
        other = Snapshot.__new__(Snapshot)
        other.inventory = inventory
        other.entries = []
        other.keys = keys
        other.label_groups = []
        other.group_nodes = []
        other.node_group = []
        other._group_index = {}
        other._own_groups = set()
        other.cells = {}
        other.class_rep = {}
        other.devices = 0
        other.scratch = {}
        other.pods = pods
        other.kube = kube
        other.global_slices = global_slices
        other._allocated_by_pool = allocated_by_pool
        other.owner = owner
        return other

    @functools.cached_property
    def node_names(self) -> frozenset[str]:
        """Names of all nodes (computed once per snapshot)."""
        return frozenset(e.node.name for e in self.entries)

    def device_count(self) -> int:
        return self.devices

