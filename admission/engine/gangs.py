"""The gang of a Kueue Workload, as fitcore places it.

A Workload's gang is its `spec.podSets`, with, once Kueue has reserved quota, what
`status.admission.podSetAssignments` says about each pod set:

- `count`: how many pods were admitted (partial admission admits fewer than `count`, at
  least `minCount`); exactly that many must be placed.
- `flavors`: the ResourceFlavor per resource. A flavor's `spec.nodeLabels` restrict the
  nodes its pods may use (Kueue adds them to the pods' nodeSelector when the job starts)
  and its `spec.tolerations` are added to the pods; so they are added to the pod set here.

A Workload without `status.admission` is not yet admitted: its gang has
`assignments=None` (the pre-quota gate asks about such gangs), and every pod set counts in
full. ResourceClaimTemplates and ResourceClaims come from stores of the Workload's
namespace. Parsing is fitcore's one gang reader (`fitcore.gang_of`, which reads the
Workload as the API server hands it over: limits stand in for missing requests); every
problem, fitcore's and the assignment's, is reported at once as one `fitcore.InputError`
naming object and field.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import fitcore
from admission.engine import fitting
from admission.kube import client, store


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """What Kueue assigned one pod set: a pod count and ResourceFlavors."""

    count: int
    flavors: Mapping[str, str]  # resource -> ResourceFlavor name
    node_labels: Mapping[str, str]  # union of the flavors' spec.nodeLabels
    tolerations: tuple[Mapping[str, Any], ...]  # the flavors' spec.tolerations
    #: Kueue's topology-aware scheduling places this pod set's pods (a TAS flavor: the
    #: assignment has a `topologyAssignment`, or one is pending): its ungater pins each pod
    #: to a domain, and its node controller terminates pods pinned to other nodes.
    topology_assigned: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class WorkloadGang:
    gang: fitcore.Gang
    #: Per pod set name; None while the Workload has no quota reservation.
    assignments: Mapping[str, Assignment] | None


def describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"Workload {meta.get('namespace', '')}/{meta.get('name', '<unnamed>')}"


def gang_of(obj: client.Obj, *, templates: store.Store, flavors: store.Store,
            claims: store.Store | None = None) -> WorkloadGang:
    """The gang of a Workload (see the module docstring); raises fitcore.InputError."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    who = describe(obj)
    problems: list[fitcore.FieldError] = []
    body = copy.deepcopy(obj)
    raw_spec = body.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    raw_pod_sets = spec.get("podSets")
    pod_sets: list[Any] = raw_pod_sets if isinstance(raw_pod_sets, list) else []
    raw_status = body.get("status")
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    admission = status.get("admission")
    assignments: dict[str, Assignment] | None = None
    if isinstance(admission, Mapping):
        assignments = _assignments(who, admission, pod_sets, flavors, problems)
        for i, ps in enumerate(pod_sets):
            if not isinstance(ps, dict):
                continue
            a = assignments.get(str(ps.get("name") or "main"))
            if a is not None:
                _restrict(who, i, ps, a, problems)
    elif admission is not None:
        problems.append(fitcore.FieldError(who, "status.admission", "must be an object"))
    parsed: fitcore.Gang | None = None
    try:
        # Only the templates and claims the pod sets name (`fitting.named`).
        template_names, claim_names = fitting.named_claims(obj)
        parsed = fitcore.gang_of(body, fitting.named(templates, template_names, namespace),
                                  fitting.named(claims, claim_names, namespace))
    except fitcore.InputError as exc:
        problems.extend(exc.errors)
    if problems or parsed is None:
        raise fitcore.InputError(problems)
    return WorkloadGang(parsed, assignments)


