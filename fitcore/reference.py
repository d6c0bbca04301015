"""The reference allocator: the structured allocator's search, written for clarity.

This is the test oracle for the compiled core and the fallback when extensions are not
built (`FITCORE_NO_EXTENSIONS=1`). It follows the upstream depth-first search closely:
claims, then requests, then (for firstAvailable) subrequests in order, then devices in
pool/slice/device order, picking combinations (never permutations) within a request. It
has no pruning beyond that, so adversarial inputs take exponential time; the compiled
core exists for those.

Errors that make a claim unallocatable as written are raised eagerly, before searching,
by `prepare` (shared with the compiled core), so both engines agree on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from fitcore import cache, explain, model, pools, prepared, semantics, values, versions

DEFAULT_BUDGET = 2_000_000


class BudgetExceeded(Exception):
    pass


class ClaimError(Exception):
    """The claims cannot be allocated as written (verdict `error`)."""


# The prepared problem's types live below explain, which reads them.
Alternative = prepared.Alternative
Prepared = prepared.Prepared
_Pool = pools.Pool


def prepare(node: model.Node, inventory: model.Inventory, claims: Sequence[model.Claim],
            kube: versions.KubeVersion = versions.DEFAULT) -> Prepared:
    """Resolve classes, gather pools, expand `All`, check the per-claim device cap and
    evaluate every selector that the search could reach. Raises ClaimError."""
    cached = cache.for_slices(inventory.slices)
    prepared = Prepared(node, inventory, claims, cached.pools_for(node), cached.selector, [],
                        kube)
    allocated = inventory.allocated
    try:
        for claim in claims:
            per_request = []
            minimum = 0
            for request in claim.requests:
                alts = []
                for exact in request.alternatives:
                    if exact.derived_attributes:
                        raise ClaimError(f"ResourceClaim {claim.key}: request "
                                         f"{request.result_name(exact)}: derivedAttributes "
                                         "cannot be handled: DRADerivedAttributes is an alpha "
                                         "feature, off by default")
                    device_class = inventory.classes.get(exact.device_class)
                    if device_class is None:
                        raise ClaimError(f"ResourceClaim {claim.key}: request "
                                         f"{request.result_name(exact)}: DeviceClass "
                                         f"{exact.device_class!r} does not exist")
                    sub = exact.name if request.exactly is None else None
                    name = request.result_name(exact)
                    alt = Alternative(request, exact, device_class, name, sub,
                                      f"ResourceClaim {claim.key} request {name}")
                    if exact.allocation_mode == "All":
                        alt.all_devices = _all_devices(prepared, claim, alt)
                    else:
                        _touch_selectors(prepared, claim, alt)
                    alts.append(alt)
                minimum += min(a.needed for a in alts)
                per_request.append(alts)
            if minimum > model.MAX_DEVICES_PER_CLAIM:
                raise ClaimError(f"ResourceClaim {claim.key}: asks for at least {minimum} "
                                 f"devices; a claim may hold at most "
                                 f"{model.MAX_DEVICES_PER_CLAIM}")
            prepared.alternatives.append(per_request)
    except semantics.SelectionError as exc:
        raise ClaimError(exc.message) from exc
    del allocated
    return prepared


def _all_devices(prepared: Prepared, claim: model.Claim, alt: Alternative
                 ) -> list[tuple[pools.Pool, model.Device]]:
    out = []
    for pool in prepared.pools:
        if pool.incomplete:
            raise ClaimError(f"ResourceClaim {claim.key}: request {alt.result_name} asks for "
                             f"all devices, but pool {pool.label()} is being updated "
                             f"(not all of its ResourceSlices are published)")
        if pool.invalid:
            raise ClaimError(f"ResourceClaim {claim.key}: request {alt.result_name} asks for "
                             f"all devices, but pool {pool.label()} is invalid: {pool.invalid}")
        for s, device in pool.devices:
            if not prepared.selectable(alt, claim, pool, s, device):
                continue
            take = _capacity_take(prepared.kube, alt, device)
            ident = model.DeviceId(pool.driver, pool.name, device.name)
            # 1.36 leaves out devices whose remaining capacity is too small (All takes the
            # rest); 1.37 checks static capacity here, so such a device makes All fail.
            used = None if prepared.kube.all_checks_static_capacity else \
                prepared.inventory.allocated.consumed.get(ident)
            if take is None or not semantics.capacity_fits(device, take, used):
                continue
            out.append((pool, device))
    return out


def _touch_selectors(prepared: Prepared, claim: model.Claim, alt: Alternative) -> None:
    """Raise the runtime CEL error of any device an ExactCount search could look at
    (usable pools, not in use unless adminAccess), whatever order the search would take.
    Which devices fail is cached per node (fitcore.cache); in-use is checked per call."""
    node_devices = cache.for_slices(prepared.inventory.slices).devices_for(prepared.node)
    allocated = prepared.inventory.allocated
    for d in node_devices.failing(alt.exact, alt.device_class, alt.label):
        pool, device, ident = node_devices.devices[d]
        if not alt.exact.admin_access and ident in allocated.dedicated:
            continue
        prepared.selectable(alt, claim, pool, node_devices.slices[d], device)


# ----------------------------------------------------------------------------- search


@dataclasses.dataclass(slots=True)
class _Constraint:
    spec: model.Constraint
    attribute: str
    match: bool
    values: list[tuple[str, object]] = dataclasses.field(default_factory=list)

    def add(self, alt: Alternative, driver: str, device: model.Device) -> bool:
        if not self.spec.covers(alt.request.name, alt.subrequest):
            return True
        value = semantics.lookup_attribute(driver, device, self.attribute)
        if value is None:
            return False
        key = semantics.attribute_key(value)
        if self.match and self.values and self.values[0] != key:
            return False
        if not self.match and key in self.values:
            return False
        self.values.append(key)
        return True

    def remove(self, alt: Alternative) -> None:
        if self.spec.covers(alt.request.name, alt.subrequest):
            self.values.pop()


class _Search:
    def __init__(self, prepared: Prepared, budget: int) -> None:
        self.p = prepared
        self.budget = budget
        self.steps = 0
        self.allocated = prepared.inventory.allocated
        self.in_call: dict[model.DeviceId, set[int]] = {}
        self.sharing: dict[model.DeviceId, dict[str, values.Quantity]] = {}
        self.counters_used: dict[tuple[str, str], dict[str, dict[str, values.Quantity]]] = {}
        self.counters_free: dict[tuple[str, str], dict[str, dict[str, values.Quantity]]] = {}
        self.results: list[list[model.DeviceResult]] = [[] for _ in prepared.claims]
        self.constraints = [
            [_Constraint(c, c.match_attribute or c.distinct_attribute or "",
                         c.match_attribute is not None) for c in claim.constraints]
            for claim in prepared.claims
        ]

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.budget:
            raise BudgetExceeded

    # -- claims and requests

    def claim(self, ci: int) -> bool:
        if ci == len(self.p.claims):
            return True
        return self.request(ci, 0)

    def request(self, ci: int, ri: int) -> bool:
        self.step()
        if ri == len(self.p.claims[ci].requests):
            return self.claim(ci + 1)
        # A request is worth at least its smallest alternative: an alternative that,
        # with the devices taken and the least the later requests need, exceeds the
        # claim's cap cannot lead to an allocation (upstream backtracks out of it).
        later = sum(min(a.needed for a in alts)
                    for alts in self.p.alternatives[ci][ri + 1:])
        for alt in self.p.alternatives[ci][ri]:
            if len(self.results[ci]) + alt.needed + later > model.MAX_DEVICES_PER_CLAIM:
                continue
            if alt.all_devices is not None:
                if alt.all_devices and self.take_all(ci, ri, alt, 0):
                    return True
            elif self.take(ci, ri, alt, alt.exact.count, 0):
                return True
        return False

    def take_all(self, ci: int, ri: int, alt: Alternative, k: int) -> bool:
        assert alt.all_devices is not None
        if k == len(alt.all_devices):
            return self.request(ci, ri + 1)
        self.step()
        pool, device = alt.all_devices[k]
        undo = self.allocate(ci, alt, pool, device, must=True)
        if undo is None:
            return False
        if self.take_all(ci, ri, alt, k + 1):
            return True
        undo()
        return False

    def take(self, ci: int, ri: int, alt: Alternative, left: int, start: int) -> bool:
        """Pick `left` more devices for `alt`, at device positions >= `start`."""
        if left == 0:
            return self.request(ci, ri + 1)
        self.step()
        position = 0
        claim = self.p.claims[ci]
        for pool in self.p.pools:
            if not pool.usable:
                position += len(pool.devices)
                continue
            for s, device in pool.devices:
                position += 1
                if position <= start:
                    continue
                ident = model.DeviceId(pool.driver, pool.name, device.name)
                if alt.exact.admin_access:
                    if ci in self.in_call.get(ident, ()):
                        continue
                elif self.in_use(ident):
                    continue
                if not self.p.selectable(alt, claim, pool, s, device):
                    continue
                undo = self.allocate(ci, alt, pool, device)
                if undo is None:
                    continue
                if self.take(ci, ri, alt, left - 1, position):
                    return True
                undo()
        return False

    # -- one device

    def in_use(self, ident: model.DeviceId) -> bool:
        return ident in self.allocated.dedicated or bool(self.in_call.get(ident))

    def allocate(self, ci: int, alt: Alternative, pool: pools.Pool, device: model.Device,
                 *, must: bool = False) -> Callable[[], None] | None:
        """Allocate one device, returning an undo function, or None when it cannot be.

        Checks run in the allocator's order (in use, counters, taints, constraints,
        capacity): with `must` (allocationMode All) a broken constraint is fatal.
        """
        ident = model.DeviceId(pool.driver, pool.name, device.name)
        multi = device.allow_multiple_allocations
        admin = alt.exact.admin_access
        if not multi and admin and ci in self.in_call.get(ident, ()):
            return None
        if not admin and self.in_use(ident):
            return None
        already_sharing = ident in self.sharing or bool(self.allocated.consumed.get(ident)) or (
            self.p.kube.shared_without_capacity_is_shared and ident in self.allocated.shared)
        counted = False
        if device.consumes_counters and not (multi and already_sharing):
            if not self.reserve_counters(pool, device):
                return None
            counted = True
        if not semantics.taint_allows(device, alt.exact):
            if counted:
                self.release_counters(pool, device)
            return None
        added: list[_Constraint] = []
        for constraint in self.constraints[ci]:
            if not constraint.add(alt, pool.driver, device):
                for c in reversed(added):
                    c.remove(alt)
                if counted:
                    self.release_counters(pool, device)
                if must:
                    raise ClaimError(
                        f"ResourceClaim {self.p.claims[ci].key}: request {alt.result_name} "
                        f"asks for all matching devices, but device {ident} breaks the "
                        f"claim's constraint on {constraint.attribute}")
                return None
            added.append(constraint)
        take = _capacity_take(self.p.kube, alt, device)
        if take is None or not semantics.capacity_fits(
                device, take, self.allocated.consumed.get(ident), self.sharing.get(ident)):
            for c in reversed(added):
                c.remove(alt)
            if counted:
                self.release_counters(pool, device)
            return None
        if not multi:
            self.in_call.setdefault(ident, set()).add(ci)
        else:
            semantics.add_amounts(self.sharing.setdefault(ident, {}), take)
        self.results[ci].append(model.DeviceResult(
            alt.result_name, ident, admin_access=admin, shared=multi,
            consumed_capacity=take if multi else {}))

        def undo() -> None:
            self.results[ci].pop()
            if not multi:
                self.in_call[ident].discard(ci)
            else:
                semantics.sub_amounts(self.sharing[ident], take)
                if not already_sharing:
                    del self.sharing[ident]
            for c in reversed(added):
                c.remove(alt)
            if counted:
                self.release_counters(pool, device)
        return undo

    def reserve_counters(self, pool: pools.Pool, device: model.Device) -> bool:
        key = (pool.driver, pool.name)
        free = self.counters_free.get(key)
        if free is None:
            free = self.counters_free[key] = pools.available_counters(pool, self.allocated)
        used = self.counters_used.setdefault(key, {})
        for consumption in device.consumes_counters:
            semantics.add_amounts(used.setdefault(consumption.counter_set, {}),
                                  consumption.counters)
        for set_name, counters in free.items():
            for counter, available in counters.items():
                taken = used.get(set_name, {}).get(counter)
                if available.value < (taken.value if taken is not None else 0):
                    self.release_counters(pool, device)
                    return False
        return True

    def release_counters(self, pool: pools.Pool, device: model.Device) -> None:
        used = self.counters_used[(pool.driver, pool.name)]
        for consumption in device.consumes_counters:
            semantics.sub_amounts(used[consumption.counter_set], consumption.counters)


def _capacity_take(kube: versions.KubeVersion, alt: Alternative, device: model.Device
                   ) -> dict[str, values.Quantity] | None:
    """`semantics.capacity_take`, after the checks upstream makes first. A device that
    lacks a requested capacity is skipped before anything else. A negative capacity
    request is an error in 1.37 (the claim cannot be allocated anywhere); 1.36 takes it
    as it is. A request that cannot be rounded (`semantics.capacity_unrepresentable`:
    beyond int64, or rounded past it) is an error on both: fitcore follows 1.37 there,
    where 1.36 computes with a wrapped-around value (docs/semantics.md)."""
    requests = alt.exact.capacity_requests or {}
    if any(name not in device.capacity for name in requests):
        return None
    for name, q in requests.items():
        if q.value < 0 and kube.capacity_errors_abort:
            raise ClaimError(f"{alt.label}: device {device.name}: capacity {name!r}: capacity "
                             "value is negative")
    problem = semantics.capacity_unrepresentable(alt.exact, device,
                                                 milli=kube.fractional_capacity_range)
    if problem is not None:
        raise ClaimError(f"{alt.label}: device {device.name}: {problem}")
    return semantics.capacity_take(alt.exact, device, milli=kube.fractional_capacity_range)


def allocate(node: model.Node, inventory: model.Inventory, claims: Sequence[model.Claim],
             *, budget: int = DEFAULT_BUDGET,
             kube: versions.KubeVersion = versions.DEFAULT) -> model.NodeFit:
    """Whether `claims` (one pod's) can be allocated on `node` now, and one allocation,
    with the default-feature allocator of Kubernetes `kube`."""
    try:
        prepared = prepare(node, inventory, claims, kube)
    except ClaimError as exc:
        return model.NodeFit("error", node.name, reasons=(str(exc),), engine="py")
    search = _Search(prepared, budget)
    try:
        found = search.claim(0)
    except ClaimError as exc:
        return model.NodeFit("error", node.name, reasons=(str(exc),), steps=search.steps,
                             engine="py")
    except BudgetExceeded:
        return model.NodeFit("undecided", node.name, steps=search.steps, engine="py", reasons=(
            f"the search took more than {budget} steps on node {node.name}",))
    if found:
        return model.NodeFit("fits", node.name, tuple(tuple(r) for r in search.results),
                             steps=search.steps, engine="py")
    return model.NodeFit("no-fit", node.name, reasons=explain.no_fit(prepared),
                         steps=search.steps, engine="py")
