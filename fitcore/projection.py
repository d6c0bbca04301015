"""Node classes by what a gang can observe.

`gang.Snapshot` puts two nodes in one class when their node-local slices are identical
(device names, every attribute, the same devices allocated). Real clusters defeat that:
every GPU publishes its own `uuid` and `pciBusID`, and every node has its own pattern of
devices in use, so each node is a class of its own. A gang's claims see far less. This
module computes, for one gang, a coarser class key per node that still answers every
question the gang can ask alike:

- **Attributes.** Only attributes that some selector of the gang (its DeviceClasses'
  and its requests') or some constraint could read are kept in a device's key. Which
  attributes a CEL expression reads is found from its text (`reads`): every attribute
  access must be a literal `device.attributes["domain"].id` / `["id"]`; an expression that
  touches the attribute maps in any other way (comprehensions, `size`, a computed key,
  a map bound to a variable) reads every attribute. Capacities, counters, taints,
  allowMultipleAllocations, binding conditions and the driver always stay in the key.
- **Devices as a multiset.** Device names are not observable, and a complete search's
  verdict does not depend on device order, so a pool without shared counters is keyed
  by the multiset of (device key, allocated state). Pools with counters keep their
  allocator order. Gangs with an `All` request keep every pool in order (upstream's
  answer to `All` under a constraint depends on its search order).
- **Constraint values up to renaming.** An attribute that only constraints read
  (`matchAttribute`, `distinctAttribute`: the typical `pcieRoot`) is compared for
  equality only, so its values may be renamed consistently: devices are grouped by
  value, groups are ranked by their content, and the rank replaces the value. A node
  with GPUs 3 and 11 in use and one with 5 and 9 in use (8 per root) are then one class.
- **Extended resources backed by devices** (DRA extended resources): the claim the
  scheduler would build for a pod on a node that does not advertise the resource is
  one of the gang's claims here (its class's selectors are read, its devices are
  candidates), and whether a node advertises each such resource stays in the key.
- **Free resources as far as the requests tell them apart.** A resource that one pod set
  requests is kept as how many of its pods it holds (capped at the pod count); one that
  several pod sets request is kept exactly, capped at what the whole gang requests.

`Projection.node_key` also gives the node's devices in canonical order, pool by pool
(names, turned into device ids only for nodes a placement uses). Two nodes of one class
have the same canonical sequence pool by pool, so zipping their orders maps the devices
of an allocation found on the class representative onto equivalent devices of the other
node (`gangsearch._Search.pool_map`).

Cost: a cold decision keys every device of every node once. What a device shows is
found per list of attribute names it publishes (`_layout`), whether a selector can take
it per (driver, observed attributes), its key per device (kept across gangs of the same
view); pools without counters are keyed in one pass (`_unordered`).

Exactness: for every node of a class, the number of pods of a pod set it holds, and the
reason it holds no more, are the representative's; the devices a pod gets on a node are
equivalent to, not necessarily the same as, those kube-scheduler's own pass would pick
there.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from fitcore import extended, gang, model, reads, semantics, snapshot, values

PoolKey = tuple[str, str]
#: Device keys by device identity: the device (kept alive, so that ids stay unique), its
#: interned key and its value of the renamed attribute.
DeviceKeys = dict[int, tuple[model.Device, tuple[int, str | None]]]

def _bare(name: str) -> str:
    return name.rpartition("/")[2]


#: A node's device part under a projection (`Projection._devices`): per pool its shape
#: and observable devices, the devices in canonical order, candidates, unbounded.
DevicePart = tuple[tuple[Any, ...], tuple[tuple[PoolKey, tuple[str, ...]], ...], int, bool]
#: Device parts by node name, with what they were made from: the node's slices and, per
#: pool, what is allocated in it (compared by identity).
NodeDevices = dict[str, tuple[tuple[model.ResourceSlice, ...], tuple[Any, ...], DevicePart]]

_EXACT: dict[int, tuple[values.Quantity, tuple[int, int]]] = {}
_STATES: dict[tuple[Any, ...], str] = {}


def _exact(q: values.Quantity) -> tuple[int, int]:
    """A quantity as a pair of ints: hashed far faster than its Fraction. Parsed
    quantities are shared per text (values.Quantity.parse), so this is mostly a lookup;
    the quantity is kept with its pair, so that its id stays unique."""
    hit = _EXACT.get(id(q))
    if hit is not None and hit[0] is q:
        return hit[1]
    v = q.value
    pair = (v.numerator, v.denominator)
    if len(_EXACT) > 1 << 16:
        _EXACT.clear()
    _EXACT[id(q)] = (q, pair)
    return pair


_CAPACITIES: dict[int, tuple[Any, tuple[Any, ...]]] = {}


def _capacity(capacity: Mapping[str, model.DeviceCapacity]) -> tuple[Any, ...]:
    """A device's capacities as hashable content. Devices read alike share their
    capacity map (`kube._common_device`), so this is mostly a lookup by identity; the
    map is kept with its content, so that its id stays unique."""
    if not capacity:
        return ()
    hit = _CAPACITIES.get(id(capacity))
    if hit is not None and hit[0] is capacity:
        return hit[1]
    content = tuple(sorted((name, _exact(c.value), c.request_policy)
                           for name, c in capacity.items()))
    if len(_CAPACITIES) > 1 << 16:
        _CAPACITIES.clear()
    _CAPACITIES[id(capacity)] = (capacity, content)
    return content


def _counters(consumed: tuple[model.CounterConsumption, ...]) -> tuple[Any, ...]:
    """A device's counter consumption as hashable content (shared alike)."""
    if not consumed:
        return ()
    hit = _CAPACITIES.get(id(consumed))
    if hit is not None and hit[0] is consumed:
        return hit[1]
    content = tuple((c.counter_set, tuple(sorted((n, _exact(q)) for n, q in c.counters.items())))
                    for c in consumed)
    if len(_CAPACITIES) > 1 << 16:
        _CAPACITIES.clear()
    _CAPACITIES[id(consumed)] = (consumed, content)
    return content


