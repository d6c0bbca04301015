"""Which device pools a node sees, as the structured allocator gathers them.

Rules (resource.k8s.io/v1, Kubernetes 1.36, partitionable devices on):
- A slice is relevant to a node when its nodeName / allNodes / nodeSelector matches, or,
  with perDeviceNodeSelection, when any of its devices matches. Slices that hold shared
  counters are relevant to every node: counters belong to the whole pool.
- Relevant slices are grouped by (driver, pool); only the highest generation among them
  is kept. The pool is complete when that many slices equal `resourceSliceCount`.
  Otherwise all slices of the cluster are consulted: a newer generation elsewhere makes
  the pool obsolete (ignored); the pool is complete if the cluster holds the full count,
  and then devices of slices that do not target this node still consume shared counters.
  Otherwise it is incomplete: its devices are not allocatable, and `All` requests fail.
- A pool is invalid when device names repeat, counter set names repeat, or a device
  consumes a counter set or counter the pool does not define.
- Pools are ordered by (driver, pool name); pools whose devices carry binding conditions
  come last. Within a pool, slices are ordered by name.
- A slice with a device that declares `compatibilityGroups` on a counter consumption is
  ignored (it still makes an older generation obsolete): the default allocator of 1.37
  (DRADeviceCompatibilityGroups alpha, off) cannot check co-allocation against the
  groups, so such a pool is incomplete. 1.36 has no such field; its API server stores
  none, so fitcore ignores such slices for 1.36 too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from fitcore import model, predicates, values


@dataclasses.dataclass(slots=True)
class Pool:
    driver: str
    name: str
    generation: int
    incomplete: bool = False
    invalid: str | None = None
    # (slice, device) pairs this node may allocate from, in allocator order.
    devices: list[tuple[model.ResourceSlice, model.Device]] = dataclasses.field(
        default_factory=list)
    # Devices of this pool's other slices (other nodes): they consume counters too.
    other_devices: list[model.Device] = dataclasses.field(default_factory=list)
    counter_sets: dict[str, dict[str, values.Quantity]] = dataclasses.field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return not self.incomplete and self.invalid is None

    def label(self) -> str:
        return f"{self.driver}/{self.name}"


def slice_relevant(node: model.Node, s: model.ResourceSlice) -> bool:
    if s.shared_counters:
        return True
    if s.node_name or s.all_nodes or s.node_selector is not None:
        return predicates.node_matches(node, s.node_name, s.all_nodes, s.node_selector)
    if s.per_device_node_selection:
        return any(predicates.node_matches(node, d.node_name, d.all_nodes, d.node_selector)
                   for d in s.devices)
    return False


def uses_compatibility_groups(s: model.ResourceSlice) -> bool:
    """Whether a device of the slice declares compatibility groups (then the slice is
    ignored: see the module docstring)."""
    return any(use.compatibility_groups for d in s.devices for use in d.consumes_counters)


def device_on_node(node: model.Node, s: model.ResourceSlice, d: model.Device) -> bool:
    """Per-device node selection (only meaningful with perDeviceNodeSelection)."""
    if not s.per_device_node_selection:
        return True
    return predicates.node_matches(node, d.node_name, d.all_nodes, d.node_selector)


def gather(node: model.Node, slices: Sequence[model.ResourceSlice]) -> list[Pool]:
    """The pools `node` sees, in the allocator's order."""
    relevant: dict[tuple[str, str], list[model.ResourceSlice]] = {}
    for s in slices:
        if not slice_relevant(node, s) or uses_compatibility_groups(s):
            continue
        key = (s.driver, s.pool)
        have = relevant.get(key)
        if have is None or s.generation > have[0].generation:
            relevant[key] = [s]
        elif s.generation == have[0].generation:
            have.append(s)
    pools: list[Pool] = []
    for (driver, name), group in relevant.items():
        generation = group[0].generation
        expected = group[0].resource_slice_count
        if len(group) == expected:
            pools.append(_build(driver, name, generation, group, ()))
            continue
        same_generation = []
        obsolete = False
        for s in slices:
            if s.driver != driver or s.pool != name:
                continue
            if s.generation > generation:
                obsolete = True
                break
            if s.generation == generation and not uses_compatibility_groups(s):
                same_generation.append(s)
        if obsolete:
            continue
        if len(same_generation) != expected:
            pools.append(Pool(driver, name, generation, incomplete=True))
            continue
        chosen = {id(s) for s in group}
        others = [s for s in same_generation if id(s) not in chosen]
        pools.append(_build(driver, name, generation, group, others))
    plain = sorted((p for p in pools if not _has_binding_conditions(p)),
                   key=lambda p: (p.driver, p.name))
    late = sorted((p for p in pools if _has_binding_conditions(p)),
                  key=lambda p: (p.driver, p.name))
    return plain + late


def _build(driver: str, name: str, generation: int, group: list[model.ResourceSlice],
           others: Iterable[model.ResourceSlice]) -> Pool:
    pool = Pool(driver, name, generation)
    ordered = sorted(group, key=lambda s: s.name)
    device_slices = [s for s in ordered if not s.shared_counters]
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                pool.invalid = f"duplicate device name {d.name}"
                return pool
            seen.add(d.name)
    for s in ordered:
        for cs in s.shared_counters:
            if cs.name in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs.name}"
                pool.counter_sets = {}
                return pool
            pool.counter_sets[cs.name] = dict(cs.counters)
    other_devices = [d for s in others for d in s.devices]
    all_devices = [d for s in device_slices for d in s.devices] + other_devices
    for d in all_devices:
        problem = _counter_problem(pool, d)
        if problem:
            pool.invalid = problem
            return pool
    pool.devices = [(s, d) for s in device_slices for d in s.devices]
    pool.other_devices = other_devices
    return pool


def _counter_problem(pool: Pool, device: model.Device) -> str | None:
    for use in device.consumes_counters:
        counters = pool.counter_sets.get(use.counter_set)
        if counters is None:
            return f"counter set {use.counter_set} not found"
        for counter in use.counters:
            if counter not in counters:
                return f"counter {counter} not found in counter set {use.counter_set}"
    return None


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.binding_conditions for _, d in pool.devices)


def available_counters(pool: Pool, allocated: model.AllocatedState
                       ) -> dict[str, dict[str, values.Quantity]]:
    """Pool counters minus what devices allocated anywhere in the pool consume (may go
    negative when a driver shrank a pool under running workloads)."""
    available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
    for device in [d for _, d in pool.devices] + pool.other_devices:
        if not allocated.is_allocated(model.DeviceId(pool.driver, pool.name, device.name)):
            continue
        for use in device.consumes_counters:
            into = available[use.counter_set]
            for counter, amount in use.counters.items():
                into[counter] = into[counter] - amount
    return available
