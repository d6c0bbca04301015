"""Why claims do not fit a node, in words a person can act on.

Called only after a search said no, so it may take its time: it counts, per request,
the devices that match, are free, tolerate taints and have capacity left, and for each
matchAttribute constraint the largest group of free devices sharing one value.
"""

from __future__ import annotations

from collections import Counter

from fitcore import model, semantics
from fitcore.prepared import Alternative, Prepared


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _candidates(p: Prepared, claim: model.Claim, alt: Alternative
                ) -> tuple[int, int, int, list[tuple[str, model.Device]], int]:
    """(matching, free, tainted, usable, unpublished) devices for one alternative;
    unpublished: free devices that do not publish a capacity the request asks for."""
    matching = free = tainted = unpublished = 0
    usable: list[tuple[str, model.Device]] = []
    for pool in p.pools:
        if not pool.usable:
            continue
        for s, device in pool.devices:
            if not p.selectable(alt, claim, pool, s, device):
                continue
            matching += 1
            ident = model.DeviceId(pool.driver, pool.name, device.name)
            if ident in p.inventory.allocated.dedicated and not alt.exact.admin_access:
                continue
            free += 1
            if not semantics.taint_allows(device, alt.exact):
                tainted += 1
                continue
            take = semantics.capacity_take(alt.exact, device)
            if take is None or not semantics.capacity_fits(
                    device, take, p.inventory.allocated.consumed.get(ident)):
                if any(name not in device.capacity
                       for name in alt.exact.capacity_requests or {}):
                    unpublished += 1
                continue
            usable.append((pool.driver, device))
    return matching, free, tainted, usable, unpublished


def no_fit(p: Prepared) -> tuple[str, ...]:
    node = p.node.name
    reasons: list[str] = []
    for pool in p.pools:
        if pool.incomplete:
            reasons.append(f"node {node}: pool {pool.label()} is being updated (not all of its "
                           "ResourceSlices are published yet); its devices are not used")
        elif pool.invalid:
            reasons.append(f"node {node}: pool {pool.label()} is invalid ({pool.invalid}); its "
                           "devices are not used")
    for ci, claim in enumerate(p.claims):
        usable_by_request: dict[str, list[tuple[str, model.Device]]] = {}
        for alts in p.alternatives[ci]:
            shortfalls = []
            for alt in alts:
                matching, free, tainted, usable, unpublished = _candidates(p, claim, alt)
                usable_by_request.setdefault(alt.request.name, []).extend(usable)
                need = alt.needed
                if alt.all_devices is not None:
                    if need == 0:
                        shortfalls.append(f"asks for all devices of class {alt.exact.device_class}"
                                          f" but none match on node {node}")
                    elif len(usable) < need:
                        shortfalls.append(f"asks for all {need} matching devices of class "
                                          f"{alt.exact.device_class}, {need - len(usable)} of "
                                          "them in use or without capacity")
                    continue
                if len(usable) >= need:
                    continue
                detail = [f"{matching} match"]
                if free < matching:
                    detail.append(f"{matching - free} in use")
                if tainted:
                    detail.append(f"{tainted} tainted and not tolerated")
                lacking = free - tainted - len(usable) - unpublished
                if unpublished:
                    names = ", ".join(sorted(alt.exact.capacity_requests or {}))
                    detail.append(f"{unpublished} that do not publish the capacity it asks "
                                  f"for ({names})")
                if lacking:
                    detail.append(f"{lacking} without enough capacity")
                shortfalls.append(f"needs {_plural(need, 'device')} of class "
                                  f"{alt.exact.device_class}; node {node} has "
                                  f"{', '.join(detail)}")
            if len(shortfalls) == len(alts) and shortfalls:
                name = alts[0].request.name
                joined = "; or ".join(shortfalls) if len(shortfalls) > 1 else shortfalls[0]
                reasons.append(f"ResourceClaim {claim.key} request {name}: {joined}")
        for constraint in claim.constraints:
            if constraint.match_attribute is None:
                continue
            reason = _match_shortfall(claim, constraint, p, ci, usable_by_request)
            if reason:
                reasons.append(reason)
    if not reasons:
        reasons.append(f"node {node}: each request has enough matching devices on its own, but "
                       "not all of them at once (they compete for the same devices, shared "
                       "counters or capacity, or a constraint cannot hold across them)")
    return tuple(reasons)


def _match_shortfall(claim: model.Claim, constraint: model.Constraint, p: Prepared, ci: int,
                     usable_by_request: dict[str, list[tuple[str, model.Device]]]) -> str | None:
    attribute = constraint.match_attribute
    assert attribute is not None
    need = 0
    groups: Counter[object] = Counter()
    seen: set[int] = set()
    for alts in p.alternatives[ci]:
        alt = alts[0]
        if not constraint.covers(alt.request.name, alt.subrequest):
            continue
        need += alt.needed
        for driver, device in usable_by_request.get(alt.request.name, []):
            if id(device) in seen:
                continue
            seen.add(id(device))
            value = semantics.lookup_attribute(driver, device, attribute)
            if value is not None:
                groups[semantics.attribute_key(value)] += 1
    if not groups:
        return (f"ResourceClaim {claim.key}: matchAttribute {attribute}: no usable device on "
                f"node {p.node.name} has this attribute")
    (key, size), = groups.most_common(1)
    if size >= need:
        return None
    shown = key[1] if isinstance(key, tuple) else key
    return (f"ResourceClaim {claim.key}: matchAttribute {attribute} needs {need} devices with one "
            f"value; on node {p.node.name} the largest group of usable devices has {size} "
            f"({shown!s})")