def _state(st: tuple[Any, ...]) -> str:
    """A device's allocated state as sortable text (states are few: found once each)."""
    found = _STATES.get(st)
    if found is None:
        if len(_STATES) > 1 << 16:
            _STATES.clear()
        found = _STATES[st] = repr(st)
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceView:
    """Which attributes of a device a gang can observe."""

    read: frozenset[str] | None  # attribute ids kept (None: all)
    relabel: str | None  # attribute id compared for equality only (constraints)
    ordered: bool  # keep device order in every pool


def extended_claims(g: gang.Gang, classes: Mapping[str, model.DeviceClass]
                    ) -> list[model.Claim]:
    """The claims the scheduler builds for the gang's pods on nodes that do not advertise
    the extended resources a DeviceClass backs (`fitcore.extended`)."""
    out = []
    for ps in g.pod_sets:
        if not ps.containers:
            continue
        names = extended.backed(ps.containers, classes)
        if names:
            _, claim = extended.for_node(ps.containers, g.namespace, ps.name, {}, classes,
                                         names)
            if claim is not None:
                out.append(claim)
    return out


def extended_names(g: gang.Gang, classes: Mapping[str, model.DeviceClass]) -> tuple[str, ...]:
    """The extended resources of the gang that some DeviceClass backs."""
    return tuple(sorted({n for ps in g.pod_sets if ps.containers
                         for n in extended.backed(ps.containers, classes)}))


