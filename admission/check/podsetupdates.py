"""The podSetUpdates of a Ready check: additive only, never colliding.

Kueue merges every Ready check's podSetUpdates into the pod templates when the job starts;
a key that is already there with another value (in the template's labels, annotations or
nodeSelector, in an assigned flavor's nodeLabels, or in another check's updates) makes
Kueue fail the Workload for good (`FailedToStart`). So each key fitgate wants is checked
against all of those first:

- already there with the same value: nothing to add (adding it again is harmless but
  pointless);
- there with another value: fitgate uses a mechanism that does not collide, or gives the
  pin up and says so:
  - the placement label `fitgate.io/placement` (what the webhook gates on) becomes
    `fitgate.io/placement-workload: <uid>`; the template's own `fitgate.io/placement`
    label still makes the webhook gate the pods, and the release controller reads the
    workload from the second label;
  - a nodeSelector pin (a pod set on one node, or in one topology domain) is left out:
    the release controller pins every pod to its node anyway;
  - the `fitgate.io/pod-set` label is left out: the release controller then reads
    Kueue's `kueue.x-k8s.io/podset` label;
  - the consume-provisioning-request annotations are left out (another check set them,
    so the pods consume that check's request): the message says so.

A pod set Kueue's topology-aware scheduling places (a TAS flavor: its assignment has a
`topologyAssignment`) gets neither: Kueue's ungater pins each pod to a domain of that
assignment and its node controller terminates pods pinned by hostname to a node outside
it, so fitgate adds only its topology-domain pin (and the autoscaler annotations).

What fitgate adds per pod set: labels `fitgate.io/placement: <workload uid>` and
`fitgate.io/pod-set: <name>`; a nodeSelector pin when all its pods go to one node
(`kubernetes.io/hostname`) or to one topology domain (the pod set's required topology
label); and, after provisioning, the two autoscaler annotations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import fitcore
from admission import constants as c
from admission.engine import gangs


@dataclasses.dataclass(frozen=True, slots=True)
class Updates:
    pod_set_updates: list[dict[str, Any]]
    notes: list[str]  # pins given up, and why


def _taken(workload: Mapping[str, Any], pod_set: Mapping[str, Any], check: str,
           assignment: gangs.Assignment | None) -> dict[str, dict[str, str]]:
    """Keys already set on a pod set's pods, per field: template, flavors, other checks."""
    template = pod_set.get("template") or {}
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    out = {"labels": dict(meta.get("labels") or {}),
           "annotations": dict(meta.get("annotations") or {}),
           "nodeSelector": dict(spec.get("nodeSelector") or {})}
    if assignment is not None:
        for k, v in assignment.node_labels.items():
            out["nodeSelector"].setdefault(k, v)
    name = pod_set.get("name") or "main"
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == check:
            continue
        for update in entry.get("podSetUpdates") or []:
            if update.get("name") != name:
                continue
            for field in out:
                for k, v in (update.get(field) or {}).items():
                    out[field].setdefault(k, v)
    return out


def _pin(pod_set: fitcore.PodSet, placements: Sequence[fitcore.Placement],
         domains: Mapping[str, str], hostnames: Mapping[str, str]) -> dict[str, str]:
    nodes = {p.node for p in placements if p.pod_set == pod_set.name}
    if len(nodes) == 1:
        node = next(iter(nodes))
        return {c.HOSTNAME_LABEL: hostnames.get(node) or node}
    domain = domains.get(pod_set.name)
    if pod_set.topology and domain:
        return {pod_set.topology: domain}
    return {}


def build(workload: Mapping[str, Any], check: str, wg: gangs.WorkloadGang,
          placements: Sequence[fitcore.Placement], domains: Mapping[str, str],
          annotations: Mapping[str, str] | None = None,
          hostnames: Mapping[str, str] | None = None) -> Updates:
    """podSetUpdates for every pod set of the Workload (see the module docstring).
    `hostnames`: the nodes' `kubernetes.io/hostname` labels by node name, where they
    differ from the name (a pin names the label's value)."""
    uid = str(workload["metadata"].get("uid", ""))
    spec_pod_sets = {str(ps.get("name") or "main"): ps
                     for ps in (workload.get("spec") or {}).get("podSets") or []}
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    for pod_set in wg.gang.pod_sets:
        raw = spec_pod_sets.get(pod_set.name, {"name": pod_set.name})
        assignment = wg.assignments.get(pod_set.name) if wg.assignments else None
        taken = _taken(workload, raw, check, assignment)
        update: dict[str, Any] = {"name": pod_set.name}

        def add(field: str, key: str, value: str, taken: dict[str, dict[str, str]] = taken,
                update: dict[str, Any] = update) -> bool:
            """Add key=value unless it is there; False when it is there, different."""
            have = taken[field].get(key)
            if have == value:
                return True
            if have is not None:
                return False
            update.setdefault(field, {})[key] = value
            return True

        if assignment is not None and assignment.topology_assigned:
            # Kueue's TAS places these pods (its ungater pins each to a domain of its
            # assignment; its node controller terminates pods pinned by hostname outside
            # it): no per-pod release and no node pin, only the topology domain.
            notes.append(f"pod set {pod_set.name}: Kueue's topology-aware scheduling "
                         "places its pods; fitgate pins its topology domain only")
            domain = domains.get(pod_set.name)
            if pod_set.topology and domain and not add("nodeSelector", pod_set.topology,
                                                       domain):
                notes.append(f"pod set {pod_set.name}: nodeSelector {pod_set.topology} is "
                             f"already {taken['nodeSelector'][pod_set.topology]!r}")
            for key, value in (annotations or {}).items():
                add("annotations", key, value)
            out.append(update)
            continue
        if not add("labels", c.PLACEMENT_LABEL, uid) and not add(
                "labels", c.PLACEMENT_WORKLOAD_LABEL, uid):
            notes.append(f"pod set {pod_set.name}: labels {c.PLACEMENT_LABEL} and "
                         f"{c.PLACEMENT_WORKLOAD_LABEL} are taken; pods are not released "
                         "in fitcore's order")
        if not add("labels", c.POD_SET_LABEL, pod_set.name):
            notes.append(f"pod set {pod_set.name}: label {c.POD_SET_LABEL} is taken; the "
                         f"release controller reads {c.KUEUE_POD_SET_LABEL}")
        for key, value in _pin(pod_set, placements, domains, hostnames or {}).items():
            if not add("nodeSelector", key, value):
                notes.append(f"pod set {pod_set.name}: nodeSelector {key} is already "
                             f"{taken['nodeSelector'][key]!r}; pods are pinned one by one "
                             "instead")
        for key, value in (annotations or {}).items():
            if not add("annotations", key, value):
                notes.append(f"pod set {pod_set.name}: annotation {key} is already set by "
                             "another check or the template; its pods do not consume "
                             "fitgate's request")
        out.append(update)
    return Updates(out, notes)
