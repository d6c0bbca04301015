"""Required inter-pod affinity, anti-affinity and topology spread: the scheduler filters
that decide where a gang's pods may go relative to other pods.

What is modelled (InterPodAffinity and PodTopologySpread filters, required terms only):
- **Anti-affinity** (`requiredDuringSchedulingIgnoredDuringExecution`): a pod does not go
  to a node whose topology domain (the value of the term's `topologyKey` label) holds a
  pod the term selects: bound pods of the inventory and pods of the gang placed before
  it. Symmetrically, a bound pod's anti-affinity keeps matching gang pods out of its
  domain. A term that selects the pod set's own pods allows one pod of the set per
  domain (with `kubernetes.io/hostname`: one per node).
- **Affinity**: a pod goes only to a domain that holds a pod the term selects; when no
  pod anywhere matches and the pod set's own pods do, the first pod may go anywhere and
  the rest follow into its domain (the set gets that topology).
- **Topology spread** with `whenUnsatisfiable: DoNotSchedule` over the pod set's own
  pods: at most `maxSkew` pods of the set per domain. This is sound (every placement
  keeps the skew within maxSkew) but may refuse spreads the scheduler would allow after
  other domains filled up; it is reported as a limitation (`LIMITATION_SPREAD`).
  Constraints whose selector does not select the set's own pods, `minDomains`,
  `matchLabelKeys` and node inclusion policies are not modelled and are refused.

Label selectors: `matchLabels` and `matchExpressions` (In, NotIn, Exists, DoesNotExist);
namespaces: the term's `namespaces`, or the pod's own; `namespaceSelector: {}` (all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from fitcore import fields

LIMITATION_SPREAD = ("topology spread is checked as at most maxSkew of the pod set's pods "
                     "per domain")


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A metav1.LabelSelector (an empty one selects every pod)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        for k, op, vals in self.expressions:
            have = labels.get(k)
            if op == "In" and (have is None or have not in vals):
                return False
            if op == "NotIn" and have is not None and have in vals:
                return False
            if op == "Exists" and have is None:
                return False
            if op == "DoesNotExist" and have is not None:
                return False
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class Term:
    selector: Selector | None  # None selects no pod
    topology_key: str
    namespaces: frozenset[str] | None = None  # None: the pod's own namespace
    all_namespaces: bool = False

    def selects(self, owner_namespace: str, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selector is None:
            return False
        if not self.all_namespaces:
            allowed = self.namespaces if self.namespaces else frozenset({owner_namespace})
            if namespace not in allowed:
                return False
        return self.selector.matches(labels)


@dataclasses.dataclass(frozen=True, slots=True)
class Spread:
    max_skew: int
    topology_key: str
    selector: Selector


@dataclasses.dataclass(frozen=True, slots=True)
class Rules:
    """A pod set's labels and its required pod placement rules."""

    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    affinity: tuple[Term, ...] = ()
    anti_affinity: tuple[Term, ...] = ()
    spread: tuple[Spread, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.affinity or self.anti_affinity or self.spread)


