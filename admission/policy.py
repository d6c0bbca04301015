"""FitPolicy (fitgate.io/v1alpha1, cluster-scoped): who may place gangs on which nodes and
NodeShapes.

```yaml
spec:
  subjects:                 # whom the policy is about; empty: everyone
    namespaces: [team-a]
    namespaceSelector: {matchLabels: {tier: research}}
    clusterQueues: [gpu-a]
    clusterQueueSelector: {matchExpressions: [{key: team, operator: In, values: [a]}]}
  nodes: {matchLabels: {pool: shared}}     # existing nodes the subjects may use
  nodeShapes:                               # shapes the subjects may plan new nodes of
    names: [h100-rail]
    selector: {matchLabels: {tier: standard}}
  reserved:                                 # held for the subjects: nobody else uses it
    nodes: {matchLabels: {pool: team-a}}
    nodeShapes: [h100-reserved]
  enforcement: warn                         # or deny: refuse gangs that cannot fit
```

A subject matches when any listed criterion matches it (a namespace named, a namespace's
labels, a ClusterQueue named, a ClusterQueue's labels). For one (namespace, ClusterQueue)
the policies that match it combine by union: a node (a shape) is allowed when some
matching policy allows it, or when a matching policy sets no `nodes` (`nodeShapes`). With
no matching policy everything is allowed. Reservations are the exception: a node or shape
reserved by a policy that does not match the subject is never allowed to it. Enforcement
is `deny` when any matching policy says so.

`scope(...)` turns that into what the engine takes: a `node_filter` over fitcore nodes and
the names of the allowed shapes, with a `key` that changes whenever the answer may.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import fitcore
from admission.kube import store

Enforcement = Literal["warn", "deny"]
NodeFilter = Callable[[fitcore.Node], bool]
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class PolicyError(ValueError):
    """A FitPolicy that cannot be read: every problem, each with its field path."""

    def __init__(self, name: str, problems: Sequence[tuple[str, str]]) -> None:
        self.name = name
        self.problems = list(problems)
        super().__init__("; ".join(f"FitPolicy {name}: {path}: {msg}"
                                   for path, msg in self.problems))


# ----------------------------------------------------------------- label selectors


@dataclasses.dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    """A metav1.LabelSelector: every requirement must hold (an empty one matches all)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        parts = []
        for r in self.requirements:
            if r.operator == "In" and len(r.values) == 1:
                parts.append(f"{r.key}={next(iter(r.values))}")
            elif r.operator in ("In", "NotIn"):
                parts.append(f"{r.key} {r.operator.lower()} ({','.join(sorted(r.values))})")
            elif r.operator == "Exists":
                parts.append(r.key)
            else:
                parts.append(f"!{r.key}")
        return ",".join(parts) or "everything"


def label_selector(raw: Any, path: str, problems: list[tuple[str, str]]) -> LabelSelector:
    if raw is None:
        return LabelSelector()
    if not isinstance(raw, Mapping):
        problems.append((path, f"must be a label selector object, got {type(raw).__name__}"))
        return LabelSelector()
    reqs: list[Requirement] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        problems.append((f"{path}.matchLabels", "must be a map of strings"))
    else:
        for k, v in sorted(match_labels.items()):
            if not isinstance(k, str) or not isinstance(v, str):
                problems.append((f"{path}.matchLabels", f"{k!r}: must map strings to strings"))
                continue
            reqs.append(Requirement(k, "In", frozenset({v})))
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        problems.append((f"{path}.matchExpressions", "must be a list"))
        expressions = []
    for i, e in enumerate(expressions):
        epath = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            problems.append((epath, "must be an object"))
            continue
        key, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if not isinstance(key, str) or not key:
            problems.append((f"{epath}.key", "must be a non-empty string"))
            continue
        if op not in _OPERATORS:
            problems.append((f"{epath}.operator", f"must be one of {', '.join(_OPERATORS)}, "
                                                  f"got {op!r}"))
            continue
        if not isinstance(vals, list) or not all(isinstance(v, str) for v in vals):
            problems.append((f"{epath}.values", "must be a list of strings"))
            continue
        if op in ("In", "NotIn") and not vals:
            problems.append((f"{epath}.values", f"must not be empty for {op}"))
            continue
        if op in ("Exists", "DoesNotExist") and vals:
            problems.append((f"{epath}.values", f"must be empty for {op}"))
            continue
        reqs.append(Requirement(key, str(op), frozenset(vals)))
    return LabelSelector(tuple(reqs))


# ---------------------------------------------------------------------- FitPolicy


