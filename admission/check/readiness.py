"""Readiness of a plan's new nodes: Ready, past their start-up taints, and with a
ResourceSlice published for every driver their NodeShape promises. Only then is the gang
verified on them (`capacity.sync_verify`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import fitcore
from admission import kueue
from admission.check import inputs


@dataclasses.dataclass(frozen=True, slots=True)
class NodeReadiness:
    ready: int  # new nodes of the plan's shapes Ready with their slices published
    planned: int
    new_nodes: dict[str, list[str]]  # shape -> new node names (Ready or not)
    waiting: list[str]  # "h100: 1 of 2 ready" per shape short of its count

    @property
    def complete(self) -> bool:
        return self.ready >= self.planned


def of(stores: inputs.Stores, request: Mapping[str, Any], planned: fitcore.Plan,
       node_shapes: Mapping[str, fitcore.NodeShape], owners: inputs.Owners
       ) -> NodeReadiness:
    """The plan's new nodes that are Ready with a ResourceSlice per driver their
    shape publishes."""
    existing = planned.existing_nodes
    # another request's new node is not this one's (owners)
    request_name = str(_meta(request).get("name"))
    slices_of: dict[str, set[str]] = {}
    for s in stores.resource_slices.list():
        spec = s.get("spec") or {}
        if spec.get("nodeName"):
            slices_of.setdefault(str(spec["nodeName"]), set()).add(str(spec.get("driver")))
    totals: dict[str, int] = {}
    for sc in planned.shapes:
        totals[sc.shape] = totals.get(sc.shape, 0) + sc.count
    ready = 0
    new_nodes: dict[str, list[str]] = {}
    waiting: list[str] = []
    for shape_name, count in totals.items():
        shape = node_shapes.get(shape_name)
        labels = dict(shape.node_labels) if shape else {}
        drivers = {s.driver for s in shape.slices} if shape else set()
        mine = sorted(str(_meta(n)["name"]) for n in stores.nodes.list()
                      if _meta(n)["name"] not in existing
                      and owners.get(str(_meta(n)["name"]), (request_name,))[0]
                      == request_name
                      and all((_meta(n).get("labels") or {}).get(k) == v
                              for k, v in labels.items()))
        new_nodes[shape_name] = mine
        ok = [n for n in mine if node_ready(stores.nodes.get(n))
              and drivers <= slices_of.get(n, set())]
        ready += min(count, len(ok))
        if len(ok) < count:
            waiting.append(f"{shape_name}: {len(ok)} of {count} new nodes ready with "
                           "their ResourceSlices")
    return NodeReadiness(ready, planned.nodes, new_nodes, waiting)



# Taints a new node carries until it is ready for work: the node lifecycle controller
# removes not-ready/unreachable a moment after the Ready condition turns True, the cloud
# provider removes uninitialized, and the cluster-autoscaler's startup-taint conventions
# are removed by whoever set them up. Verifying while one is on would judge the node by
# a state it is about to leave.
_STARTUP_TAINTS = frozenset({
    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
    "node.kubernetes.io/network-unavailable", "node.cloudprovider.kubernetes.io/uninitialized"})
_STARTUP_TAINT_PREFIXES = ("startup-taint.cluster-autoscaler.kubernetes.io/",
                           "ignore-taint.cluster-autoscaler.kubernetes.io/")


def node_ready(node: Mapping[str, Any] | None) -> bool:
    """Ready, and carrying none of the taints of a node still starting."""
    if node is None or not kueue.is_true(node, "Ready"):
        return False
    for taint in (node.get("spec") or {}).get("taints") or ():
        key = str((taint or {}).get("key") or "")
        if key in _STARTUP_TAINTS or key.startswith(_STARTUP_TAINT_PREFIXES):
            return False
    return True


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}
