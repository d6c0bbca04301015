"""Plans: which new nodes make a gang fit, and whether the nodes that came keep the promise.

`plan` first places the gang on the existing nodes (`gang.place`). When that fails it
asks, for each NodeShape, for the fewest new nodes of that shape that, together with the
free capacity of the existing nodes, make the whole gang fit. New nodes are hypothetical
nodes of the shape (`NodeShape.instantiate`); when the shape groups nodes into topology
domains, new nodes land together in fresh domains of at most `nodesPerDomain` nodes, so a
pod set with a required topology can only use new nodes of one fresh domain.

Search: a first trial offers the shape's limit (its `maxNodes` minus the existing nodes of
that shape, and never more than the gang has pods). A gang of more pods than
`MAX_NEW_NODES` first learns how many of each pod set's pods one new node holds alone:
that bounds the nodes that can matter, and a gang that would need more than
`MAX_NEW_NODES` nodes of the shape (Kubernetes' largest supported cluster) is refused at
once (`shape-too-many-nodes`) instead of being planned node by node. The new nodes the
placement used bound the answer; the count shrinks to them while placement still succeeds
on exactly that many, and a trial with one node less confirms it (bisection below
otherwise: greedy placement is nearly, not strictly, monotone in the nodes offered). The
plan's placement is the one found on exactly the planned nodes. Every trial reuses one
`gang.Memo`, and the hypothetical nodes of a shape form one node class, so a trial costs a
pass over the node classes, not new allocations. Plans are ranked by price, then by node
count, then by shape name; the first is the plan, the others are the alternatives. When no
single shape will do, a mixed plan adds shapes pod set by pod set (`_combined`).

`verify` runs after the autoscaler reports the nodes provisioned: it places the gang on the
real inventory, new nodes last as in the plan, and compares each new node with what its
shape promised (labels, allocatable, devices and their attributes and capacity), so that a
misfit is reported as what differs, not just as "does not fit" (category `coordination`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

from fitcore import api, errors, gang, model, shapes, values
from fitcore import reasons as codes

PlanVerdict = Literal["fits", "needs-capacity", "unsatisfiable", "undecided"]


@dataclasses.dataclass(frozen=True, slots=True)
class ShapeCount:
    shape: str
    count: int
    domain: str | None = None  # the fresh topology domain these nodes land in


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """New nodes to ask for, and where the gang's pods would go once they exist."""

    shapes: tuple[ShapeCount, ...]
    price: Fraction
    placements: tuple[gang.Placement, ...] = ()
    existing_nodes: frozenset[str] = frozenset()
    domains: Mapping[str, str] = dataclasses.field(default_factory=dict)  # per pod set

    @property
    def nodes(self) -> int:
        return sum(s.count for s in self.shapes)

    def to_json(self, *, devices: bool = True, existing: bool = True) -> dict[str, Any]:
        """A JSON-ready dict that `from_json` turns back into an equal plan (devices are
        written as the nodes name them), so a controller can store a plan on an object
        and verify it after a restart. The one codec of a Plan.

        `devices=False` leaves out the placements' device results and `existing=False`
        the names of the nodes that existed (thousands): the compact form the admission
        check stores in an annotation (its verification counts as new the nodes created
        after the request, and places the devices again)."""
        out: dict[str, Any] = {
            "shapes": [{"shape": g.shape, "count": g.count, "domain": g.domain}
                       for g in self.shapes],
            "price": str(self.price),
            "placements": [_placement_json(p, devices) for p in self.placements],
            "domains": dict(self.domains),
        }
        if existing:
            out["existingNodes"] = sorted(self.existing_nodes)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Plan:
        """The plan `to_json` wrote; a malformed dict raises errors.InputError."""
        c = errors.Collector("Plan")
        try:
            plan_ = cls(
                tuple(ShapeCount(str(g["shape"]), int(g["count"]),
                                 None if g.get("domain") is None else str(g["domain"]))
                      for g in d["shapes"]),
                Fraction(str(d.get("price", "0"))),
                tuple(_placement_from_json(p) for p in d.get("placements", ())),
                frozenset(str(n) for n in d.get("existingNodes", ())),
                {str(k): str(v) for k, v in dict(d.get("domains", {})).items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            c.add("", f"not a plan written by Plan.to_json: {exc!r}")
            c.raise_if_any()
            raise AssertionError("unreachable") from exc
        return plan_


def _placement_json(p: gang.Placement, devices: bool = True) -> dict[str, Any]:
    if not devices:
        return {"podSet": p.pod_set, "index": p.index, "node": p.node}
    return {"podSet": p.pod_set, "index": p.index, "node": p.node,
            "claims": [{"name": name, "devices": [
                {"request": r.request, "driver": r.id.driver, "pool": r.id.pool,
                 "device": r.id.device, "adminAccess": r.admin_access, "shared": r.shared,
                 "consumedCapacity": {k: str(q) for k, q in r.consumed_capacity.items()}}
                for r in results]} for name, results in p.devices]}


def _placement_from_json(d: Mapping[str, Any]) -> gang.Placement:
    claims = tuple(
        (str(c["name"]), tuple(model.DeviceResult(
            str(r["request"]), model.DeviceId(str(r["driver"]), str(r["pool"]),
                                              str(r["device"])),
            bool(r.get("adminAccess", False)), bool(r.get("shared", False)),
            {str(k): values.Quantity.parse(v)
             for k, v in dict(r.get("consumedCapacity", {})).items()})
            for r in c["devices"]))
        for c in d.get("claims", ()))
    return gang.Placement(str(d["podSet"]), int(d["index"]), str(d["node"]), claims)


@dataclasses.dataclass(frozen=True, slots=True)
class PlanResult:
    verdict: PlanVerdict
    category: gang.Category | None = None
    placements: tuple[gang.Placement, ...] = ()  # when the gang fits existing nodes
    plan: Plan | None = None
    alternatives: tuple[Plan, ...] = ()
    reasons: tuple[str, ...] = ()
    # Shapes that cannot make the gang fit, each with why (shape name, reason).
    rejected: tuple[tuple[str, str], ...] = ()
    domains: Mapping[str, str] = dataclasses.field(default_factory=dict)
    stats: gang.Stats = dataclasses.field(default_factory=gang.Stats)
    # `reasons` for programs (details[i].message == reasons[i]), and each rejected
    # shape's reason (rejected_details[i].shape == rejected[i][0]).
    details: tuple[codes.Reason, ...] = ()
    rejected_details: tuple[codes.Reason, ...] = ()


def plan(gang_: gang.Gang, snapshot: gang.Snapshot, node_shapes: Sequence[shapes.NodeShape],
         *, engine: api.Engine = "auto", budget: int = api.DEFAULT_BUDGET,
         memo: gang.Memo | None = None) -> PlanResult:
    """Fit the gang on the existing nodes, or find the cheapest new nodes that make it fit.

    `memo`: fills kept from earlier decisions on this gang (`fitcore.inventory` keeps one
    per gang content); by default each decision starts afresh."""
    started = time.perf_counter()
    memo = memo if memo is not None else gang.Memo()
    steps_before, allocations_before = memo.steps, memo.allocations
    base = gang.place(gang_, snapshot, memo=memo, engine=engine, budget=budget)

    def stats() -> gang.Stats:
        return gang.Stats(time.perf_counter() - started, len(snapshot.entries),
                          snapshot.device_count(), memo.steps - steps_before,
                          base.stats.classes, memo.allocations - allocations_before)

    if base.fits:
        return PlanResult("fits", placements=base.placements, domains=base.domains,
                          stats=stats())
    if base.verdict == "undecided":
        return PlanResult("undecided", reasons=base.reasons, stats=stats(),
                          details=base.details)
    existing = snapshot.node_names
    plans: list[Plan] = []
    rejected: list[tuple[str, str]] = []
    rejected_why: list[codes.Reason] = []
    hostable = dict(base.hostable)
    undecided = False
    for shape in sorted(node_shapes, key=lambda s: s.name):
        found = _smallest(gang_, snapshot, shape, memo, existing, engine, budget)
        for name, n in found.hostable.items():
            hostable[name] = max(hostable.get(name, 0), n)
        if found.plan is not None:
            plans.append(found.plan)
        else:
            undecided = undecided or found.code == codes.SHAPE_UNDECIDED
            rejected.append((shape.name, found.why))
            rejected_why.append(codes.reason(found.code, found.why, object=f"NodeShape "
                                               f"{shape.name}", shape=shape.name,
                                             pod_set=found.pod_set))
    if not plans and len(node_shapes) > 1 and len(gang_.pod_sets) > 1 and not undecided:
        mixed = _combined(gang_, snapshot, sorted(node_shapes, key=lambda s: s.name), memo,
                          existing, engine, budget)
        if mixed is not None:
            plans.append(mixed)
            in_plan = {g.shape for g in mixed.shapes}
            rejected = [(name, why) for name, why in rejected if name not in in_plan]
            rejected_why = [r for r in rejected_why if r.shape not in in_plan]
    shape_reasons = [dataclasses.replace(r, message=f"shape {r.shape}: {r.message}")
                     for r in rejected_why]
    plans.sort(key=lambda p: (p.price, p.nodes, p.shapes[0].shape))
    if plans:
        return PlanResult("needs-capacity", "capacity", plan=plans[0],
                          alternatives=tuple(plans[1:]), reasons=base.reasons,
                          rejected=tuple(rejected), stats=stats(), details=base.details,
                          rejected_details=tuple(rejected_why))
    if undecided:
        details = (*base.details, *shape_reasons)
        return PlanResult("undecided", reasons=tuple(r.message for r in details),
                          rejected=tuple(rejected), stats=stats(), details=details,
                          rejected_details=tuple(rejected_why))
    category: gang.Category = "configuration" if any(n == 0 for n in hostable.values()) \
        else "capacity"
    waiting = any(d.code == codes.NODE_NOT_READY for d in base.details)
    lead = ("no node and no shape can host even one pod of "
            + ", ".join(sorted(k for k, n in hostable.items() if n == 0))
            if category == "configuration" else
            "nodes that would host its pods are not ready for them yet, and no "
            "shape makes the whole gang fit within its limits" if waiting else
            "every pod fits somewhere, but not the whole gang within the shapes' limits")
    unhosted = sorted(k for k, n in hostable.items() if n == 0)
    first = codes.reason(codes.NO_HOST if category == "configuration"
                           else codes.SHAPE_LIMITS, lead, object=gang_.label,
                         pod_set=unhosted[0] if len(unhosted) == 1 else None)
    details = (first, *base.details, *shape_reasons)
    return PlanResult("unsatisfiable", category,
                      reasons=tuple(r.message for r in details), rejected=tuple(rejected),
                      stats=stats(), details=details, rejected_details=tuple(rejected_why))


#: The most new nodes of one shape a plan asks for: Kubernetes' tested limit of nodes in
#: one cluster. A gang that needs more is refused at once, whatever the shape's maxNodes.
MAX_NEW_NODES = 5000
#: Pods one node runs when its shape does not say (the kubelet's default maxPods).
DEFAULT_MAX_PODS = 110


def _max_pods(shape: shapes.NodeShape) -> int:
    return _pod_limit(shape.allocatable)


def _per_node(gang_: gang.Gang, snapshot: gang.Snapshot, shape: shapes.NodeShape,
              memo: gang.Memo, engine: api.Engine, budget: int, first: int,
              first_domain: int) -> dict[str, int]:
    """Per pod set, how many of its pods one new, empty node of the shape holds alone (at
    most the node's pod limit): the unit that bounds how many new nodes can matter."""
    one = _new_nodes(snapshot, shape, 1, first, first_domain)
    snap = snapshot.extended(one.entries[:1])
    only_there = {gang.HOSTNAME_LABEL: shape.node_name(first)}
    cap = _max_pods(shape)
    out: dict[str, int] = {}
    for ps in gang_.pod_sets:
        count = min(ps.count, cap)
        if count == 0:
            out[ps.name] = 0
            continue
        probe = dataclasses.replace(ps, count=count, min_count=None, topology=None,
                                    node_selector={**ps.node_selector, **only_there})
        result = gang.place(dataclasses.replace(gang_, pod_sets=(probe,)), snap, memo=memo,
                            engine=engine, budget=budget)
        out[ps.name] = count if result.fits else min(count, result.hostable.get(ps.name, 0))
    return out


def _limit(gang_: gang.Gang, snapshot: gang.Snapshot, shape: shapes.NodeShape) -> int:
    """The most new nodes of the shape worth offering: no more than pods, nor than the
    shape's maxNodes allows (existing nodes of the shape count)."""
    limit = sum(ps.count for ps in gang_.pod_sets)
    if shape.max_nodes is not None:
        have = sum(len(snapshot.group_nodes[g])
                   for g, labels in enumerate(snapshot.label_groups)
                   if all(labels.get(k) == v for k, v in shape.node_labels.items()))
        limit = min(limit, shape.max_nodes - have)
    return max(0, limit)


def _bounds(gang_: gang.Gang, snapshot: gang.Snapshot, per_node: Mapping[str, int]
            ) -> tuple[int, int]:
    """(the most new nodes that can matter, the fewest the gang could need), from what one
    new node holds of each pod set alone. The most: every pod set on nodes of its own. The
    fewest counts every pod the existing nodes could run (their pod limits) as placed
    there, so it never overstates."""
    most = sum(-(-ps.count // per_node[ps.name]) for ps in gang_.pod_sets
               if per_node.get(ps.name))
    existing_pods = sum(_node_pods(e.node) for e in snapshot.entries)
    fewest = max((-(-max(0, ps.count - existing_pods) // per_node[ps.name])
                  for ps in gang_.pod_sets if per_node.get(ps.name)), default=0)
    return most, fewest


def _node_pods(node: model.Node) -> int:
    return _pod_limit(node.allocatable)


def _pod_limit(allocatable: Mapping[str, values.Quantity]) -> int:
    pods = allocatable.get("pods")
    return DEFAULT_MAX_PODS if pods is None else max(0, int(pods.value))


class _NewNodes:
    """Hypothetical nodes of one shape, indexed once; a trial takes the first n."""

    def __init__(self, snapshot: gang.Snapshot, shape: shapes.NodeShape, limit: int,
                 first: int = 0, first_domain: int = 0) -> None:
        per_domain = shape.nodes_per_domain if shape.domain_label else None
        fixed = shape.node_labels.get(shape.domain_label) if shape.domain_label else None
        nodes: list[model.Node] = []
        slices: list[model.ResourceSlice] = []
        self.domains: list[str | None] = []  # per new node
        chunk = first_domain
        while len(nodes) < limit:
            n = min(per_domain or limit, limit - len(nodes)) if fixed is None else limit
            domain = fixed if fixed is not None else (
                shape.domain_name(chunk) if shape.domain_label else None)
            chunk += 1
            more_nodes, more_slices = shape.instantiate(n, first=first + len(nodes),
                                                        domain=domain)
            nodes += more_nodes
            slices += more_slices
            self.domains += [domain] * n
        self.shape = shape
        self.first = first
        self.limit = limit
        self.entries, self.owner = snapshot.prepare(nodes, slices)

    def groups(self, n: int) -> tuple[ShapeCount, ...]:
        """The first n new nodes, grouped by domain."""
        counts: dict[str | None, int] = {}
        for domain in self.domains[:n]:
            counts[domain] = counts.get(domain, 0) + 1
        return tuple(ShapeCount(self.shape.name, c, d) for d, c in counts.items())


def _new_nodes(snapshot: gang.Snapshot, shape: shapes.NodeShape, limit: int, first: int,
               first_domain: int) -> _NewNodes:
    """Hypothetical nodes of a shape, kept with the snapshot: decisions on one inventory
    share them (the first n nodes of a larger batch are the batch of n)."""
    key = ("new-nodes", shape.name, id(shape), first, first_domain)
    have = snapshot.scratch.get(key)
    if have is None or have[0] is not shape or have[1].limit < limit:
        have = snapshot.scratch[key] = (shape, _NewNodes(snapshot, shape, limit, first,
                                                         first_domain))
    new: _NewNodes = have[1]
    return new


@dataclasses.dataclass
class _Found:
    plan: Plan | None
    why: str
    hostable: Mapping[str, int]
    snapshot: gang.Snapshot | None = None  # with the plan's new nodes
    nodes: int = 0
    domains: int = 0
    code: str = ""  # `why` for programs
    pod_set: str | None = None  # the one pod set `why` is about, if one


def _smallest(gang_: gang.Gang, snapshot: gang.Snapshot, shape: shapes.NodeShape,
              memo: gang.Memo, existing: frozenset[str], engine: api.Engine, budget: int,
              first: int = 0, first_domain: int = 0) -> _Found:
    """The plan with the fewest nodes of `shape`, or None and why not. New nodes are
    numbered from `first`, fresh domains from `first_domain`."""
    limit = _limit(gang_, snapshot, shape)
    if limit > MAX_NEW_NODES:
        # A gang this large: bound the nodes by what one node holds before making any, and
        # refuse at once what no cluster could run.
        per_node = _per_node(gang_, snapshot, shape, memo, engine, budget, first,
                             first_domain)
        most, fewest = _bounds(gang_, snapshot, per_node)
        if fewest > MAX_NEW_NODES:
            held = ", ".join(f"{n} of pod set {name}" for name, n in sorted(per_node.items())
                             if n)
            return _Found(None, f"needs at least {fewest} new nodes (one node holds {held}); "
                          f"fitgate plans at most {MAX_NEW_NODES} new nodes of a shape, the "
                          "most nodes Kubernetes supports in one cluster",
                          {k: min(v, 1) for k, v in per_node.items()},
                          code=codes.SHAPE_TOO_MANY_NODES)
        limit = min(limit, most or 1, MAX_NEW_NODES)
    if limit <= 0:
        # Still learn whether a node of this shape could host the pods: then the shape's
        # limit is a capacity problem, not a configuration one.
        one = _new_nodes(snapshot, shape, 1, first, first_domain)
        probe = gang.place(gang_, snapshot.extended(one.entries[:1]), memo=memo,
                           engine=engine, budget=budget)
        return _Found(None, f"at its limit of {shape.max_nodes} nodes", dict(probe.hostable),
                      code=codes.SHAPE_AT_LIMIT)
    new = _new_nodes(snapshot, shape, limit, first, first_domain)
    tried: dict[int, tuple[gang.GangResult, gang.Snapshot]] = {}

    def trial(n: int) -> gang.GangResult:
        if n not in tried:
            snap = snapshot.extended(new.entries[:n])
            tried[n] = (gang.place(gang_, snap, memo=memo, engine=engine, budget=budget), snap)
        return tried[n][0]

    top = trial(limit)
    hostable = dict(top.hostable)
    if not top.fits:
        if top.verdict == "undecided":
            return _Found(None, "undecided: " + "; ".join(top.reasons), hostable,
                          code=codes.SHAPE_UNDECIDED)
        prefix = shape.node_name(first)
        about = [d for d in top.details if d.node == prefix] or list(top.details[:1])
        text = [d.message for d in about]
        if shape.domain_label and shape.nodes_per_domain and not any(
                d.code in codes.NODE_KINDS and d.held == 0 for d in about) and any(
                ps.topology == shape.domain_label for ps in gang_.pod_sets):
            text.append(f"new {shape.name} nodes come in {shape.domain_label} domains of at "
                        f"most {shape.nodes_per_domain} nodes")
        named = {d.pod_set for d in about}
        return _Found(None, f"even {limit} new nodes do not make the gang fit: "
                      + "; ".join(text), hostable, code=codes.SHAPE_DOES_NOT_FIT,
                      pod_set=named.pop() if len(named) == 1 else None)
    # The plan is what placement finds on exactly the planned nodes (it is what verify
    # will run on the real ones): the nodes a placement used bound the answer, so shrink
    # to them while that still fits, then make sure one node less does not.
    def used(n: int) -> int:
        names = {p.node for p in tried[n][0].placements} - existing
        return max((i + 1 for i in range(n) if shape.node_name(first + i) in names),
                   default=n)

    def shrink(n: int) -> int:
        while (u := used(n)) < n and trial(u).fits:
            n = u
        return n

    hi = shrink(limit)
    lo = 0
    if hi > 1 and not trial(hi - 1).fits:
        lo = hi - 1
    while hi - lo > 1:  # lo does not fit (zero new nodes never does), hi fits
        mid = (lo + hi) // 2
        if trial(mid).fits:
            hi = shrink(mid)
        else:
            lo = mid
    result, snap = tried[hi]
    groups = new.groups(hi)
    count = sum(g.count for g in groups)
    domains = len({new.domains[i] for i in range(hi)})
    return _Found(Plan(groups, shape.price * count, result.placements, existing,
                       result.domains), "", hostable, snap, hi, domains)


def _combined(gang_: gang.Gang, snapshot: gang.Snapshot,
              node_shapes: Sequence[shapes.NodeShape], memo: gang.Memo,
              existing: frozenset[str], engine: api.Engine, budget: int) -> Plan | None:
    """Nodes of several shapes, when no one shape hosts the whole gang (say a launcher
    that wants a CPU node and workers that want GPUs): pod set by pod set, the cheapest
    shape that makes the pod sets so far fit is added, greedily."""
    snap = snapshot
    groups: list[ShapeCount] = []
    price = Fraction(0)
    offsets: dict[str, tuple[int, int]] = {}
    for k in range(len(gang_.pod_sets)):
        prefix = dataclasses.replace(gang_, pod_sets=gang_.pod_sets[:k + 1])
        if gang.place(prefix, snap, memo=memo, engine=engine, budget=budget).fits:
            continue
        best: tuple[tuple[Fraction, int, str], _Found, shapes.NodeShape] | None = None
        for shape in node_shapes:
            first, first_domain = offsets.get(shape.name, (0, 0))
            found = _smallest(prefix, snap, shape, memo, existing, engine, budget, first,
                              first_domain)
            if found.plan is None:
                continue
            rank = (found.plan.price, found.plan.nodes, shape.name)
            if best is None or rank < best[0]:
                best = (rank, found, shape)
        if best is None:
            return None
        _, found, shape = best
        assert found.plan is not None and found.snapshot is not None
        snap = found.snapshot
        groups.extend(found.plan.shapes)
        price += found.plan.price
        first, first_domain = offsets.get(shape.name, (0, 0))
        offsets[shape.name] = (first + found.nodes, first_domain + found.domains)
    final = gang.place(gang_, snap, memo=memo, engine=engine, budget=budget)
    if not final.fits:
        return None
    used = {p.node for p in final.placements}
    kept = tuple(g for g in groups if g.count)
    if not used:
        return None
    return Plan(kept, price, final.placements, existing, final.domains)


# --------------------------------------------------------------------------- verify

VerifyVerdict = Literal["fits", "misfit", "undecided"]


@dataclasses.dataclass(frozen=True, slots=True)
class VerifyResult:
    """`fits`: the gang fits the real inventory (mismatches, if any, are still listed).
    `misfit`: it does not; `mismatches` says how the new nodes differ from their shapes."""

    verdict: VerifyVerdict
    category: gang.Category | None = None
    placements: tuple[gang.Placement, ...] = ()
    mismatches: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    # For programs: one shape-mismatch Reason per mismatch, then the gang's reasons.
    details: tuple[codes.Reason, ...] = ()


def verify(gang_: gang.Gang, snapshot: gang.Snapshot, plan_: Plan,
           node_shapes: Sequence[shapes.NodeShape], *, engine: api.Engine = "auto",
           budget: int = api.DEFAULT_BUDGET) -> VerifyResult:
    """Confirm the gang fits the inventory after provisioning, or say what differs from
    what the planned shapes promised."""
    by_name = {s.name: s for s in node_shapes}
    mismatches: list[str] = []
    where: list[tuple[str, str, str | None]] = []  # per mismatch: (text, shape, node)
    new = [e for e in snapshot.entries if e.node.name not in plan_.existing_nodes]
    for name in sorted({g.shape for g in plan_.shapes}):
        shape = by_name.get(name)
        if shape is None:
            where.append((f"shape {name} of the plan is not among the NodeShapes", name, None))
            continue
        planned = sum(g.count for g in plan_.shapes if g.shape == name)
        mine = [e for e in new if shape.matches(e.node)]
        if len(mine) < planned:
            where.append((f"shape {name}: planned {planned} new nodes, found {len(mine)}", name,
                          None))
        for e in mine:
            where.extend((m, name, e.node.name) for m in compare(shape, e.node, e.local_slices))
    mismatches = [m for m, _, _ in where]
    # Placement is greedy, in node order: put the new nodes last, as the plan had them.
    ordered = snapshot.reordered(lambda name: (name not in plan_.existing_nodes, name))
    result = gang.place(gang_, ordered, engine=engine, budget=budget)
    found = tuple(codes.reason(codes.SHAPE_MISMATCH, m, object=f"NodeShape {shape}",
                                 shape=shape, node=node) for m, shape, node in where)
    if result.fits:
        return VerifyResult("fits", placements=result.placements, mismatches=tuple(mismatches),
                            details=found)
    if result.verdict == "undecided":
        return VerifyResult("undecided", mismatches=tuple(mismatches), reasons=result.reasons,
                            details=(*found, *result.details))
    lead = codes.reason(codes.MISFIT, "the gang does not fit the provisioned nodes",
                          object=gang_.label)
    return VerifyResult("misfit", "coordination", mismatches=tuple(mismatches),
                        reasons=result.reasons, details=(lead, *found, *result.details))


def compare(shape: shapes.NodeShape, node: model.Node,
            published: Sequence[model.ResourceSlice]) -> list[str]:
    """How a real node differs from what its shape promised (empty: it keeps the promise)."""
    out = []
    where = f"node {node.name} (shape {shape.name})"
    for k, v in shape.node_labels.items():
        if node.labels.get(k) != v:
            out.append(f"{where}: label {k} is {node.labels.get(k)!r}, shape promised {v!r}")
    for k, q in shape.allocatable.items():
        have = node.allocatable.get(k)
        if have is None or have < q:
            out.append(f"{where}: allocatable {k} is {have if have is not None else 'missing'}, "
                       f"shape promised {q}")
    real: dict[tuple[str, str], model.Device] = {}
    for s in published:
        for d in s.devices:
            real[(s.driver, d.name)] = d
    for s in shape.slices:
        for d in s.devices:
            got = real.get((s.driver, d.name))
            label = f"{where}: device {s.driver}/{d.name}"
            if got is None:
                out.append(f"{label} is missing from its ResourceSlices")
                continue
            for a, want in d.attributes.items():
                if a not in got.attributes:
                    out.append(f"{label}: attribute {a} is missing, shape promised "
                               f"{_show(want)}")
                elif got.attributes[a] != want:
                    out.append(f"{label}: attribute {a} is {_show(got.attributes[a])}, shape "
                               f"promised {_show(want)}")
            for c, cap in d.capacity.items():
                have_cap = got.capacity.get(c)
                if have_cap is None or have_cap.value != cap.value:
                    out.append(f"{label}: capacity {c} is "
                               f"{have_cap.value if have_cap else 'missing'}, shape promised "
                               f"{cap.value}")
    return out


def _show(v: model.AttributeValue) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def price_str(price: Fraction) -> str:
    """A price for people: an integer, or a decimal with up to 4 places."""
    if price.denominator == 1:
        return str(price.numerator)
    return f"{float(price):.4f}".rstrip("0").rstrip(".")
