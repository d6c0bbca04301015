"""Allocations that span nodes: where the pods of a shared claim may run.

A device published by a slice with a `nodeSelector` (or `allNodes`, or a device with its
own node selection under `perDeviceNodeSelection`) is reachable from every node the
selection matches; the allocator copies that selection into the claim's
`status.allocation.nodeSelector`, and the scheduler then lets every pod that uses the
claim run on any node the selection allows (KEP-4815's multi-host devices). A device of a
node-local slice pins the claim to that node.

`usable_nodes` computes that set for devices just allocated; `matching` for a claim that
the inventory already shows allocated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fitcore import model, pools, predicates


def usable_nodes(results: Iterable[model.DeviceResult], nodes: Sequence[model.Node],
                 owner: Mapping[tuple[str, str], str], global_slices: Sequence[model.ResourceSlice]
                 ) -> frozenset[str] | None:
    """The nodes on which every device of `results` is usable (None: no restriction).
    `owner` maps node-local pools (driver, pool) to their node."""
    where: dict[model.DeviceId, list[tuple[model.ResourceSlice, model.Device]]] = {}
    wanted = {r.id for r in results}
    for s in global_slices:
        for d in s.devices:
            ident = model.DeviceId(s.driver, s.pool, d.name)
            if ident in wanted:
                where.setdefault(ident, []).append((s, d))
    allowed: set[str] | None = None
    for ident in wanted:
        local = owner.get((ident.driver, ident.pool))
        if local is not None:
            here = {local}
        elif ident in where:
            here = {n.name for n in nodes
                    if any(pools.slice_relevant(n, s) and pools.device_on_node(n, s, d)
                           for s, d in where[ident])}
        else:
            continue
        allowed = here if allowed is None else allowed & here
    return frozenset(allowed) if allowed is not None else None


def matching(selector: model.NodeSelector, nodes: Sequence[model.Node]) -> frozenset[str]:
    """The nodes an allocation's nodeSelector allows."""
    return frozenset(n.name for n in nodes if predicates.selector_matches(selector, n))