def device_view(g: gang.Gang, classes: Mapping[str, model.DeviceClass]) -> DeviceView:
    """What the gang's claims (and its extended-resource claims) can see of a device."""
    read: set[str] | None = set()
    constrained: set[str] = set()
    ordered = False
    claims = [pc.claim for ps in g.pod_sets for pc in ps.claims]
    claims += extended_claims(g, classes)
    for claim in claims:
        for r in claim.requests:
            for alt in r.alternatives:
                if alt.allocation_mode == "All" or alt.admin_access:
                    ordered = True
                dc = classes.get(alt.device_class)
                expressions = (*(dc.selectors if dc else ()), *alt.selectors)
                for e in expressions:
                    got = reads.attributes(e)
                    if got is None or read is None:
                        read = None
                    else:
                        read |= got
        for k in claim.constraints:
            name = k.match_attribute or k.distinct_attribute
            if name:
                constrained.add(_bare(name))
    relabel = None
    if read is not None:
        only = constrained - read
        if len(only) == 1:
            relabel = next(iter(only))
        read |= constrained - {relabel} if relabel else constrained
    return DeviceView(frozenset(read) if read is not None else None, relabel, ordered)


#: Pods of a pod set up to which free resources tell nodes apart, at least: the cap does
#: not depend on the pod count below it, so gangs that differ only in pod counts class
#: nodes alike and share their view (`fitcore.inventory`). Any cap at or above the count
#: is exact.
FREE_CAP = 64


def _cap(count: int) -> int:
    """The cap of a pod set of `count` pods: FREE_CAP, or the power of two at or above."""
    return max(FREE_CAP, 1 << max(count - 1, 0).bit_length())


def free_view(g: gang.Gang) -> tuple[tuple[str, Fraction, int, bool], ...]:
    """Per requested resource: (name, per-pod request or the gang's total, cap, exact?).
    A resource one pod set asks for is kept as pods it holds; others exactly, capped
    (pod counts taken as their `_cap`)."""
    per: dict[str, list[tuple[Fraction, int]]] = {}
    for ps in g.pod_sets:
        reqs = {k: q.value for k, q in ps.requests.items()}
        reqs["pods"] = reqs.get("pods", Fraction(0)) + 1
        for k, v in reqs.items():
            if v > 0:
                per.setdefault(k, []).append((v, _cap(ps.count)))
    out = []
    for k, asks in sorted(per.items()):
        if len(asks) == 1:
            out.append((k, asks[0][0], asks[0][1], False))
        else:
            out.append((k, sum((v * n for v, n in asks), Fraction(0)), 0, True))
    return tuple(out)


