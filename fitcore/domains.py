"""A gang held to topology domains someone else chose: exact domains, exact pod counts.

Kueue's topology-aware scheduling (TAS) assigns each pod set, at quota reservation, a list
of topology domains with a pod count each (the Workload's `topologyAssignment`); its
ungater then pins every pod to one of those domains. A decision that must hold there
places exactly that many pods of the pod set in each domain, no more, no fewer.

`within(gang, assigned)` expresses that in the engine's own terms, without a new search:
each assigned pod set becomes one pod set per domain, `count` = the domain's pod count,
its nodeSelector extended with the domain's labels (one per topology level, e.g.
`{rack: rack-a}` or `{rack: rack-a, kubernetes.io/hostname: node-3}`). The pod set's own
required topology is dropped: the domains are the answer to it. Pod sets without an
assignment stay as they are. Hypothetical nodes of a NodeShape match a domain only when
the shape's fixed labels put them in it (a shape whose new nodes land in fresh domains
cannot help), which is exactly what the extended nodeSelector asks of the planner.

`Within.merge` maps the placements of the split gang back to the gang's own pod sets and
pod indices, in the order the engine found them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from fitcore import errors
from fitcore import gang as gangs  # `gang` is a field name below


@dataclasses.dataclass(frozen=True, slots=True)
class Domain:
    """One assigned domain of a pod set: its node labels (level label -> value) and how
    many of the pod set's pods go there."""

    labels: Mapping[str, str]
    count: int

    def describe(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.labels.items())


@dataclasses.dataclass(frozen=True, slots=True)
class Within:
    """The split gang, and for each of its pod sets: (original pod set, first index)."""

    gang: gangs.Gang
    origin: Mapping[str, tuple[str, int]]
    assigned: Mapping[str, tuple[Domain, ...]]

    def merge(self, placements: Iterable[gangs.Placement]) -> tuple[gangs.Placement, ...]:
        """Placements of the split gang as placements of the original pod sets."""
        out = []
        for p in placements:
            name, first = self.origin.get(p.pod_set, (p.pod_set, 0))
            out.append(dataclasses.replace(p, pod_set=name, index=first + p.index))
        return tuple(out)

    def pod_set_of(self, name: str) -> str:
        """The original pod set of a (split) pod set name."""
        return self.origin.get(name, (name, 0))[0]


def sub_name(pod_set: str, domain: Domain) -> str:
    """The split pod set's name: the pod set and its domain's values, e.g. `main@rack-a`."""
    return f"{pod_set}@{'/'.join(domain.labels.values())}"


def within(g: gangs.Gang, assigned: Mapping[str, Sequence[Domain]]) -> Within:
    """The gang with each pod set of `assigned` split into one pod set per domain (see the
    module docstring). Raises errors.InputError when an assigned pod set does not exist,
    or the domains' pod counts do not add up to the pod set's count."""
    by_name = {ps.name: ps for ps in g.pod_sets}
    problems = []
    for name, domains in assigned.items():
        ps = by_name.get(name)
        where = f"topologyAssignment of pod set {name!r}"
        if ps is None:
            problems.append(errors.FieldError(g.label, where, "names no pod set of the gang"))
            continue
        total = sum(d.count for d in domains)
        if not domains or any(d.count < 1 for d in domains):
            problems.append(errors.FieldError(
                g.label, where, "needs at least one domain, each with at least one pod"))
        elif total != ps.count:
            problems.append(errors.FieldError(
                g.label, where, f"assigns {total} pods, but the pod set has {ps.count}"))
        for d in domains:
            for k, v in d.labels.items():
                if ps.node_selector.get(k, v) != v:
                    problems.append(errors.FieldError(
                        g.label, where, f"assigns domain {d.describe()}, but the pod set's "
                        f"nodeSelector[{k!r}] is {ps.node_selector[k]!r}"))
    if problems:
        raise errors.InputError(problems)
    pod_sets: list[gangs.PodSet] = []
    origin: dict[str, tuple[str, int]] = {}
    for ps in g.pod_sets:
        domains = assigned.get(ps.name) or ()
        if not domains:
            pod_sets.append(ps)
            origin[ps.name] = (ps.name, 0)
            continue
        first = 0
        for d in domains:
            name = sub_name(ps.name, d)
            selector = {**ps.node_selector, **d.labels}  # no conflicts (checked above)
            pod_sets.append(dataclasses.replace(ps, name=name, count=d.count, min_count=None,
                                                node_selector=selector, topology=None))
            origin[name] = (ps.name, first)
            first += d.count
    return Within(dataclasses.replace(g, pod_sets=tuple(pod_sets)), origin,
                  {k: tuple(v) for k, v in assigned.items()})