def _assignments(who: str, admission: Mapping[str, Any], pod_sets: list[Any],
                 flavors: store.Store, problems: list[fitcore.FieldError]) -> dict[str, Assignment]:
    spec_counts: dict[str, tuple[int | None, int | None]] = {}
    for ps in pod_sets:
        if isinstance(ps, Mapping):
            count = ps.get("count", 1)
            spec_counts[str(ps.get("name") or "main")] = (
                count if isinstance(count, int) else None, ps.get("minCount"))
    out: dict[str, Assignment] = {}
    raw = admission.get("podSetAssignments")
    if not isinstance(raw, list):
        problems.append(fitcore.FieldError(who, "status.admission.podSetAssignments",
                                          "must be a list"))
        return out
    for i, a in enumerate(raw):
        path = f"status.admission.podSetAssignments[{i}]"
        if not isinstance(a, Mapping):
            problems.append(fitcore.FieldError(who, path, "must be an object"))
            continue
        name = str(a.get("name") or "main")
        if name not in spec_counts:
            problems.append(fitcore.FieldError(who, f"{path}.name",
                                              f"no pod set {name!r} in spec.podSets"))
            continue
        spec_count, min_count = spec_counts[name]
        count = a.get("count", spec_count)
        if isinstance(count, bool) or not isinstance(count, int):
            problems.append(fitcore.FieldError(who, f"{path}.count",
                                              f"must be an integer, got {count!r}"))
            continue
        low = min_count if isinstance(min_count, int) else spec_count
        if spec_count is not None and not (low or 0) <= count <= spec_count:
            problems.append(fitcore.FieldError(
                who, f"{path}.count", f"{count} is out of range: pod set {name!r} has count "
                f"{spec_count}" + (f" and minCount {min_count}" if min_count is not None
                                   else "")))
            continue
        by_resource = a.get("flavors") or {}
        if not isinstance(by_resource, Mapping):
            problems.append(fitcore.FieldError(who, f"{path}.flavors",
                                              "must be a map of resource to flavor"))
            by_resource = {}
        labels: dict[str, str] = {}
        tolerations: list[Mapping[str, Any]] = []
        for flavor_name in sorted(set(map(str, by_resource.values()))):
            flavor = flavors.get(flavor_name)
            if flavor is None:
                problems.append(fitcore.FieldError(who, f"{path}.flavors",
                                                  f"ResourceFlavor {flavor_name} not found"))
                continue
            fspec = flavor.get("spec") or {}
            for k, v in (fspec.get("nodeLabels") or {}).items():
                if k in labels and labels[k] != v:
                    problems.append(fitcore.FieldError(
                        who, f"{path}.flavors", f"ResourceFlavor {flavor_name} "
                        f"spec.nodeLabels[{k!r}] is {v!r} but another flavor of "
                        f"pod set {name!r} says {labels[k]!r}"))
                labels[str(k)] = str(v)
            for t in fspec.get("tolerations") or []:
                if t not in tolerations:
                    tolerations.append(t)
        out[name] = Assignment(count, dict(by_resource), labels, tuple(tolerations),
                               bool(a.get("topologyAssignment")
                                    or a.get("delayedTopologyRequest")))
    return out


def _restrict(who: str, index: int, ps: dict[str, Any], a: Assignment,
              problems: list[fitcore.FieldError]) -> None:
    """Add the flavors' node labels (as nodeSelector) and tolerations to a pod set's
    template, as Kueue does to the pods when the job starts."""
    template = ps.setdefault("template", {})
    if not isinstance(template, dict):
        return
    spec = template.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    selector = dict(spec.get("nodeSelector") or {})
    for k, v in a.node_labels.items():
        if k in selector and selector[k] != v:
            problems.append(fitcore.FieldError(
                who, f"spec.podSets[{index}].template.spec.nodeSelector[{k!r}]",
                f"is {selector[k]!r}, but the assigned flavor's nodeLabels say {v!r}: no "
                "node can satisfy both"))
        selector[k] = v
    if selector:
        spec["nodeSelector"] = selector
    if a.tolerations:
        spec["tolerations"] = [*(spec.get("tolerations") or []),
                               *(copy.deepcopy(dict(t)) for t in a.tolerations)]