class Projection:
    """One gang's view of nodes; keeps device keys by device identity (the device is
    kept alive with its key, so that ids stay unique) and interns class keys.

    A device that no request alternative of the gang could ever take (its class's or
    request's selectors are false, a taint is not tolerated, the capacity request does
    not fit it) is left out of the key of a pool without shared counters, with its
    allocated state: nothing the gang does can touch it. Candidacy is a function of the
    device key (which holds everything a selector can read), so it is found once per
    distinct device content."""

    def __init__(self, g: gang.Gang, classes: Mapping[str, model.DeviceClass],
                 selector: semantics.Selector, interner: dict[Any, int],
                 device_keys: DeviceKeys,
                 devices_of: Callable[[str], NodeDevices] | None = None) -> None:
        """`devices_of(signature)`: where nodes' device parts are kept for every
        projection of that `signature` (None: by this projection alone)."""
        self.view = device_view(g, classes)
        self.free = free_view(g)
        self._intern = interner
        self._device_keys = device_keys
        self._selector = selector
        claims = [pc.claim for ps in g.pod_sets for pc in ps.claims]
        claims += extended_claims(g, classes)
        self._alternatives = [(alt, classes.get(alt.device_class)) for c in claims
                              for r in c.requests for alt in r.alternatives]
        # Whether a node advertises these decides whether the scheduler allocates them.
        self._extended = extended_names(g, classes)
        self._relevant: dict[int, bool] = {}
        # Selector outcomes by (driver, observable attributes), when only those matter.
        self._selectable: dict[tuple[Any, ...], bool] = {}
        # Per list of attribute names a device publishes: (kept, renamed) names.
        self._layouts: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        # Group labels by the value of one renamed attribute.
        self._labels: dict[tuple[str, type, Any], str] = {}
        expressions = [e for alt, dc in self._alternatives
                       for e in (*(dc.selectors if dc else ()), *alt.selectors)]
        self._attributes_only = not any("capacity" in e or "allowMultipleAllocations" in e
                                        for e in expressions)
        # What the device part of a node's key depends on besides the node: gangs that
        # differ only in their pod counts or node resources share it.
        self.signature = repr((self.view, [alt for alt, _ in self._alternatives],
                               [dc for _, dc in self._alternatives]))
        self._parts: NodeDevices = devices_of(self.signature) if devices_of else {}
        # Interned device content besides attributes, by identity of the shared capacity
        # and counter maps (kept alive with their id) and the rest (`_device_key`).
        self._rests: dict[tuple[Any, ...], tuple[Any, Any, int]] = {}
        # Per attribute name: 0 not observable, 1 kept in the key, 2 the renamed one.
        self._actions: dict[str, int] = {}
        # Devices one pod of the only pod set takes for itself at least (0: unbounded).
        self._per_pod = 0
        if len(g.pod_sets) == 1:
            per_pod = 0
            for pc in g.pod_sets[0].claims:
                if pc.shared:
                    continue
                for r in pc.claim.requests:
                    counts = [a.count if a.allocation_mode == "ExactCount" and
                              not a.admin_access else 0 for a in r.alternatives]
                    per_pod += min(counts, default=0)
            self._per_pod = per_pod
        # Everything a node's class key depends on besides the node: gangs of one `key`
        # (those that differ only in pod counts, see `free_view`) class every node alike.
        self.key = repr((self.signature, self.free, self._extended, self._per_pod))

    def _maybe_selectable(self, driver: str, d: model.Device,
                          observed: tuple[Any, ...]) -> bool:
        """False when the selectors of every alternative are false on the device: then it
        is no candidate whatever its capacity or taints, and its key need not be made.
        Only used when no selector reads capacity or allowMultipleAllocations, so that
        the driver and the observable attributes (`observed`) decide."""
        key = (driver, observed)
        found = self._selectable.get(key)
        if found is None:
            found = False
            for alt, dc in self._alternatives:
                if dc is None:
                    found = True
                    break
                try:
                    if semantics.device_selectable(self._selector, dc, alt, "", driver, d):
                        found = True
                        break
                except semantics.SelectionError:
                    found = True
                    break
            self._selectable[key] = found
        return found

    def _layout(self, names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Of a device's attribute names (in its order): those kept in its key and those
        renamed, each sorted. Devices of one driver publish the same names, so this is
        found once per distinct list of names."""
        kept, relabeled = [], []
        for name in names:
            act = self._actions.get(name)
            if act is None:
                act = self._action(name)
            if act == 1:
                kept.append(name)
            elif act == 2:
                relabeled.append(name)
        found = self._layouts[names] = (tuple(sorted(kept)), tuple(sorted(relabeled)))
        return found

    def _observed(self, d: model.Device) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        """The device's observable attributes as (name, type, value) by name (the type
        tells True from 1), and the names of its renamed ones."""
        a = d.attributes
        names = tuple(a)
        layout = self._layouts.get(names)
        if layout is None:
            layout = self._layout(names)
        kept = layout[0]
        if not kept:
            return (), layout[1]
        if len(kept) == 1:
            v = a[kept[0]]
            return ((kept[0], type(v), v),), layout[1]
        return tuple([(n, type(a[n]), a[n]) for n in kept]), layout[1]

    def _action(self, name: str) -> int:
        bare = name.rpartition("/")[2]
        act = self._actions[name] = (2 if bare == self.view.relabel else
                                     1 if self.view.read is None or bare in self.view.read
                                     else 0)
        return act

    def _candidate(self, k: int, driver: str, d: model.Device) -> bool:
        """Whether some alternative of the gang could take this device (or its
        selectors fail on it, which the allocator reports)."""
        found = self._relevant.get(k)
        if found is not None:
            return found
        found = False
        for alt, dc in self._alternatives:
            if dc is None:
                found = True  # a missing class: the allocator's error, on every node
                break
            try:
                if not semantics.device_selectable(self._selector, dc, alt, "", driver, d):
                    continue
            except semantics.SelectionError:
                found = True
                break
            if semantics.taint_allows(d, alt) and semantics.capacity_take(alt, d) is not None:
                found = True
                break
        self._relevant[k] = found
        return found

    def _device_key(self, driver: str, d: model.Device, observed: tuple[Any, ...],
                    relabeled: tuple[str, ...]) -> tuple[int, str | None]:
        """The device's key (an interned id) and its value of the renamed attribute
        (`observed`, `relabeled`: from `_observed`)."""
        hit = self._device_keys.get(id(d))
        if hit is not None and hit[0] is d:
            return hit[1]
        # What a device holds besides its attributes, interned once per combination of
        # shared capacity and counter maps (devices read alike share them; kept alive
        # with their ids) and the rest.
        capacity, consumed = d.capacity, d.consumes_counters
        shared = (id(capacity), id(consumed), d.taints, d.allow_multiple_allocations,
                  d.binding_conditions, d.binds_to_node)
        found = self._rests.get(shared)
        if found is not None and found[0] is capacity and found[1] is consumed:
            rest = found[2]
        else:
            content = ("rest", _capacity(capacity), _counters(consumed), *shared[2:])
            rest = self._intern.setdefault(content, len(self._intern))
            self._rests[shared] = (capacity, consumed, rest)
        k = self._intern.setdefault(("dev", driver, observed, rest), len(self._intern))
        label = self._label(d, relabeled) if relabeled else None
        self._device_keys[id(d)] = (d, (k, label))
        return k, label

    def _label(self, d: model.Device, relabeled: tuple[str, ...]) -> str:
        """The device's values of the renamed attribute (under each domain), as text."""
        labels = self._labels
        parts = []
        for name in relabeled:
            v = d.attributes[name]
            found = labels.get((name, type(v), v))
            if found is None:
                found = labels[(name, type(v), v)] = f"{name}={v!r}"
            parts.append(found)
        return parts[0] if len(parts) == 1 else "\n".join(parts)

    def entries(self, entries: list[gang._NodeEntry],
                kept: dict[str, tuple[gang._NodeEntry, gang._NodeEntry]], limit: int,
                allocated: Mapping[PoolKey, Sequence[tuple[Any, ...]]]
                ) -> list[gang._NodeEntry]:
        """Every entry under this projection, in order: the one `kept` for the node
        while its base entry is the same object, else made (`entry`; an entry that sees
        pools that are not node-local is its own) and kept, by node name, as (base,
        projected) (`pair`). `kept` is emptied first when it holds more than `limit`
        nodes. Compiled (`fitcore/_project.pyx`) unless FITCORE_NO_EXTENSIONS=1;
        `_entries` is its reference."""
        if snapshot.compiled is not None:
            found: list[gang._NodeEntry] = snapshot.compiled.project_entries(
                self, entries, kept, limit, allocated, _STATES, _state, gang._NodeEntry)
            return found
        return self._entries(entries, kept, limit, allocated)

    def _entries(self, entries: list[gang._NodeEntry],
                 kept: dict[str, tuple[gang._NodeEntry, gang._NodeEntry]], limit: int,
                 allocated: Mapping[PoolKey, Sequence[tuple[Any, ...]]]
                 ) -> list[gang._NodeEntry]:
        """`entries` in Python (the reference of the compiled one)."""
        out = []
        for e in entries:
            hit = kept.get(e.node.name)
            if hit is None or hit[0] is not e:
                if len(kept) > limit:
                    kept.clear()
                projected = e if e.sees_global else self.entry(e, allocated)
                hit = kept[e.node.name] = pair(e, projected)
            out.append(hit[1])
        return out

    def entry(self, e: gang._NodeEntry,
              allocated: Mapping[PoolKey, Sequence[tuple[Any, ...]]]) -> gang._NodeEntry:
        """The node's index entry under this projection: its class is `node_key`'s; the
        rest is the entry's own (whose class, a class of its own per version of the node
        in `fitcore.inventory`, is kept as the fills' key). Made by the ten thousand in
        a cold decision, kept, and acyclic: left out of the collector's walks."""
        key, order = self.node_key(e, allocated)
        projected = gang._NodeEntry(e.node, e.labels, e.local_pools, e.local_slices,
                                    e.sees_global, key, e.free, e.devices, e.pristine,
                                    e.fingerprint, order, e.key)
        return projected if snapshot.compiled is None else snapshot.compiled.acyclic(projected)

    def node_key(self, e: gang._NodeEntry,
                 allocated: Mapping[PoolKey, Sequence[tuple[Any, ...]]]
                 ) -> tuple[int, tuple[tuple[PoolKey, tuple[str, ...]], ...]]:
        """The node's class under this projection and its devices in canonical order,
        pool by pool (pool, device names). Compiled (`fitcore/_project.pyx`) unless
        FITCORE_NO_EXTENSIONS=1; `_node_key` is its reference."""
        if snapshot.compiled is not None:
            found: tuple[int, tuple[tuple[PoolKey, tuple[str, ...]], ...]] = \
                snapshot.compiled.node_key(self, e, allocated, _STATES, _state)
            return found
        return self._node_key(e, allocated)

    def _node_key(self, e: gang._NodeEntry,
                  allocated: Mapping[PoolKey, Sequence[tuple[Any, ...]]]
                  ) -> tuple[int, tuple[tuple[PoolKey, tuple[str, ...]], ...]]:
        """`node_key` in Python (the reference of the compiled one)."""
        # Kept while the node's slices (the same tuple while they do not change) and what
        # is allocated in its pools (a new list after each change) are the same objects:
        # a pod bound or gone changes the node's entry, not its devices.
        taken = tuple([allocated.get(pk, ()) for pk in e.local_pools])
        hit = self._parts.get(e.node.name)
        if hit is None or hit[0] is not e.local_slices or len(hit[1]) != len(taken) or any(
                a is not b for a, b in zip(hit[1], taken, strict=True)):
            hit = self._parts[e.node.name] = (e.local_slices, taken, self._devices(e, allocated))
        pools, order, candidates, unbounded = hit[2]
        key = ("node", pools, e.node.taints, e.node.unschedulable, e.pristine,
               self._free(e, candidates, unbounded), self._advertised(e))
        return self._intern.setdefault(key, len(self._intern)), order

    def _devices(self, e: gang._NodeEntry,
                 allocated: Mapping[PoolKey, Sequence[tuple[Any, ...]]]) -> DevicePart:
        """The part of the node's key its devices make (kept while its slices and
        allocations stay, shared by projections of one `signature`): per pool its shape
        and observable devices, the devices in canonical order, candidates and whether
        one of them allows multiple allocations."""
        by_pool: dict[PoolKey, list[model.ResourceSlice]] = {}
        for s in e.local_slices:
            by_pool.setdefault((s.driver, s.pool), []).append(s)
        pools: list[tuple[PoolKey, bool, tuple[Any, ...], list[_Item]]] = []
        candidates, unbounded = 0, False
        for pk in e.local_pools:
            ordered, info, items, n, shared = self._pool(pk, by_pool[pk],
                                                         allocated.get(pk, ()))
            pools.append((pk, ordered, info, items))
            candidates += n
            unbounded = unbounded or shared
        rank = self._ranks(pools) if self.view.relabel is not None else None
        key_parts: list[Any] = []
        order: list[tuple[PoolKey, tuple[str, ...]]] = []
        for pk, ordered, info, items in pools:
            if rank is not None:
                items = [(k, text, rank[lbl], name, st) for k, text, lbl, name, st in items]
            if not ordered:
                items.sort(key=_canonical)
            # (device key, allocated state, group label) of each device, flat: hashed
            # and compared without a tuple per device.
            key_parts.append((info, tuple([x for it in items for x in (it[0], it[4], it[2])])))
            order.append((pk, tuple([it[3] for it in items])))
        return tuple(key_parts), tuple(order), candidates, unbounded

    def _ranks(self, pools: list[tuple[PoolKey, bool, tuple[Any, ...], list[_Item]]]
               ) -> dict[str | None, int]:
        """Values of the renamed attribute by rank of their group's content (the devices
        with that value: pool, device key, allocated state)."""
        groups: dict[str | None, list[tuple[int, int, str]]] = {}
        for pi, (_, _, _, items) in enumerate(pools):
            for k, text, label, _, _ in items:
                if label is not None:
                    members = groups.get(label)
                    if members is None:
                        members = groups[label] = []
                    members.append((pi, k, text))
        ranked = sorted((tuple(sorted(members)), label) for label, members in groups.items())
        rank: dict[str | None, int] = {None: -1}
        for i, (_, label) in enumerate(ranked):
            rank[label] = i
        return rank

    def _free(self, e: gang._NodeEntry, candidates: int, unbounded: bool
              ) -> tuple[tuple[str, object], ...]:
        """Free resources as far as the gang's requests tell them apart. Pods one node can
        hold by its devices at most: resources that allow more do not tell nodes apart
        (but "none" and "some" stay apart, for the reason given)."""
        most = None if unbounded or not self._per_pod else max(candidates // self._per_pod, 1)
        free: list[tuple[str, object]] = []
        node_free = e.free
        # Fractions compared on their integers (Fraction's operators are far slower).
        for name, amount, cap, exact in self.free:
            have = node_free.get(name)
            if have is None:
                free.append((name, None))
            elif exact:
                below = have.numerator * amount.denominator <= amount.numerator * have.denominator
                free.append((name, have if below else amount))
            else:
                n = min(_floordiv(have, amount), cap) if have.numerator > 0 else 0
                free.append((name, n if most is None else min(n, most)))
        return tuple(free)

    def _advertised(self, e: gang._NodeEntry) -> tuple[bool, ...]:
        """Whether the node advertises each extended resource of the gang."""
        if not self._extended:
            return ()
        return tuple(bool(q.value) if (q := e.node.allocatable.get(n)) is not None
                     else False for n in self._extended)

    def _pool(self, pk: PoolKey, slices: list[model.ResourceSlice],
              taken: Sequence[tuple[Any, ...]]
              ) -> tuple[bool, tuple[Any, ...], list[_Item], int, bool]:
        """One node-local pool under this projection: (kept in allocator order, its
        shape, its observable devices (`_Item`), candidates the gang could take, whether
        one of them allows multiple allocations)."""
        driver = pk[0]
        state: dict[str, Any] = {}
        for t in taken:
            state[t[1]] = (*state.get(t[1], ()), t[0], *t[2:])
        devices = [d for s in slices for d in s.devices] if len(slices) != 1 else \
            slices[0].devices
        counters = tuple(sorted((c.name, tuple(sorted(c.counters.items())))
                                for s in slices for c in s.shared_counters))
        unique = len(set(map(_NAME, devices))) == len(devices)
        info = (driver, tuple([(s.generation, s.resource_slice_count, len(s.devices))
                               for s in slices]), counters, unique)
        ordered = self.view.ordered or bool(counters) or any(map(_CONSUMES, devices))
        if not ordered:
            return (False, info, *self._unordered(driver, devices, state))
        return self._ordered_pool(driver, devices, state, info, counters)

    def _ordered_pool(self, driver: str, devices: Sequence[model.Device],
                      state: Mapping[str, Any], info: tuple[Any, ...],
                      counters: tuple[Any, ...]
                      ) -> tuple[bool, tuple[Any, ...], list[_Item], int, bool]:
        """`_pool` of a pool kept in allocator order (shared counters, devices that
        consume counters, or a view that keeps every pool in order)."""
        ordered = True
        observed = [self._observed(d) for d in devices]
        if not self.view.ordered and self._attributes_only and not any(
                self._maybe_selectable(driver, d, o[0])
                for d, o in zip(devices, observed, strict=True)):
            # No device of this counter pool can be taken: none is observable.
            return ordered, (*info[:2], (), info[3]), [], 0, False
        keyed = [(self._device_key(driver, d, o[0], o[1]), d)
                 for d, o in zip(devices, observed, strict=True)]
        wanted = [self._candidate(kl[0], driver, d) for kl, d in keyed]
        if not self.view.ordered:
            # Devices sharing a counter set with a candidate are observable through
            # the counters; the rest of the pool is not.
            shared_sets = {c.counter_set for (_, d), w in zip(keyed, wanted, strict=True)
                           if w for c in d.consumes_counters}
            keep = [w or any(c.counter_set in shared_sets for c in d.consumes_counters)
                    for (_, d), w in zip(keyed, wanted, strict=True)]
            info = (*info[:2], tuple(c for c in counters if c[0] in shared_sets), info[3])
        else:
            keep = [True] * len(keyed)
        out: list[_Item] = []
        candidates, unbounded = 0, False
        for ((k, label), d), w, kept in zip(keyed, wanted, keep, strict=True):
            if not kept:
                continue  # nothing the gang does can touch it
            if w and d.allow_multiple_allocations:
                unbounded = True
            elif w:
                candidates += 1
            st = state.get(d.name, ())
            out.append((k, _state(st), label, d.name, st))
        return ordered, info, out, candidates, unbounded

    def _unordered(self, driver: str, devices: Sequence[model.Device],
                   state: Mapping[str, Any]) -> tuple[list[_Item], int, bool]:
        """The candidates of a pool without counters (`_pool`): a device no alternative of
        the gang could take is left out with its state (nothing the gang does can touch
        it). One pass, the hot loop of a cold decision."""
        out: list[_Item] = []
        candidates, unbounded = 0, False
        skip = self._attributes_only
        relevant, layouts = self._relevant, self._layouts
        selectable, device_keys = self._selectable, self._device_keys
        for d in devices:
            # `_observed`, `_maybe_selectable` and `_device_key`'s kept answers inline:
            # this loop runs once per device of the cluster in a cold decision.
            a = d.attributes
            names = tuple(a)
            layout = layouts.get(names)
            if layout is None:
                layout = self._layout(names)
            kept, relabeled = layout
            observed: tuple[Any, ...]
            if not kept:
                observed = ()
            elif len(kept) == 1:
                v = a[kept[0]]
                observed = ((kept[0], type(v), v),)
            else:
                observed = tuple([(n, type(a[n]), a[n]) for n in kept])
            if skip:
                ok = selectable.get((driver, observed))
                if ok is None:
                    ok = self._maybe_selectable(driver, d, observed)
                if not ok:
                    continue
            hit = device_keys.get(id(d))
            if hit is not None and hit[0] is d:
                k, label = hit[1]
            else:
                k, label = self._device_key(driver, d, observed, relabeled)
            w = relevant.get(k)
            if w is None:
                w = self._candidate(k, driver, d)
            if not w:
                continue
            if d.allow_multiple_allocations:
                unbounded = True
            else:
                candidates += 1
            st = state.get(d.name, ()) if state else ()
            out.append((k, _STATES.get(st) or _state(st), label, d.name, st))
        return out, candidates, unbounded


#: A device under a projection: (device key, its allocated state as text, its group label
#: (rank, once ranked), its name, its allocated state).
_Item = tuple[int, str, Any, str, tuple[Any, ...]]


# Device fields read over whole pools (with map: the loop runs in C).
_NAME = operator.attrgetter("name")
_CONSUMES = operator.attrgetter("consumes_counters")

#: Where a device goes in a pool whose order is not observable: by (device key, state
#: text, group label, name) (a key made in C: this sorts every pool of a cold decision).
_canonical = operator.itemgetter(0, 1, 2, 3)


def pair(base: gang._NodeEntry, projected: gang._NodeEntry
         ) -> tuple[gang._NodeEntry, gang._NodeEntry]:
    """(base, projected) as a view keeps them per node, left out of the collector's walks
    like the entries themselves (neither refers to the pair)."""
    both = (base, projected)
    return both if snapshot.compiled is None else snapshot.compiled.acyclic(both)


def _floordiv(a: Fraction, b: Fraction) -> int:
    """a // b for Fractions, on their integers (Fraction's own operator is far slower)."""
    return (a.numerator * b.denominator) // (a.denominator * b.numerator)
