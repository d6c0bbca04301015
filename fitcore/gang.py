"""Gang placement: can every pod of a workload be placed on the nodes that exist, now?

The scheduler places pods one at a time; a gang is admitted only when all of its pods
(or at least `minCount` of a pod set) can be placed together. `place` answers that with
the scheduler's own filters: node selection (nodeSelector and required node affinity),
node taints against pod tolerations, allocatable minus what bound pods request, and DRA
through `api.allocate`, carrying each pod's device allocation forward to the next pod.

Design: equivalence classes of nodes.
- The pods of one pod set are identical, and so are many nodes. Two nodes are in the same
  *class* when they have the same taints, the same free resources, and node-local
  ResourceSlices of the same shape: the same devices (names, attributes, capacity,
  counters) in pools that sort the same way, with the same devices already allocated.
  Pool and slice names do not count: allocation results on one node of a class map onto
  another by pool position.
- For a class and a pod set, one representative node is filled pod by pod (as the
  scheduler would) until a pod no longer fits; the sequence of allocations is cached (in
  a `Memo`, by class, representative and pod set, so that the several searches planning
  runs share it). A node that received k pods moves to the derived class (class, pod set,
  k), which is again shared by all nodes that received the same. So 1,000 identical nodes
  cost about what one costs.
- Labels matter only to node selection and topology: they are evaluated per group of
  nodes with identical labels (the hostname label aside). A decision works on *cells*,
  (label group, class) with a node count, and visits single nodes only in the domain
  where it places pods.
- Pod sets are placed in order; when that fails, the most demanding first, then the
  reverse, so that a launcher does not take the room only some nodes have for workers.
- A node that sees pools which are not node-local (allNodes, node selectors, devices
  with per-device node selection, counter slices without a node) is its own class, and
  its cache entries are keyed by what the gang has allocated from such pools so far.

Topology: a pod set with a required topology label is placed in one domain (one value of
that node label). The domains are ranked by how many of its pods they can hold, and the
smallest domain that holds them all is chosen (best fit, as Kueue's topology-aware
scheduling does), leaving large domains for large gangs.

Shared ResourceClaims (`resourceClaimName`): allocated once. A claim not yet allocated is
allocated with the first pod that uses it, and every pod using it must then land on that
node (the simplest correct rule for a node-local allocation). A claim that the inventory
already shows allocated restricts its pods to the nodes its allocation names.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

from fitcore import (
    api,
    extended,
    model,
    multinode,
    podaffinity,
    pools,
    predicates,
    values,
    versions,
)
from fitcore import reasons as codes

HOSTNAME_LABEL = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


# ---------------------------------------------------------------------------- model


@dataclasses.dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (core/v1 semantics; an empty key with Exists tolerates all)."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: model.Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclasses.dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's `spec.resourceClaims`.

    `shared`: named by `resourceClaimName`, one claim for every pod that names it;
    otherwise each pod gets its own claim from a ResourceClaimTemplate.
    `allocated`: for a shared claim that is already allocated, its devices, and
    `allocated_nodes` the nodes where that allocation is usable (None: any node).
    """

    name: str
    claim: model.Claim
    shared: bool = False
    allocated: tuple[model.AllocatedDevice, ...] | None = None
    allocated_nodes: frozenset[str] | None = None
    # The allocation's nodeSelector when it selects by labels (a multi-node allocation).
    allocated_selector: model.NodeSelector | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PodSet:
    """`count` identical pods; at least `min_count` of them must be placed (default all)."""

    name: str
    count: int
    min_count: int | None = None
    requests: Mapping[str, values.Quantity] = dataclasses.field(default_factory=dict)
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    affinity: model.NodeSelector | None = None
    tolerations: tuple[Toleration, ...] = ()
    claims: tuple[PodClaim, ...] = ()
    topology: str | None = None  # node label: all pods in one domain (one value of it)
    # Per container requests, for DRA extended resources (fitcore.extended).
    containers: tuple[extended.Container, ...] = ()
    # Labels and required pod (anti-)affinity / topology spread (fitcore.podaffinity).
    rules: podaffinity.Rules | None = None

    @property
    def needed(self) -> int:
        return self.count if self.min_count is None else min(self.min_count, self.count)


@dataclasses.dataclass(frozen=True, slots=True)
class Gang:
    """The pods of one workload, which are admitted all together or not at all."""

    name: str
    namespace: str = "default"
    kind: str = "Workload"
    pod_sets: tuple[PodSet, ...] = ()
    source: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """Where one pod goes, and the devices each of its claims gets there.

    The search finds devices on a class representative; `pools` maps the
    representative's pools (driver, pool) to this node's, or, for classes of a gang's
    projection (`fitcore.projection`), the representative's devices (DeviceId) to this
    node's equivalent ones; `devices` applies it when read, so that a decision does not
    pay for naming devices nobody asks about.
    """

    pod_set: str
    index: int
    node: str
    claims: tuple[tuple[str, tuple[model.DeviceResult, ...]], ...] = ()
    pools: Mapping[tuple[str, ...], tuple[str, ...]] | None = None

    @property
    def devices(self) -> tuple[tuple[str, tuple[model.DeviceResult, ...]], ...]:
        """(pod claim name, device results) per claim, in this node's pool names."""
        if not self.pools:
            return self.claims
        return tuple((name, remap(results, self.pools)) for name, results in self.claims)