@dataclasses.dataclass(frozen=True)
class Subjects:
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None
    cluster_queues: frozenset[str] = frozenset()
    cluster_queue_selector: LabelSelector | None = None

    @property
    def everyone(self) -> bool:
        return not (self.namespaces or self.cluster_queues or self.namespace_selector
                    or self.cluster_queue_selector)

    def match(self, namespace: str, namespace_labels: Mapping[str, str],
              cluster_queue: str | None, cluster_queue_labels: Mapping[str, str]) -> bool:
        if self.everyone or namespace in self.namespaces:
            return True
        if self.namespace_selector is not None and self.namespace_selector.matches(
                namespace_labels):
            return True
        if cluster_queue is None:
            return False
        if cluster_queue in self.cluster_queues:
            return True
        return (self.cluster_queue_selector is not None
                and self.cluster_queue_selector.matches(cluster_queue_labels))


@dataclasses.dataclass(frozen=True)
class ShapeSet:
    names: frozenset[str] = frozenset()
    selector: LabelSelector | None = None

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return name in self.names or (self.selector is not None and self.selector.matches(
            labels))

    def __str__(self) -> str:
        parts = sorted(self.names)
        if self.selector is not None:
            parts.append(f"shapes labelled {self.selector}")
        return ", ".join(parts) or "no shapes"


@dataclasses.dataclass(frozen=True)
class FitPolicy:
    name: str
    resource_version: str = ""
    subjects: Subjects = Subjects()
    nodes: LabelSelector | None = None  # None: any node
    node_shapes: ShapeSet | None = None  # None: any shape
    reserved_nodes: LabelSelector | None = None
    reserved_shapes: frozenset[str] = frozenset()
    enforcement: Enforcement = "warn"


def _names(raw: Any, path: str, problems: list[tuple[str, str]]) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        problems.append((path, "must be a list of names"))
        return frozenset()
    return frozenset(raw)