@dataclasses.dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod already on a node, as the filters see it."""

    node: str
    namespace: str
    labels: Mapping[str, str]
    anti_affinity: tuple[Term, ...] = ()


# ---------------------------------------------------------------------- reading


_OPS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector(f: fields.Reader, raw: Any, path: str) -> Selector | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        f.c.add(path, "must be an object")
        return None
    labels = f.string_map(raw, "matchLabels", path)
    exprs = []
    for epath, e in f.items(raw, "matchExpressions", path):
        op = f.get(e, "operator", epath, str, "In", required=True)
        if op not in _OPS:
            f.c.add(f"{epath}.operator", f"unknown operator {op!r}; one of {', '.join(_OPS)}")
        vals = f.get(e, "values", epath, list, [])
        exprs.append((f.get(e, "key", epath, str, "", required=True), op,
                      tuple(str(v) for v in vals)))
    return Selector(tuple(sorted(labels.items())), tuple(exprs))


def _terms(f: fields.Reader, obj: Any, path: str) -> tuple[Term, ...]:
    out = []
    for tpath, t in f.items(obj, "requiredDuringSchedulingIgnoredDuringExecution", path):
        key = f.get(t, "topologyKey", tpath, str, "", required=True)
        if not key:
            f.c.add(f"{tpath}.topologyKey", "must not be empty")
        for unsupported in ("matchLabelKeys", "mismatchLabelKeys"):
            if t.get(unsupported):
                f.c.add(f"{tpath}.{unsupported}", "is not modelled by fitgate (a named "
                                                  "limitation): remove it or decide by hand")
        ns_sel = t.get("namespaceSelector")
        all_ns = isinstance(ns_sel, Mapping) and not ns_sel
        if isinstance(ns_sel, Mapping) and ns_sel:
            f.c.add(f"{tpath}.namespaceSelector", "only {} (all namespaces) is modelled by "
                                                  "fitgate: namespace labels are not read")
        namespaces = f.get(t, "namespaces", tpath, list, [])
        out.append(Term(selector(f, t.get("labelSelector"), f"{tpath}.labelSelector"), key,
                        frozenset(str(n) for n in namespaces) or None, all_ns))
    return tuple(out)


def rules(f: fields.Reader, spec: Mapping[str, Any], labels: Mapping[str, str], path: str
          ) -> Rules:
    """A pod template's rules (problems go to the reader's collector)."""
    aff = f.get(spec, "affinity", path, Mapping, {})
    apath = f"{path}.affinity"
    affinity = _terms(f, f.get(aff, "podAffinity", apath, Mapping, {}), f"{apath}.podAffinity")
    anti = _terms(f, f.get(aff, "podAntiAffinity", apath, Mapping, {}),
                  f"{apath}.podAntiAffinity")
    spread = []
    for cpath, c in f.items(spec, "topologySpreadConstraints", path):
        if f.get(c, "whenUnsatisfiable", cpath, str, "DoNotSchedule") != "DoNotSchedule":
            continue  # ScheduleAnyway only scores
        sel = selector(f, c.get("labelSelector"), f"{cpath}.labelSelector")
        skew = f.get(c, "maxSkew", cpath, int, 1, required=True)
        if skew < 1:
            f.c.add(f"{cpath}.maxSkew", f"must be at least 1, got {skew}")
        key = f.get(c, "topologyKey", cpath, str, "", required=True)
        unmodelled = [k for k in ("minDomains", "matchLabelKeys", "nodeAffinityPolicy",
                                  "nodeTaintsPolicy") if c.get(k) is not None]
        if sel is None or not sel.matches(labels):
            f.c.add(f"{cpath}.labelSelector", "fitgate models topology spread over the pod "
                                              "set's own pods only (a named limitation)")
        elif unmodelled:
            f.c.add(f"{cpath}.{unmodelled[0]}", "is not modelled by fitgate (a named "
                                                "limitation)")
        else:
            spread.append(Spread(max(skew, 1), key, sel))
    return Rules(dict(labels), affinity, anti, tuple(spread))


# ---------------------------------------------------------------------- filtering


def caps(rules_: Rules, namespace: str) -> dict[str, int]:
    """Per topology key, how many pods of the set one domain may hold."""
    out: dict[str, int] = {}
    for t in rules_.anti_affinity:
        if t.selects(namespace, namespace, rules_.labels):
            out[t.topology_key] = 1
    for s in rules_.spread:
        out[s.topology_key] = min(out.get(s.topology_key, s.max_skew), s.max_skew)
    return out


def self_affinity_key(rules_: Rules, namespace: str, others: Sequence[BoundPod]) -> str | None:
    """A required affinity term that only the set's own pods satisfy: its topology key
    (the pods then go to one domain of it)."""
    for t in rules_.affinity:
        if t.selects(namespace, namespace, rules_.labels) and not any(
                t.selects(namespace, p.namespace, p.labels) for p in others):
            return t.topology_key
    return None


def allowed(rules_: Rules, namespace: str, node_labels: Mapping[str, str],
            others: Sequence[BoundPod], node_labels_of: Mapping[str, Mapping[str, str]],
            self_key: str | None) -> bool:
    """Whether a pod of the set may go to a node, given the pods already placed."""
    def same_domain(p: BoundPod, key: str) -> bool:
        mine = node_labels.get(key)
        return mine is not None and node_labels_of.get(p.node, {}).get(key) == mine

    for t in rules_.anti_affinity:
        if any(same_domain(p, t.topology_key) and t.selects(namespace, p.namespace, p.labels)
               for p in others):
            return False
    for p in others:
        for t in p.anti_affinity:
            if same_domain(p, t.topology_key) and t.selects(p.namespace, namespace,
                                                            rules_.labels):
                return False
    for t in rules_.affinity:
        if t.topology_key == self_key:
            if t.topology_key not in node_labels:
                return False
            continue
        if not any(same_domain(p, t.topology_key) and t.selects(namespace, p.namespace,
                                                                p.labels) for p in others):
            return False
    return True


class Gate:
    """The rules of one pod set against the pods placed so far: which nodes it may use,
    and how many of its pods a node may still take (per-domain caps)."""

    def __init__(self, rules_: Rules, namespace: str, others: Sequence[BoundPod],
                 labels_of: Mapping[str, Mapping[str, str]]) -> None:
        self.rules = rules_
        self.namespace = namespace
        self.others = others
        self.labels_of = labels_of
        self.self_key = self_affinity_key(rules_, namespace, others)
        self.caps = caps(rules_, namespace)

    def node_ok(self, name: str) -> bool:
        return allowed(self.rules, self.namespace, self.labels_of.get(name, {}), self.others,
                       self.labels_of, self.self_key)

    def room(self, name: str, used: Mapping[tuple[str, str], int], want: int) -> int:
        """How many of `want` pods the node may take, given pods per domain `used`."""
        labels = self.labels_of.get(name, {})
        for key, cap in self.caps.items():
            value = labels.get(key)
            if value is not None:
                want = min(want, cap - used.get((key, value), 0))
        return max(want, 0)

    def took(self, name: str, used: dict[tuple[str, str], int], k: int) -> None:
        labels = self.labels_of.get(name, {})
        for key in self.caps:
            value = labels.get(key)
            if value is not None:
                used[(key, value)] = used.get((key, value), 0) + k