def remap(results: tuple[model.DeviceResult, ...],
          pools: Mapping[tuple[str, ...], tuple[str, ...]]) -> tuple[model.DeviceResult, ...]:
    """Results on a class representative as results on another node of its class:
    `pools` maps whole devices (DeviceId -> DeviceId) or pools ((driver, pool) pairs)."""
    out = []
    for r in results:
        to = pools.get(r.id)
        if to is not None:
            out.append(model.DeviceResult(r.request, model.DeviceId(*to), r.admin_access,
                                          r.shared, r.consumed_capacity))
            continue
        to = pools.get((r.id.driver, r.id.pool))
        out.append(r if to is None else model.DeviceResult(
            r.request, model.DeviceId(to[0], to[1], r.id.device), r.admin_access, r.shared,
            r.consumed_capacity))
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    seconds: float = 0.0
    nodes: int = 0
    devices: int = 0
    steps: int = 0
    classes: int = 0
    allocations: int = 0  # calls into the per-node allocator


GangVerdict = Literal["fits", "no-fit", "undecided"]
Category = Literal["capacity", "configuration", "coordination"]


@dataclasses.dataclass(frozen=True, slots=True)
class GangResult:
    """`fits`: `placements` holds every placed pod, in the order its devices were found:
    each pod's devices assume the pods before it hold theirs, so the allocation holds
    when the pods are bound in this order (another order may lead kube-scheduler to other
    devices). `no-fit`: `reasons` says why, and
    `category` is `configuration` when some pod set fits no node at all even alone, else
    `capacity`. `undecided`: the allocator's work budget ran out somewhere."""

    verdict: GangVerdict
    placements: tuple[Placement, ...] = ()
    reasons: tuple[str, ...] = ()
    category: Category | None = None
    domains: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Per pod set: how many pods one node of some class could host (0: none anywhere).
    hostable: Mapping[str, int] = dataclasses.field(default_factory=dict)
    stats: Stats = dataclasses.field(default_factory=Stats)
    # `reasons` for programs: details[i].message == reasons[i].
    details: tuple[codes.Reason, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"


# ------------------------------------------------------------------------- snapshot

_ZERO = Fraction(0)
_UNBOUNDED = 1 << 40
_MAX_KINDS = 6  # kinds of nodes an explanation lists
PoolKey = tuple[str, str]


def _device_key(d: model.Device) -> tuple[Any, ...]:
    return (d.name, tuple(sorted(d.attributes.items())), tuple(sorted(d.capacity.items())),
            tuple((c.counter_set, tuple(sorted(c.counters.items())))
                  for c in d.consumes_counters),
            d.taints, d.allow_multiple_allocations, d.binding_conditions, d.binds_to_node)


def slice_shape(s: model.ResourceSlice) -> tuple[Any, ...]:
    """What of a node-local slice matters to allocation, without slice/pool/node names."""
    return (s.driver, s.generation, s.resource_slice_count,
            tuple(_device_key(d) for d in s.devices),
            tuple((c.name, tuple(sorted(c.counters.items()))) for c in s.shared_counters))


@dataclasses.dataclass(slots=True)
class _NodeEntry:
    node: model.Node
    labels: tuple[tuple[str, str], ...]  # labels but the hostname: the label group's key
    local_pools: tuple[PoolKey, ...]  # in allocator order (driver, pool name)
    local_slices: tuple[model.ResourceSlice, ...]
    sees_global: bool
    key: int  # class id (interned class key)
    free: dict[str, Fraction]
    devices: int  # local devices not allocated exclusively (an upper bound for counting)
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
              fingerprint: tuple[Any, ...] = (), own_class: int | None = None) -> _NodeEntry:
        """Index one node (with its node-local pools) without adding it.

        `own_class`: the node is a class of its own, told apart by this number (a caller
        that classes nodes itself, `fitcore.inventory`, numbers each version of a node),
        and the shapes of its pools are not computed."""
        labels = tuple(sorted((k, v) for k, v in n.labels.items() if k != HOSTNAME_LABEL))
        local = sorted(local, key=lambda x: x[0])
        local_slices: list[model.ResourceSlice] = []
        pool_shapes: list[Any] = []  # per pool: its shape id, then what is allocated
        devices = 0
        for pk, group_slices in local:
            group_slices = sorted(group_slices, key=lambda s: s.name)
            local_slices.extend(group_slices)
            if own_class is None:
                pool_shapes.append(self._pool_shape(group_slices, shapes))
            taken = self._allocated_by_pool.get(pk, ())
            devices += sum(len(s.devices) for s in group_slices)
            devices -= sum(1 for t in taken if t[0] == "d")
            if own_class is None:
                pool_shapes.append(tuple(sorted(taken)))
        if any(d.allow_multiple_allocations for s in local_slices for d in s.devices):
            devices = _UNBOUNDED  # shared devices: counting cannot bound the pods
        sees_global = any(pools.slice_relevant(n, s) for s in self.global_slices)
        free: dict[str, Fraction] = {k: q.value for k, q in n.allocatable.items()}
        for k, q in used.items():
            free[k] = free.get(k, _ZERO) - q.value
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
        pristine = not any(self._allocated_by_pool.get(pk) for pk, _ in local)
        return _NodeEntry(n, labels, tuple(pk for pk, _ in local), tuple(local_slices),
                          sees_global, self.intern(key), free, devices, pristine, fingerprint)

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
        for e in entries:
            other.insert(e)
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


# --------------------------------------------------------------------------- search


@dataclasses.dataclass(slots=True)
class _Class:
    """Nodes that answer every question alike; `rep` answers for all of them."""

    key: int
    rep: int
    extra: tuple[model.AllocatedDevice, ...]  # hypothetical allocations on rep
    free: dict[str, Fraction]
    taints: tuple[model.Taint, ...]
    unschedulable: bool
    devices: int
    pristine: bool = False  # nothing allocated on rep's local devices, nor hypothetically


@dataclasses.dataclass(slots=True)
class _Fill:
    """A representative filled pod by pod: allocations[i] is pod i's, in rep's device
    names; `stop` says why no more fit (empty while not yet known)."""

    allocations: list[tuple[tuple[model.DeviceResult, ...], ...]]
    stop: str = ""
    undecided: bool = False
    code: str = ""  # `stop` for programs (a fitcore.reasons code)
    resource: str = ""  # the node resource that ran out