def parse(obj: Mapping[str, Any]) -> FitPolicy:
    """A FitPolicy object; raises PolicyError naming every bad field."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    name = meta.get("name") if isinstance(meta.get("name"), str) else "<unnamed>"
    problems: list[tuple[str, str]] = []
    spec = obj.get("spec", {})
    if not isinstance(spec, Mapping):
        raise PolicyError(str(name), [("spec", "must be an object")])
    subj = spec.get("subjects") or {}
    if not isinstance(subj, Mapping):
        problems.append(("spec.subjects", "must be an object"))
        subj = {}
    subjects = Subjects(
        _names(subj.get("namespaces"), "spec.subjects.namespaces", problems),
        label_selector(subj.get("namespaceSelector"), "spec.subjects.namespaceSelector",
                       problems) if subj.get("namespaceSelector") is not None else None,
        _names(subj.get("clusterQueues"), "spec.subjects.clusterQueues", problems),
        label_selector(subj.get("clusterQueueSelector"), "spec.subjects.clusterQueueSelector",
                       problems) if subj.get("clusterQueueSelector") is not None else None)
    nodes = (label_selector(spec["nodes"], "spec.nodes", problems)
             if spec.get("nodes") is not None else None)
    shapes_raw = spec.get("nodeShapes")
    node_shapes = None
    if shapes_raw is not None:
        if not isinstance(shapes_raw, Mapping):
            problems.append(("spec.nodeShapes", "must be an object with names and/or selector"))
        else:
            node_shapes = ShapeSet(
                _names(shapes_raw.get("names"), "spec.nodeShapes.names", problems),
                label_selector(shapes_raw.get("selector"), "spec.nodeShapes.selector",
                               problems) if shapes_raw.get("selector") is not None else None)
    reserved = spec.get("reserved") or {}
    if not isinstance(reserved, Mapping):
        problems.append(("spec.reserved", "must be an object"))
        reserved = {}
    reserved_nodes = (label_selector(reserved["nodes"], "spec.reserved.nodes", problems)
                      if reserved.get("nodes") is not None else None)
    if reserved_nodes is not None and not reserved_nodes.requirements:
        problems.append(("spec.reserved.nodes", "must select some labels (an empty selector "
                                                "would reserve every node)"))
    reserved_shapes = _names(reserved.get("nodeShapes"), "spec.reserved.nodeShapes", problems)
    enforcement = spec.get("enforcement", "warn")
    if enforcement not in ("warn", "deny"):
        problems.append(("spec.enforcement", f"must be warn or deny, got {enforcement!r}"))
        enforcement = "warn"
    if problems:
        raise PolicyError(str(name), problems)
    return FitPolicy(str(name), str(meta.get("resourceVersion") or ""), subjects, nodes,
                     node_shapes, reserved_nodes, reserved_shapes, enforcement)


def parse_all(objs: Iterable[Mapping[str, Any]]) -> tuple[list[FitPolicy], list[PolicyError]]:
    """Every readable policy, and the errors of the others (which are not applied)."""
    good, bad = [], []
    for obj in objs:
        try:
            good.append(parse(obj))
        except PolicyError as exc:
            bad.append(exc)
    return good, bad


# -------------------------------------------------------------------------- scope


@dataclasses.dataclass(frozen=True)
class Scope:
    """What a (namespace, ClusterQueue) may use: `node_filter` (None: every node) and
    `shapes` (names; None: every shape), from the policies in `applied`."""

    key: tuple[Any, ...]
    applied: tuple[str, ...]
    enforcement: Enforcement
    node_filter: NodeFilter | None
    shapes: frozenset[str] | None
    description: str

    @property
    def restricted(self) -> bool:
        return self.node_filter is not None or self.shapes is not None


@dataclasses.dataclass(frozen=True)
class NodeSelection:
    """The nodes a scope allows, as a `NodeFilter`: none a `barred` selector matches, and
    (unless `any_node`) one an `allowed` selector matches. A value, not a closure, so a
    scope can be sent to another process (the webhook's decision process)."""

    barred: tuple[LabelSelector, ...]
    any_node: bool
    allowed: tuple[LabelSelector, ...]

    def __call__(self, node: fitcore.Node) -> bool:
        if any(s.matches(node.labels) for s in self.barred):
            return False
        return self.any_node or any(s.matches(node.labels) for s in self.allowed)


def scope(policies: Sequence[FitPolicy], shapes: Iterable[Mapping[str, Any]], *,
          namespace: str, namespace_labels: Mapping[str, str] | None = None,
          cluster_queue: str | None = None,
          cluster_queue_labels: Mapping[str, str] | None = None) -> Scope:
    """The policies for one (namespace, ClusterQueue), as the engine takes them. `shapes`
    are the NodeShape objects (their names and labels)."""
    ns_labels = namespace_labels or {}
    cq_labels = cluster_queue_labels or {}
    mine = [p for p in policies if p.subjects.match(namespace, ns_labels, cluster_queue,
                                                    cq_labels)]
    others = [p for p in policies if p not in mine]
    node_sets = [p.nodes for p in mine]
    any_node = not mine or any(s is None for s in node_sets)
    allowed_nodes = [s for s in node_sets if s is not None]
    barred_nodes = [p.reserved_nodes for p in others if p.reserved_nodes is not None]
    node_filter: NodeFilter | None = None
    if not any_node or barred_nodes:
        node_filter = NodeSelection(tuple(barred_nodes), any_node, tuple(allowed_nodes))

    shape_sets = [p.node_shapes for p in mine]
    any_shape = not mine or any(s is None for s in shape_sets)
    barred_shapes = frozenset().union(*(p.reserved_shapes for p in others))
    allowed: frozenset[str] | None = None
    if not any_shape or barred_shapes:
        names = []
        for obj in shapes:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
            assert isinstance(meta, Mapping)
            name = meta.get("name")
            if not isinstance(name, str) or name in barred_shapes:
                continue
            raw = meta.get("labels")
            shape_labels = ({str(k): str(v) for k, v in raw.items()}
                            if isinstance(raw, Mapping) else {})
            if any_shape or any(s is not None and s.matches(name, shape_labels)
                                for s in shape_sets):
                names.append(name)
        allowed = frozenset(names)
    key = (tuple(sorted((p.name, p.resource_version) for p in mine)),
           tuple(sorted((p.name, p.resource_version) for p in others
                        if p.reserved_nodes is not None or p.reserved_shapes)),
           allowed)
    enforcement: Enforcement = "deny" if any(p.enforcement == "deny" for p in mine) else "warn"
    return Scope(key, tuple(sorted(p.name for p in mine)), enforcement, node_filter, allowed,
                 _describe(mine, any_node, allowed_nodes, barred_nodes, allowed, barred_shapes))


def _describe(mine: Sequence[FitPolicy], any_node: bool, allowed_nodes: Sequence[LabelSelector],
              barred_nodes: Sequence[LabelSelector], shapes: frozenset[str] | None,
              barred_shapes: frozenset[str]) -> str:
    parts = []
    if mine:
        parts.append("FitPolicy " + ", ".join(sorted(p.name for p in mine)))
    if not any_node:
        parts.append("nodes matching " + " or ".join(str(s) for s in allowed_nodes))
    if shapes is not None:  # the shapes this tenant's own FitPolicies allow
        parts.append("shapes " + (", ".join(sorted(shapes)) or "none"))
    # What others reserved is said, never for whom or by which labels and shape names:
    # the description reaches this tenant's messages (check, gate, webhook, explain).
    if barred_nodes:
        parts.append("not nodes reserved for other tenants")
    if barred_shapes:
        parts.append("not shapes reserved for other tenants")
    return "; ".join(parts) or "no FitPolicy applies"


class Policies:
    """The FitPolicies of a store, parsed once per change."""

    def __init__(self, policies: store.Store) -> None:
        self._store = policies
        self._parsed: tuple[list[FitPolicy], list[PolicyError]] | None = None
        policies.subscribe(self._changed)

    def _changed(self, *_: Any) -> None:
        self._parsed = None

    def current(self) -> tuple[list[FitPolicy], list[PolicyError]]:
        if self._parsed is None:
            self._parsed = parse_all(self._store.list())
        return self._parsed
