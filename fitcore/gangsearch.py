"""The gang search: node classes filled pod by pod, kept fills (`Memo`), and placement
of pod sets in order, in topology domains, with shared claims (see `fitcore.gang` for the
design).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from fitcore import (
    api,
    extended,
    gangexplain,
    gangtypes,
    model,
    multinode,
    podaffinity,
    predicates,
    values,
)
from fitcore import reasons as codes
from fitcore import snapshot as snapshots  # `snapshot` is a parameter name here

_ZERO = Fraction(0)



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
    names; `stop` says why no more fit (empty while not yet known).

    When the allocator said no, its reasons are found when `stop` is first read
    (`explain`): most fills end so, and a decision that places its gang reads none of
    them (explaining one costs about what the allocator call did)."""

    allocations: list[tuple[tuple[model.DeviceResult, ...], ...]]
    why: str = ""
    undecided: bool = False
    code: str = ""  # `stop` for programs (a fitcore.reasons code)
    resource: str = ""  # the node resource that ran out
    explain: Callable[[], str] | None = None  # the allocator's reasons, not found yet

    @property
    def stop(self) -> str:
        if self.explain is not None:
            self.why, self.explain = self.explain(), None
        return self.why

    @stop.setter
    def stop(self, why: str) -> None:
        self.why, self.explain = why, None

    @property
    def stopped(self) -> bool:
        """Whether no more pods fit (without finding the allocator's reasons)."""
        return bool(self.why) or self.explain is not None


def _reasons(node: model.Node, inventory: model.Inventory, claims: list[model.Claim]
             ) -> Callable[[], str]:
    """The allocator's reasons for a no-fit, found when called."""
    return lambda: "; ".join(api.no_fit_reasons(node, inventory, claims)) or "no-fit"


class Memo:
    """Cache of fills by (class key, pod variant), shared by searches over one gang."""

    def keep(self, pod_set: gangtypes.PodSet) -> int:
        """The identity of a pod set in memo keys: its content without its pod counts (a
        fill is pod by pod, and a search reads no more of it than the pods it wants), so
        that gangs differing only in pod counts share fills. Found once per pod set
        object (kept alive with the memo, so that its id stays unique)."""
        hit = self._pod_sets.get(id(pod_set))
        if hit is not None:
            return hit[1]
        content = repr(dataclasses.replace(pod_set, count=0, min_count=None))
        found = self._pod_sets[id(pod_set)] = (
            pod_set, self._contents.setdefault(content, len(self._contents)))
        return found[1]

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
        # Pod sets by identity, with the number of their content without pod counts; the
        # memo keeps them alive so that no other object can take the id of one while
        # the memo lives.
        self._pod_sets: dict[int, tuple[gangtypes.PodSet, int]] = {}
        self._contents: dict[str, int] = {}
        self.allocations = 0
        self.steps = 0