class Memo:
    """Cache of fills by (class key, pod variant), shared by searches over one gang."""

    def keep(self, pod_set: PodSet) -> int:
        """The identity of a pod set in memo keys (kept alive with the memo)."""
        self._pod_sets.setdefault(id(pod_set), pod_set)
        return id(pod_set)

    def intern(self, key: tuple[Any, ...]) -> int:
        have = self.derived.get(key)
        if have is None:
            have = self.derived[key] = -1 - len(self.derived)
        return have

    def __init__(self) -> None:
        self.fills: dict[tuple[Any, ...], _Fill] = {}
        # Derived classes ("class c after k pods of pod set p") get negative ids here,
        # not in the long-lived snapshot.
        self.derived: dict[tuple[Any, ...], int] = {}
        # Pod sets are keyed by identity; the memo keeps them alive so that no other
        # object can take the id of one while the memo lives.
        self._pod_sets: dict[int, PodSet] = {}
        self.allocations = 0
        self.steps = 0


@dataclasses.dataclass(slots=True)
class _Variant:
    """The claims one pod of a pod set allocates at one position of a fill."""

    first: list[PodClaim]  # claims of the first pod on a node
    rest: list[PodClaim]  # claims of every later pod on the same node

    def claims(self, position: int) -> list[PodClaim]:
        return self.first if position == 0 else self.rest


def _resource_bound(free: Mapping[str, Fraction], requests: Mapping[str, Fraction],
                    limit: int) -> tuple[int, str]:
    """How many pods the free resources hold (capped at limit), and what runs out."""
    best, short = limit, ""
    for name, amount in requests.items():
        if amount <= 0:
            continue
        if name == "pods" and name not in free:
            continue  # a node (or shape) that does not say how many pods it takes
        have = free.get(name, _ZERO)
        n = int(have // amount) if have > 0 else 0
        if n < best:
            best, short = n, name
    return best, short


class _Search:
    def __init__(self, gang: Gang, snap: Snapshot, memo: Memo, engine: api.Engine,
                 budget: int) -> None:
        self.gang = gang
        self.snap = snap
        self.memo = memo
        self.engine = engine
        self.budget = budget
        self.classes: dict[int, _Class] = {}
        self.moved: dict[int, int] = {}  # node -> its class, once pods were placed on it
        self.cells = dict(snap.cells)
        self.global_results: list[model.DeviceResult] = []
        self.pinned: dict[str, tuple[str | None, tuple[model.DeviceResult, ...]]] = {}
        # Shared claims allocated from pools that are not node-local: the nodes their
        # devices reach (multi-node allocations; see fitcore.multinode).
        self.spans: dict[str, frozenset[str] | None] = {}
        self.undecided = False
        self.rep_inventory: dict[int, model.Inventory] = {}
        self.adapted: dict[tuple[int, int, int], tuple[_Variant, Mapping[str, Fraction]]] = {}

    # -- per-class questions ---------------------------------------------------------

    def class_of(self, node: int) -> int:
        cid = self.moved.get(node)
        return self.snap.entries[node].key if cid is None else cid

    def get_class(self, cid: int) -> _Class:
        cls = self.classes.get(cid)
        if cls is None:
            rep = self.snap.class_rep[cid]
            e = self.snap.entries[rep]
            cls = self.classes[cid] = _Class(cid, rep, (), e.free, e.node.taints,
                                             e.node.unschedulable, e.devices, e.pristine)
        return cls

    def save(self) -> tuple[Any, ...]:
        return (dict(self.moved), dict(self.cells), dict(self.pinned),
                len(self.global_results), dict(self.spans))

    def restore(self, saved: tuple[Any, ...]) -> None:
        self.moved, self.cells, self.pinned = dict(saved[0]), dict(saved[1]), dict(saved[2])
        del self.global_results[saved[3]:]
        self.spans = dict(saved[4])

    def move(self, node: int, cid: int) -> None:
        group = self.snap.node_group[node]
        old = (group, self.class_of(node))
        self.cells[old] -= 1
        if not self.cells[old]:
            del self.cells[old]
        self.cells[(group, cid)] = self.cells.get((group, cid), 0) + 1
        self.moved[node] = cid

    def _inventory(self, cls: _Class) -> model.Inventory:
        """What the allocator needs for the representative: its own pools and what is
        allocated in them (plus, if it sees any, the pools that are not node-local)."""
        inv = self.rep_inventory.get(cls.rep)
        if inv is None:
            e = self.snap.entries[cls.rep]
            if e.sees_global:
                seen = (*e.local_pools, *{(s.driver, s.pool) for s in self.snap.global_slices})
                inv = model.Inventory((*e.local_slices, *self.snap.global_slices),
                                      self.snap.inventory.classes,
                                      self.snap.local_allocated(seen))
            else:
                inv = model.Inventory(e.local_slices, self.snap.inventory.classes,
                                      self.snap.local_allocated(e.local_pools))
            self.rep_inventory[cls.rep] = inv
        return inv

    def adapt(self, cls: _Class, pod_set: PodSet, variant: _Variant,
              requests: Mapping[str, Fraction]) -> tuple[_Variant, Mapping[str, Fraction]]:
        """The pod as the scheduler sees it on nodes of this class: extended resources
        that a DeviceClass backs and the node does not advertise become a claim
        (fitcore.extended) and leave the node's resource requests."""
        if not pod_set.containers:
            return variant, requests
        key = (cls.key, self.memo.keep(pod_set), id(variant))
        have = self.adapted.get(key)
        if have is None:
            names = extended.backed(pod_set.containers, self.snap.inventory.classes)
            allocatable = {k: q.value for k, q in
                           self.snap.entries[cls.rep].node.allocatable.items()}
            via, claim = extended.for_node(pod_set.containers, self.gang.namespace,
                                           pod_set.name, allocatable,
                                           self.snap.inventory.classes, names)
            if claim is None:
                have = (variant, requests)
            else:
                pc = PodClaim(extended.CLAIM_NAME, claim)
                have = (_Variant([*variant.first, pc], [*variant.rest, pc]),
                        {k: v for k, v in requests.items() if k not in via})
            self.adapted[key] = have
        return have

    def tolerated(self, cls: _Class, pod_set: PodSet) -> str:
        """The first taint of the class that the pod set does not tolerate ("" if none)."""
        taints = cls.taints
        if cls.unschedulable:
            taints = (*taints, model.Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule"))
        for t in taints:
            if t.effect not in ("NoSchedule", "NoExecute"):
                continue
            if not any(tol.tolerates(t) for tol in pod_set.tolerations):
                return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
        return ""

    def fill(self, cls: _Class, pod_set: PodSet, variant: _Variant,
             requests: Mapping[str, Fraction], limit: int) -> _Fill:
        """Fill the class representative with up to `limit` pods, pod by pod."""
        e = self.snap.entries[cls.rep]
        # Allocations are in the representative's device names, so the representative is
        # part of the key: snapshots sharing a memo may pick different ones for a class.
        key: tuple[Any, ...] = (cls.key, e.node.name, e.exact, self.memo.keep(pod_set),
                                tuple(c.claim.key for c in variant.first),
                                tuple(c.claim.key for c in variant.rest))
        if e.sees_global:
            key = (*key, tuple((r.request, r.id) for r in self.global_results))
        f = self.memo.fills.get(key)
        if f is None:
            f = self.memo.fills[key] = _Fill([])
        if f.stop or len(f.allocations) >= limit:
            return f
        bound, short = _resource_bound(cls.free, requests, limit)
        inventory = self._inventory(cls)
        base = inventory.allocated.plus(list(cls.extra))
        carried = [r.as_allocated() for a in f.allocations for rs in a for r in rs]
        if e.sees_global:
            carried += [r.as_allocated() for r in self.global_results]
        while len(f.allocations) < limit:
            i = len(f.allocations)
            if i >= bound:
                if bound < limit:
                    f.stop = f"not enough {short}"
                    f.code, f.resource = codes.INSUFFICIENT_RESOURCE, short
                return f
            claims = variant.claims(i)
            needs = sum(r.exactly.count for c in claims for r in c.claim.requests
                        if r.exactly is not None and r.exactly.allocation_mode == "ExactCount"
                        and not r.exactly.admin_access)
            taken = sum(1 for a in f.allocations for rs in a for r in rs
                        if not r.shared and not r.admin_access)
            # Counting devices bounds the pods cheaply; on an empty node, ask the
            # allocator instead, whose answer says why this pod fits no such node.
            if (needs and not e.sees_global and cls.devices - taken < needs
                    and not (i == 0 and cls.pristine)):
                f.stop = "too few free devices"
                f.code = codes.INSUFFICIENT_DEVICES
                return f
            if not claims:
                f.allocations.append(())
                continue
            inv = model.Inventory(inventory.slices, inventory.classes, base.plus(carried))
            nf = api.allocate(e.node, inv, [c.claim for c in claims], engine=self.engine,
                              budget=self.budget, kube=self.snap.kube)
            self.memo.allocations += 1
            self.memo.steps += nf.steps
            if not nf.fits:
                f.stop = "; ".join(nf.reasons) or nf.verdict
                f.undecided = nf.verdict == "undecided"
                f.code = (codes.SEARCH_BUDGET if f.undecided else codes.CLAIM_ERROR
                          if nf.verdict == "error" else codes.DEVICES_UNAVAILABLE)
                return f
            f.allocations.append(nf.allocations)
            carried += [r.as_allocated() for rs in nf.allocations for r in rs]
        return f

    def derived(self, cls: _Class, f: _Fill, k: int, requests: Mapping[str, Fraction],
                tag: tuple[Any, ...]) -> _Class:
        """The class of a node of `cls` after it received the first k pods of fill f."""
        key = self.memo.intern((cls.key, tag, k))
        have = self.classes.get(key)
        if have is not None:
            return have
        owner = self.snap.owner
        # Devices of shared (not node-local) pools are tracked in global_results.
        extra = cls.extra + tuple(r.as_allocated() for a in f.allocations[:k] for rs in a
                                  for r in rs if (r.id.driver, r.id.pool) in owner)
        free = dict(cls.free)
        for name, amount in requests.items():
            free[name] = free.get(name, _ZERO) - amount * k
        used = sum(1 for a in f.allocations[:k] for rs in a for r in rs
                   if not r.shared and not r.admin_access)
        new = _Class(key, cls.rep, extra, free, cls.taints, cls.unschedulable,
                     cls.devices - used)
        self.classes[key] = new
        return new

    # -- remapping -------------------------------------------------------------------

    def pool_map(self, cls: _Class, node: int) -> dict[tuple[str, ...], tuple[str, ...]] | None:
        """The representative's local pools -> this node's (None when the same), or, for
        projected classes, its devices -> this node's equivalent devices."""
        if node == cls.rep:
            return None
        rep, other = self.snap.entries[cls.rep], self.snap.entries[node]
        if rep.order is not None and other.order is not None:
            devices: dict[tuple[str, ...], tuple[str, ...]] = {}
            for (a_pool, a_names), (b_pool, b_names) in zip(rep.order, other.order,
                                                            strict=True):
                for a, b in zip(a_names, b_names, strict=True):
                    if a_pool != b_pool or a != b:
                        devices[model.DeviceId(*a_pool, a)] = model.DeviceId(*b_pool, b)
            return devices or None
        src = rep.local_pools
        dst = other.local_pools
        return {a: b for a, b in zip(src, dst, strict=True) if a != b} or None


# ----------------------------------------------------------------------- placement


def fit(gang: Gang, nodes: Sequence[model.Node], inventory: model.Inventory,
        used: Mapping[str, Mapping[str, values.Quantity]] | None = None, *,
        engine: api.Engine = "auto", budget: int = api.DEFAULT_BUDGET) -> GangResult:
    """Whether the whole gang can be placed on `nodes` now (all or nothing)."""
    return place(gang, Snapshot(nodes, inventory, used), engine=engine, budget=budget)


def place(gang: Gang, snapshot: Snapshot, *, memo: Memo | None = None,
          engine: api.Engine = "auto", budget: int = api.DEFAULT_BUDGET) -> GangResult:
    """`fit` on a prepared Snapshot; `memo` may be shared by searches over one gang.

    Pod sets are placed in order, each pod by pod as the scheduler would. When that
    fails and there are several pod sets, the most demanding ones (devices per pod, then
    pods) are tried first, and then the reverse order: a launcher placed first must not
    take the room of the workers that only some nodes can host."""
    started = time.perf_counter()
    memo = memo if memo is not None else Memo()
    before_alloc, before_steps = memo.allocations, memo.steps
    attempt = _attempt(gang, gang.pod_sets, snapshot, memo, engine, budget)
    if attempt.failed and len(gang.pod_sets) > 1:
        demanding = tuple(sorted(gang.pod_sets, key=lambda ps: (-_devices_per_pod(ps),
                                                                -ps.count)))
        for order in (demanding, tuple(reversed(gang.pod_sets))):
            if order == gang.pod_sets:
                continue
            other = _attempt(gang, order, snapshot, memo, engine, budget)
            if not other.failed:
                attempt = other  # placements stay in the order their devices were found
                break
    search = attempt.search
    stats = Stats(time.perf_counter() - started, len(snapshot.entries), snapshot.devices,
                  memo.steps - before_steps, len(search.classes),
                  memo.allocations - before_alloc)
    hostable = attempt.hostable
    if not attempt.failed:
        return GangResult("fits", tuple(attempt.placements), domains=attempt.domains,
                          hostable=hostable, stats=stats)
    for pod_set in gang.pod_sets:
        if hostable[pod_set.name] == 0 and len(gang.pod_sets) > 1:
            # Maybe only because earlier pod sets took the room: ask for one pod alone.
            alone = dataclasses.replace(gang, pod_sets=(dataclasses.replace(
                pod_set, count=1, min_count=None),))
            if place(alone, snapshot, memo=memo, engine=engine, budget=budget).fits:
                hostable[pod_set.name] = 1
    verdict: GangVerdict = "undecided" if search.undecided else "no-fit"
    category: Category = "configuration" if any(v == 0 for v in hostable.values()) \
        else "capacity"
    return GangResult(verdict, (), tuple(r.message for r in attempt.reasons), category,
                      attempt.domains, hostable, stats, tuple(attempt.reasons))


@dataclasses.dataclass(slots=True)
class _Attempt:
    search: _Search
    failed: bool
    placements: list[Placement]
    reasons: list[codes.Reason]
    domains: dict[str, str]
    hostable: dict[str, int]


def _attempt(gang: Gang, order: Sequence[PodSet], snapshot: Snapshot, memo: Memo,
             engine: api.Engine, budget: int) -> _Attempt:
    """Place the pod sets in this order (every one, to explain every failure)."""
    search = _Search(gang, snapshot, memo, engine, budget)
    out = _Attempt(search, False, [], [], {}, {})
    for pod_set in order:
        ok, why, domain, best = _place_pod_set(search, pod_set, out.placements)
        out.hostable[pod_set.name] = best
        if domain is not None:
            out.domains[pod_set.name] = domain
        if not ok:
            out.failed = True
            out.reasons.extend(why)
    return out


def _devices_per_pod(pod_set: PodSet) -> int:
    return sum(r.exactly.count for c in pod_set.claims for r in c.claim.requests
               if r.exactly is not None)


def _matcher(pod_set: PodSet) -> tuple[Callable[[model.Node], bool], bool]:
    """Node selection for a pod set, and whether it looks at more than shared labels
    (the hostname label or node fields), so that it must be asked per node."""
    per_node = HOSTNAME_LABEL in pod_set.node_selector or (
        pod_set.affinity is not None and any(
            t.match_fields or any(r.key == HOSTNAME_LABEL for r in t.match_expressions)
            for t in pod_set.affinity.terms))

    def matches(node: model.Node) -> bool:
        for k, v in pod_set.node_selector.items():
            if node.labels.get(k) != v:
                return False
        return pod_set.affinity is None or predicates.selector_matches(pod_set.affinity, node)

    return matches, per_node


def _requests(pod_set: PodSet) -> dict[str, Fraction]:
    out = {k: q.value for k, q in pod_set.requests.items()}
    out["pods"] = out.get("pods", _ZERO) + 1
    return out


#: Nodes that look alike to one pod set: (label group, node or None, class, nodes) for a
#: cell, or a single node when selection must be asked per node.
_Unit = tuple[int, "int | None", int, int]


def _place_pod_set(search: _Search, pod_set: PodSet,
                   placements: list[Placement]
                   ) -> tuple[bool, list[codes.Reason], str | None, int]:
    """Place one pod set; append its placements. Returns (ok, reasons, domain, best)
    where best is the most pods of this set that one node could host.

    Pods that share a claim not yet allocated are first placed all on one node. When
    that fails and some pools are not node-local, they are placed as the scheduler
    does: the first pod allocates the claim, and the others go wherever its devices
    reach (a multi-node allocation), pod by pod."""
    saved, mark = search.save(), len(placements)
    result = _place_pods(search, pod_set, placements)
    if result[0] or pod_set.count < 2 or not search.snap.global_slices or not any(
            pc.shared and pc.allocated is None and pc.claim.key not in search.pinned
            for pc in pod_set.claims):
        return result
    search.restore(saved)
    del placements[mark:]
    first = dataclasses.replace(pod_set, count=1, min_count=None)
    ok, _, domain, best = _place_pods(search, first, placements)
    if ok:
        rest = dataclasses.replace(pod_set, count=pod_set.count - 1, min_count=(
            None if pod_set.min_count is None else max(pod_set.min_count - 1, 1)))
        ok2, _, domain2, best2 = _place_pods(search, rest, placements)
        if ok2 and (domain is None or domain2 in (None, domain)):
            return True, [], domain, max(best, best2)
    search.restore(saved)
    del placements[mark:]
    return result


def _place_pods(search: _Search, pod_set: PodSet, placements: list[Placement]
                ) -> tuple[bool, list[codes.Reason], str | None, int]:
    """Place these pods, all at once (see `_place_pod_set`)."""
    snap = search.snap
    label = f"pod set {pod_set.name}"
    requests = _requests(pod_set)
    matches, per_node = _matcher(pod_set)
    # Shared claims: already allocated (restrict nodes), pinned by an earlier pod set of
    # this gang (restrict nodes), or to be allocated with this pod set's first pod.
    allowed: set[str] | None = None
    first_claims: list[PodClaim] = []
    rest_claims: list[PodClaim] = []
    unpinned: list[PodClaim] = []
    for pc in pod_set.claims:
        if not pc.shared:
            first_claims.append(pc)
            rest_claims.append(pc)
            continue
        if pc.allocated is not None:
            reach = pc.allocated_nodes
            if pc.allocated_selector is not None:
                reach = multinode.matching(pc.allocated_selector,
                                           [e.node for e in snap.entries])
            if reach is not None:
                allowed = set(reach) if allowed is None else allowed & reach
            continue
        pin = search.pinned.get(pc.claim.key)
        if pin is not None:
            if pin[0] is not None:
                allowed = {pin[0]} if allowed is None else allowed & {pin[0]}
            elif (spans := search.spans.get(pc.claim.key)) is not None:
                allowed = set(spans) if allowed is None else allowed & spans
            continue
        first_claims.append(pc)
        unpinned.append(pc)
    variant = _Variant(first_claims, rest_claims)
    single_node = bool(unpinned)
    gate = _gate(search, pod_set, placements)
    topology = pod_set.topology
    if gate is not None:
        per_node = True
        topology = topology or gate.self_key
    need, want = pod_set.needed, pod_set.count
    # The units to consider: (label group, node or None, class, nodes) for each cell, or
    # single nodes when selection is per node.
    units: list[_Unit] = []
    skipped = {"selector": 0, "taint": 0, "topology": 0, "shared": 0, "affinity": 0}
    if allowed is not None or per_node:
        names = allowed
        for i, e in enumerate(snap.entries):
            if names is not None and e.node.name not in names:
                skipped["shared"] += 1
                continue
            units.append((snap.node_group[i], i, search.class_of(i), 1))
    else:
        units = [(g, None, cid, n) for (g, cid), n in search.cells.items()]
    # How many pods one node of each class holds; domain totals.
    counts: dict[int, int] = {}
    fills: dict[int, _Fill] = {}
    group_info: dict[int, tuple[bool, str | None]] = {}  # selected?, domain
    taint_example = ""
    # Why a class holds fewer pods -> (nodes, example node); keyed by class too, so that
    # each kind of node (existing or new) keeps its own example.
    short: dict[tuple[str, int], tuple[int, str]] = {}
    short_why: dict[tuple[str, int], _Fill] = {}  # the fill behind each entry of short
    short_nodes: dict[int, int] = {}  # class -> nodes of it that hold fewer than wanted
    totals: dict[str, int] = {}
    domain_units: dict[str, list[_Unit]] = {}
    best = 0
    entries = snap.entries
    room: dict[tuple[str, str], int] = {}  # pods per (topology key, value), with a gate
    for u in units:
        group, node_index, cid, count = u
        info = group_info.get(group) if node_index is None else None
        if info is None:
            node = entries[node_index if node_index is not None else
                           snap.group_nodes[group][0]].node
            info = (matches(node), node.labels.get(topology) if topology is not None else "")
            if node_index is None:
                group_info[group] = info
        ok, domain = info
        if not ok:
            skipped["selector"] += count
            continue
        if domain is None:
            skipped["topology"] += count
            continue
        if gate is not None and node_index is not None and not gate.node_ok(
                entries[node_index].node.name):
            skipped["affinity"] += count
            continue
        n = counts.get(cid)
        if n is None:
            cls = search.get_class(cid)
            bad = search.tolerated(cls, pod_set)
            if bad:
                n = -1
                example = entries[node_index if node_index is not None else cls.rep].node.name
                taint_example = taint_example or f"{bad} (node {example})"
            else:
                f = search.fill(cls, pod_set, *search.adapt(cls, pod_set, variant, requests),
                                want)
                fills[cid] = f
                n = len(f.allocations)
                search.undecided = search.undecided or f.undecided
            counts[cid] = n
        if n < 0:
            skipped["taint"] += count
            continue
        if n < want:
            short_nodes[cid] = short_nodes.get(cid, 0) + count
        if gate is not None and node_index is not None and n > 0:
            name = entries[node_index].node.name
            n = gate.room(name, room, n)
            gate.took(name, room, n)
        if n > best:
            best = n
        if n == 0:
            continue
        total = totals.get(domain, 0)
        totals[domain] = max(total, n) if single_node else total + n * count
        du = domain_units.get(domain)
        if du is None:
            domain_units[domain] = [u]
        else:
            du.append(u)
    for cid, count in short_nodes.items():
        stop = fills[cid].stop
        if stop:
            example = entries[search.get_class(cid).rep].node.name
            short[(_holds(counts[cid], stop), cid)] = (count, example)
            short_why[(_holds(counts[cid], stop), cid)] = fills[cid]
    ranked = [(t, d) for d, t in totals.items()]
    # Best fit: the smallest domain that holds every pod; else the largest holding minCount.
    full = sorted((t, d) for t, d in ranked if t >= want)
    partial = sorted(((t, d) for t, d in ranked if need <= t < want), key=lambda x: (-x[0], x[1]))
    choice = full[0] if full else (partial[0] if partial else None)
    if choice is None:
        return False, _explain(search.gang, pod_set, label, need, want, ranked, skipped,
                               taint_example, short, short_why, counts, single_node,
                               len(snap.entries)), None, best
    index_base = sum(1 for p in placements if p.pod_set == pod_set.name)
    tag = (search.memo.keep(pod_set), tuple(c.claim.key for c in variant.first),
           tuple(c.claim.key for c in variant.rest))
    # Domain totals are exact, except where pods compete for devices of pools that are
    # not node-local; then a domain may fall short, and the next one is tried.
    for t, domain in [*full, *partial]:
        total = min(t, want)
        saved = search.save()
        mark = len(placements)
        placed = _fill_domain(search, pod_set, variant, requests, total, single_node,
                              domain_units[domain], counts, fills, placements, index_base, tag,
                              gate)
        if placed >= total or (t < want and placed >= need):
            return True, [], (domain if pod_set.topology else None), best
        search.restore(saved)
        del placements[mark:]
    return False, [codes.reason(
        codes.SHARED_POOLS_EXHAUSTED,
        f"{label}: needs {want} pods; devices that all nodes share (not node-local) ran out "
        "before they were all placed", object=search.gang.label, pod_set=pod_set.name,
        field=template_path(search.gang, pod_set) + ".resourceClaims")], None, best


def _gate(search: _Search, pod_set: PodSet, placements: Sequence[Placement]
          ) -> podaffinity.Gate | None:
    """The pod set's pod (anti-)affinity and spread rules against the bound pods and the
    gang's pods placed so far (None when it has none and no bound pod has any)."""
    snap = search.snap
    rules = pod_set.rules or podaffinity.Rules()
    ns = search.gang.namespace
    by_set = {ps.name: ps.rules for ps in search.gang.pod_sets}
    pods = [*snap.pods]
    for p in placements:
        r = by_set.get(p.pod_set)
        if r is not None:
            pods.append(podaffinity.BoundPod(p.node, ns, r.labels, r.anti_affinity))
    # Only pods that one of the set's terms selects, or whose anti-affinity selects the
    # set's pods, can matter (most bound pods do neither).
    terms = (*rules.affinity, *rules.anti_affinity)
    others = [p for p in pods
              if any(t.selects(ns, p.namespace, p.labels) for t in terms)
              or any(t.selects(p.namespace, ns, rules.labels) for t in p.anti_affinity)]
    if rules.empty and not others:
        return None
    # Kept with the entries list it was made from: an incremental inventory shares its
    # scratch between successive snapshots (whose nodes and labels may differ).
    have = snap.scratch.get("node-labels")
    if have is None or have[0] is not snap.entries:
        have = snap.scratch["node-labels"] = (snap.entries, {e.node.name: e.node.labels
                                                             for e in snap.entries})
    return podaffinity.Gate(rules, ns, others, have[1])


def _fill_domain(search: _Search, pod_set: PodSet, variant: _Variant,
                 requests: Mapping[str, Fraction], total: int, single_node: bool,
                 units: list[_Unit], counts: Mapping[int, int], fills: Mapping[int, _Fill],
                 placements: list[Placement], index_base: int, tag: tuple[Any, ...],
                 gate: podaffinity.Gate | None = None) -> int:
    """Place up to `total` pods on the nodes of one domain, in name order."""
    room: dict[tuple[str, str], int] = {}
    snap = search.snap
    nodes: set[int] = set()
    for group, node_index, _, _ in units:
        if node_index is not None:
            nodes.add(node_index)
        else:
            nodes.update(snap.group_nodes[group])
    placed = 0
    for i in sorted(nodes):
        if placed >= total:
            break
        cid = search.class_of(i)
        cls = search.get_class(cid)
        entry = snap.entries[i]
        k = min(max(counts.get(cid, 0), 0), total - placed)
        if gate is not None:
            k = gate.room(snap.entries[i].node.name, room, k)
        if k <= 0:  # a class that holds none (or that the pod set does not tolerate)
            continue
        pod_variant, pod_requests = search.adapt(cls, pod_set, variant, requests)
        if entry.sees_global:  # what the gang took from shared pools changes the answer
            f = search.fill(cls, pod_set, pod_variant, pod_requests, total - placed)
            k = min(len(f.allocations), k)
        else:
            f = fills[cid]
        if k <= 0 or (single_node and k < total):
            continue
        node_name = entry.node.name
        pools_map = search.pool_map(cls, i)
        for j in range(k):
            claims = []
            for pc, results in zip(pod_variant.claims(j), f.allocations[j], strict=True):
                claims.append((pc.name, results))
                if pc.shared or entry.sees_global:
                    mapped = remap(results, pools_map) if pools_map else results
                    if pc.shared:
                        local = any((r.id.driver, r.id.pool) in snap.owner for r in mapped)
                        search.pinned[pc.claim.key] = (node_name if local else None, mapped)
                        if not local:  # pods of the claim may run where its devices reach
                            search.spans[pc.claim.key] = multinode.usable_nodes(
                                mapped, [e.node for e in snap.entries], snap.owner,
                                snap.global_slices)
                    if entry.sees_global:
                        search.global_results.extend(
                            r for r in mapped if (r.id.driver, r.id.pool) not in snap.owner)
            claims.extend(_pinned_devices(search, pod_set, {name for name, _ in claims}))
            placements.append(Placement(pod_set.name, index_base + placed + j, node_name,
                                        tuple(claims), pools_map))
        if gate is not None:
            gate.took(node_name, room, k)
        search.move(i, search.derived(cls, f, k, pod_requests, tag).key)
        placed += k
        if single_node:
            break
    return placed


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _nodes(n: int, one: str = "does", many: str = "do") -> str:
    return f"1 node {one}" if n == 1 else f"{n} nodes {many}"


def _holds(n: int, stop: str) -> str:
    return f"holds none of its pods: {stop}" if n == 0 else \
        f"holds {n} of its pods, then {stop}"


def _pinned_devices(search: _Search, pod_set: PodSet, have: set[str]
                    ) -> list[tuple[str, tuple[model.DeviceResult, ...]]]:
    """Devices of shared claims this pod uses but did not allocate itself."""
    out = []
    for pc in pod_set.claims:
        if not pc.shared or pc.name in have:
            continue
        pin = search.pinned.get(pc.claim.key)
        if pin is not None:
            out.append((pc.name, pin[1]))
        elif pc.allocated is not None:
            out.append((pc.name, tuple(model.DeviceResult("", a.id) for a in pc.allocated)))
    return out


def template_path(gang: Gang, pod_set: PodSet) -> str:
    """The path of a pod set's pod spec in the gang's object."""
    if gang.kind == "Job":
        return "spec.template.spec"
    index = next((i for i, ps in enumerate(gang.pod_sets) if ps.name == pod_set.name), 0)
    return f"spec.podSets[{index}].template.spec"


def _explain(gang: Gang, pod_set: PodSet, label: str, need: int, want: int,
             ranked: list[tuple[int, str]], skipped: Mapping[str, int], taint_example: str,
             short: Mapping[tuple[str, int], tuple[int, str]],
             short_why: Mapping[tuple[str, int], _Fill], counts: Mapping[int, int],
             single_node: bool, nodes: int) -> list[codes.Reason]:
    wanted = _plural(want, "pod") if need == want else f"at least {need} of {want} pods"
    spec = template_path(gang, pod_set)
    out: list[codes.Reason] = []

    def add(code: str, message: str, **where: Any) -> None:
        where.setdefault("field", spec)
        out.append(codes.reason(code, message, object=gang.label, pod_set=pod_set.name,
                                  **where))

    most = max((t for t, _ in ranked), default=0)
    if pod_set.topology:
        where = min(ranked, key=lambda x: (-x[0], x[1]))[1] if ranked else None
        add(codes.TOPOLOGY_DOMAIN_TOO_SMALL,
            f"{label}: needs {wanted} in one domain of {pod_set.topology}; "
            + (f"the largest, {where}, holds {most}" if where is not None
               else "no domain holds any"), held=most)
    elif single_node:
        add(codes.SHARED_CLAIM_ONE_NODE,
            f"{label}: its pods share a ResourceClaim, so all {wanted} must run on one "
            f"node; the best node holds {most}", held=most, field=f"{spec}.resourceClaims")
    else:
        add(codes.TOO_FEW_PODS, f"{label}: needs {wanted}; "
            + (f"the {nodes} nodes hold {most}" if nodes != 1 else
               f"the only node holds {most}"), held=most)
    if skipped["shared"]:
        add(codes.SHARED_CLAIM_NODES,
            f"{label}: {skipped['shared']} node(s) cannot use its allocated shared claims",
            field=f"{spec}.resourceClaims")
    if skipped["selector"]:
        add(codes.NODE_SELECTOR,
            f"{label}: {_nodes(skipped['selector'])} not match its nodeSelector or "
            "required node affinity", field=f"{spec}.nodeSelector")
    if skipped["topology"]:
        add(codes.TOPOLOGY_LABEL_MISSING,
            f"{label}: {_nodes(skipped['topology'], 'has', 'have')} no {pod_set.topology} "
            "label")
    for filt, filt_code in (("affinity", codes.POD_AFFINITY),
                            ("spread", codes.TOPOLOGY_SPREAD)):
        if skipped.get(filt):
            add(filt_code, f"{label}: {_nodes(skipped[filt])} not satisfy its required "
                + ("pod affinity or anti-affinity" if filt == "affinity"
                   else "topology spread constraints"),
                field=f"{spec}.{'affinity' if filt == 'affinity' else 'topologySpreadConstraints'}")
    if skipped["taint"]:
        add(codes.UNTOLERATED_TAINT,
            f"{label}: {_nodes(skipped['taint'], 'has', 'have')} a taint it does not "
            f"tolerate, e.g. {taint_example}", field=f"{spec}.tolerations",
            node=taint_example.rsplit("(node ", 1)[-1].rstrip(")") or None)
    kinds = sorted(short.items(), key=lambda x: (-x[1][0], x[1][1]))
    for key, (count, example) in kinds[:_MAX_KINDS]:
        stop, cid = key
        like = f" (and {count - 1} like it)" if count > 1 else ""
        f = short_why[key]
        code = f.code or codes.DEVICES_UNAVAILABLE
        field = (f"{spec}.containers[*].resources.requests" if code ==
                 codes.INSUFFICIENT_RESOURCE else f"{spec}.resourceClaims")
        add(code, f"{label}: node {example}{like}: {stop}", node=example, field=field,
            resource=f.resource or None, held=max(counts.get(cid, 0), 0))
    if len(kinds) > _MAX_KINDS:
        rest = sum(count for _, (count, _) in kinds[_MAX_KINDS:])
        add(codes.MORE_NODE_KINDS,
            f"{label}: {rest} more nodes of {len(kinds) - _MAX_KINDS} other kinds hold "
            "fewer pods too")
    return out