@dataclasses.dataclass(slots=True)
class _Variant:
    """The claims one pod of a pod set allocates at one position of a fill."""

    first: list[gangtypes.PodClaim]  # claims of the first pod on a node
    rest: list[gangtypes.PodClaim]  # claims of every later pod on the same node

    def claims(self, position: int) -> list[gangtypes.PodClaim]:
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
    def __init__(self, gang: gangtypes.Gang, snap: snapshots.Snapshot, memo: Memo,
                 engine: api.Engine, budget: int) -> None:
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
                                             e.node.unschedulable, self.snap.device_bound(e),
                                             e.pristine)
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

    def adapt(self, cls: _Class, pod_set: gangtypes.PodSet, variant: _Variant,
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
                pc = gangtypes.PodClaim(extended.CLAIM_NAME, claim)
                have = (_Variant([*variant.first, pc], [*variant.rest, pc]),
                        {k: v for k, v in requests.items() if k not in via})
            self.adapted[key] = have
        return have

    def tolerated(self, cls: _Class, pod_set: gangtypes.PodSet) -> tuple[str, bool]:
        """The first taint of the class that the pod set does not tolerate ("" if none),
        and whether every such taint is one the node carries for a while
        (`gangtypes.passing`)."""
        taints = cls.taints
        if cls.unschedulable:
            taints = (*taints, model.Taint(gangtypes.UNSCHEDULABLE_TAINT, "", "NoSchedule"))
        first, passing = "", True
        for t in taints:
            if t.effect not in ("NoSchedule", "NoExecute"):
                continue
            if not any(tol.tolerates(t) for tol in pod_set.tolerations):
                first = first or (f"{t.key}={t.value}:{t.effect}" if t.value
                                  else f"{t.key}:{t.effect}")
                passing = passing and gangtypes.passing(t)
        return first, passing

    def fill(self, cls: _Class, pod_set: gangtypes.PodSet, variant: _Variant,
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
        if f.stopped or len(f.allocations) >= limit:
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
            asked = [c.claim for c in claims]
            nf = api.allocate(e.node, inv, asked, engine=self.engine, budget=self.budget,
                              kube=self.snap.kube, with_reasons=False)
            self.memo.allocations += 1
            self.memo.steps += nf.steps
            if not nf.fits:
                if nf.verdict == "no-fit" and not nf.reasons:
                    f.explain = _reasons(e.node, inv, asked)
                else:
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
            return {a: b for a, b in zip(rep.device_ids(), other.device_ids(), strict=True)
                    if a != b} or None
        src = rep.local_pools
        dst = other.local_pools
        return {a: b for a, b in zip(src, dst, strict=True) if a != b} or None


# ----------------------------------------------------------------------- placement


def fit(gang: gangtypes.Gang, nodes: Sequence[model.Node], inventory: model.Inventory,
        used: Mapping[str, Mapping[str, values.Quantity]] | None = None, *,
        engine: api.Engine = "auto", budget: int = api.DEFAULT_BUDGET) -> gangtypes.GangResult:
    """Whether the whole gang can be placed on `nodes` now (all or nothing)."""
    return place(gang, snapshots.Snapshot(nodes, inventory, used), engine=engine, budget=budget)


def place(gang: gangtypes.Gang, snapshot: snapshots.Snapshot, *, memo: Memo | None = None,
          engine: api.Engine = "auto", budget: int = api.DEFAULT_BUDGET) -> gangtypes.GangResult:
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
    stats = gangtypes.Stats(time.perf_counter() - started, len(snapshot.entries), snapshot.devices,
                  memo.steps - before_steps, len(search.classes),
                  memo.allocations - before_alloc)
    hostable = attempt.hostable
    if not attempt.failed:
        return gangtypes.GangResult("fits", tuple(attempt.placements), domains=attempt.domains,
                          hostable=hostable, stats=stats)
    for pod_set in gang.pod_sets:
        if hostable[pod_set.name] == 0 and len(gang.pod_sets) > 1:
            # Maybe only because earlier pod sets took the room: ask for one pod alone.
            alone = dataclasses.replace(gang, pod_sets=(dataclasses.replace(
                pod_set, count=1, min_count=None),))
            if place(alone, snapshot, memo=memo, engine=engine, budget=budget).fits:
                hostable[pod_set.name] = 1
    verdict: gangtypes.GangVerdict = "undecided" if search.undecided else "no-fit"
    category: gangtypes.Category = "configuration" if any(v == 0 for v in hostable.values()) \
        else "capacity"
    return gangtypes.GangResult(verdict, (), tuple(r.message for r in attempt.reasons), category,
                      attempt.domains, hostable, stats, tuple(attempt.reasons))


@dataclasses.dataclass(slots=True)
class _Attempt:
    search: _Search
    failed: bool
    placements: list[gangtypes.Placement]
    reasons: list[codes.Reason]
    domains: dict[str, str]
    hostable: dict[str, int]


def _attempt(gang: gangtypes.Gang, order: Sequence[gangtypes.PodSet],
             snapshot: snapshots.Snapshot, memo: Memo, engine: api.Engine, budget: int
             ) -> _Attempt:
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


def _devices_per_pod(pod_set: gangtypes.PodSet) -> int:
    return sum(r.exactly.count for c in pod_set.claims for r in c.claim.requests
               if r.exactly is not None)


def _matcher(pod_set: gangtypes.PodSet) -> tuple[Callable[[model.Node], bool], bool]:
    """Node selection for a pod set, and whether it looks at more than shared labels
    (the hostname label or node fields), so that it must be asked per node."""
    per_node = gangtypes.HOSTNAME_LABEL in pod_set.node_selector or (
        pod_set.affinity is not None and any(
            t.match_fields or any(r.key == gangtypes.HOSTNAME_LABEL for r in t.match_expressions)
            for t in pod_set.affinity.terms))

    def matches(node: model.Node) -> bool:
        for k, v in pod_set.node_selector.items():
            if node.labels.get(k) != v:
                return False
        return pod_set.affinity is None or predicates.selector_matches(pod_set.affinity, node)

    return matches, per_node


def _requests(pod_set: gangtypes.PodSet) -> dict[str, Fraction]:
    out = {k: q.value for k, q in pod_set.requests.items()}
    out["pods"] = out.get("pods", _ZERO) + 1
    return out


#: Nodes that look alike to one pod set: (label group, node or None, class, nodes) for a
#: cell, or a single node when selection must be asked per node.
_Unit = tuple[int, "int | None", int, int]


def _place_pod_set(search: _Search, pod_set: gangtypes.PodSet,
                   placements: list[gangtypes.Placement]
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


def _place_pods(search: _Search, pod_set: gangtypes.PodSet, placements: list[gangtypes.Placement]
                ) -> tuple[bool, list[codes.Reason], str | None, int]:
    """Place these pods, all at once (see `_place_pod_set`)."""
    snap = search.snap
    label = f"pod set {pod_set.name}"
    requests = _requests(pod_set)
    matches, per_node = _matcher(pod_set)
    allowed, variant, single_node = _shared_claims(search, pod_set)
    gate = _gate(search, pod_set, placements)
    topology = pod_set.topology
    if gate is not None:
        per_node = True
        topology = topology or gate.self_key
    need, want = pod_set.needed, pod_set.count
    skipped = {"selector": 0, "taint": 0, "topology": 0, "shared": 0, "affinity": 0,
               "passing": 0}
    units = _units(search, allowed, per_node, skipped)
    # How many pods one node of each class holds; domain totals.
    counts: dict[int, int] = {}
    fills: dict[int, _Fill] = {}
    group_info: dict[int, tuple[bool, str | None]] = {}  # selected?, domain
    taint_example = ""
    passing_example = ""  # a node that would host pods once a passing taint is off
    later = 0  # the most pods one such node would hold
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
            bad, passing = search.tolerated(cls, pod_set)
            example = entries[node_index if node_index is not None else cls.rep].node.name
            if bad and passing:
                # Would the node hold pods once the taint is off? (Then the gang waits.)
                f = search.fill(cls, pod_set, *search.adapt(cls, pod_set, variant, requests),
                                want)
                if f.allocations:
                    n = -2
                    later = max(later, min(len(f.allocations), want))
                    passing_example = passing_example or f"{bad} (node {example})"
                else:  # it would not: say why, as for any node that holds none
                    fills[cid] = f
                    n = 0
                    search.undecided = search.undecided or f.undecided
            elif bad:
                n = -1
                taint_example = taint_example or f"{bad} (node {example})"
            else:
                f = search.fill(cls, pod_set, *search.adapt(cls, pod_set, variant, requests),
                                want)
                fills[cid] = f
                n = min(len(f.allocations), want)  # a shared fill may hold more
                search.undecided = search.undecided or (f.undecided and n < want)
            counts[cid] = n
        if n < 0:
            skipped["taint" if n == -1 else "passing"] += count
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
    ranked = [(t, d) for d, t in totals.items()]
    # Best fit: the smallest domain that holds every pod; else the largest holding minCount.
    full = sorted((t, d) for t, d in ranked if t >= want)
    partial = sorted(((t, d) for t, d in ranked if need <= t < want), key=lambda x: (-x[0], x[1]))
    choice = full[0] if full else (partial[0] if partial else None)
    if choice is None:
        # Why classes fell short: read (and the allocator's reasons found) only now.
        for cid, count in short_nodes.items():
            stop = fills[cid].stop
            if stop:
                example = entries[search.get_class(cid).rep].node.name
                short[(gangexplain.holds(counts[cid], stop), cid)] = (count, example)
                short_why[(gangexplain.holds(counts[cid], stop), cid)] = fills[cid]
        return False, gangexplain.explain(
            search.gang, pod_set, label, need, want, ranked, skipped,
            (taint_example, passing_example), short, short_why, counts, single_node,
            len(snap.entries)), None, max(best, later)
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
        field=gangexplain.template_path(search.gang, pod_set) + ".resourceClaims")], None, \
        max(best, later)


def _shared_claims(search: _Search, pod_set: gangtypes.PodSet
                   ) -> tuple[set[str] | None, _Variant, bool]:
    """The pod set's shared claims: already allocated (they restrict the nodes), pinned
    by an earlier pod set of this gang (likewise), or to be allocated with its first pod.
    Returns (the nodes allowed, None for all; the claims of its first pod and of the
    others; whether its pods must share one node)."""
    allowed: set[str] | None = None
    first_claims: list[gangtypes.PodClaim] = []
    rest_claims: list[gangtypes.PodClaim] = []
    unpinned: list[gangtypes.PodClaim] = []
    for pc in pod_set.claims:
        if not pc.shared:
            first_claims.append(pc)
            rest_claims.append(pc)
            continue
        if pc.allocated is not None:
            reach = pc.allocated_nodes
            if pc.allocated_selector is not None:
                reach = multinode.matching(pc.allocated_selector,
                                           [e.node for e in search.snap.entries])
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
    return allowed, _Variant(first_claims, rest_claims), bool(unpinned)


def _units(search: _Search, allowed: set[str] | None, per_node: bool,
           skipped: dict[str, int]) -> list[_Unit]:
    """The units to consider: (label group, node or None, class, nodes) for each cell, or
    single nodes when selection is per node or only `allowed` nodes may be used (the
    others are counted in `skipped`)."""
    snap = search.snap
    if allowed is None and not per_node:
        return [(g, None, cid, n) for (g, cid), n in search.cells.items()]
    units: list[_Unit] = []
    for i, e in enumerate(snap.entries):
        if allowed is not None and e.node.name not in allowed:
            skipped["shared"] += 1
            continue
        units.append((snap.node_group[i], i, search.class_of(i), 1))
    return units


def _gate(search: _Search, pod_set: gangtypes.PodSet, placements: Sequence[gangtypes.Placement]
          ) -> podaffinity.Gate | None:
    """The pod set's pod (anti-)affinity and spread rules against the bound pods and the
    gang's pods placed so far (None when it has none and no bound pod has any)."""
    snap = search.snap
    rules = pod_set.rules or podaffinity.Rules()
    ns = search.gang.namespace
    by_set = {ps.name: ps.rules for ps in search.gang.pod_sets}
    terms = (*rules.affinity, *rules.anti_affinity)
    # Without terms of its own, only pods with an anti-affinity can matter to the set:
    # the bound ones are found once per list of bound pods (kept in the scratch), not in
    # a pass over every bound pod per pod set and decision.
    pods = [*snap.pods] if terms else _anti_pods(snap)
    for p in placements:
        r = by_set.get(p.pod_set)
        if r is not None and (terms or r.anti_affinity):
            pods.append(podaffinity.BoundPod(p.node, ns, r.labels, r.anti_affinity))
    # Only pods that one of the set's terms selects, or whose anti-affinity selects the
    # set's pods, can matter (most bound pods do neither).
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


def _anti_pods(snap: snapshots.Snapshot) -> list[podaffinity.BoundPod]:
    """The bound pods with an anti-affinity, in order (a new list each call)."""
    have = snap.scratch.get("anti-pods")
    if have is None or have[0] is not snap.pods:
        have = snap.scratch["anti-pods"] = (snap.pods, [p for p in snap.pods if p.anti_affinity])
    return list(have[1])


def _fill_domain(search: _Search, pod_set: gangtypes.PodSet, variant: _Variant,
                 requests: Mapping[str, Fraction], total: int, single_node: bool,
                 units: list[_Unit], counts: Mapping[int, int], fills: Mapping[int, _Fill],
                 placements: list[gangtypes.Placement], index_base: int, tag: tuple[Any, ...],
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
                    mapped = gangtypes.remap(results, pools_map) if pools_map else results
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
            placements.append(gangtypes.Placement(pod_set.name, index_base + placed + j, node_name,
                                        tuple(claims), pools_map))
        if gate is not None:
            gate.took(node_name, room, k)
        search.move(i, search.derived(cls, f, k, pod_requests, tag).key)
        placed += k
        if single_node:
            break
    return placed


def _pinned_devices(search: _Search, pod_set: gangtypes.PodSet, have: set[str]
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

