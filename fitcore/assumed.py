"""A promised gang's placements, counted as in use before its pods exist.

Between the admission check's Ready and its pods binding, an admitted gang holds nothing
the cluster shows: its pods are not created yet, its claims not allocated. The service
keeps its nodes out of other gangs' decisions meanwhile. Holding whole nodes never
double-books, but it wastes what the promised pods leave free on them: a gang of one
GPU holds a node of eight. `Inventory.assume` counts a promise's pods (their requests,
and one pod each) and its claims' devices as allocated on the nodes its placements
name, so that a decision sees what is left; `Inventory.forget` ends that per node, once
the pods placed there have bound (their real pods and claims then count).

Whether another gang may share a node with a promise is a question of order: the
scheduler allocates each pod's claims when it schedules that pod, first fit, in the
order the pods come, which is not the order fitgate decided them in. `kind_of` says what
a gang needs, `compatible` when two gangs' placements on one node hold in any order:

- `NO_DEVICES`: no claims and no extended resources; its requests add up in any order,
  so it shares a node with anything.
- a `Simple` signature: every claim the pod's own (from a template), each request
  exactly N devices of one class with the same selectors and device tolerations, no
  constraints, no capacity, no admin access, no alternatives, and no pod (anti-)affinity,
  spread or topology. Pods of one such signature take the first free matching devices
  whichever comes first, so the devices they take together are the same in any order.
- `None`: anything else (constraints, alternatives, shared claims, several classes):
  its devices depend on the order, so a node it is promised stays held whole for any
  gang that needs devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fitcore import extended, gangtypes, model, values

_ONE_POD = values.Quantity.parse(1)


@dataclasses.dataclass(frozen=True, slots=True)
class Simple:
    """The one kind of device every request of a simple gang asks for."""

    device_class: str
    selectors: tuple[str, ...]
    tolerations: tuple[model.DeviceToleration, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class NoDevices:
    """A gang that asks for no devices."""


NO_DEVICES = NoDevices()

Kind = Simple | NoDevices | None


def kind_of(g: gangtypes.Gang) -> Kind:
    """What the gang's pods need of a node's devices (module docstring)."""
    found: set[Simple] = set()
    for ps in g.pod_sets:
        if any(extended.is_extended(name) for name in ps.requests):
            return None
        if ps.claims and (ps.topology is not None
                          or (ps.rules is not None and not ps.rules.empty)):
            return None
        for pc in ps.claims:
            if pc.shared or pc.claim.constraints:
                return None
            for request in pc.claim.requests:
                one = _simple(request)
                if one is None:
                    return None
                found.add(one)
    if not found:
        return NO_DEVICES
    return found.pop() if len(found) == 1 else None


def _simple(request: model.DeviceRequest) -> Simple | None:
    r = request.exactly
    if (r is None or r.allocation_mode != "ExactCount" or r.admin_access
            or r.capacity_requests or r.derived_attributes):
        return None
    return Simple(r.device_class, r.selectors, r.tolerations)


def compatible(a: Kind, b: Kind) -> bool:
    """Whether two gangs' placements on one node hold whichever binds first."""
    if isinstance(a, NoDevices) or isinstance(b, NoDevices):
        return True
    return a is not None and a == b


@dataclasses.dataclass(frozen=True, slots=True)
class Pod:
    """One promised pod as the inventory counts it."""

    node: str
    requests: dict[str, values.Quantity]
    devices: tuple[model.AllocatedDevice, ...]


def pods(g: gangtypes.Gang, placements: Sequence[gangtypes.Placement]) -> list[Pod]:
    """The promised pods of `placements` (a plan of `g`): each placement's pod set's
    requests and one pod, and the devices of its own claims (a shared claim's devices
    count once its real allocation does)."""
    by_name = {ps.name: ps for ps in g.pod_sets}
    out = []
    for p in placements:
        ps = by_name.get(p.pod_set)
        if ps is None:
            raise ValueError(f"placement of pod set {p.pod_set!r}, which {g.label} lacks")
        requests = dict(ps.requests)
        requests["pods"] = requests["pods"] + _ONE_POD if "pods" in requests else _ONE_POD
        shared = {pc.name for pc in ps.claims if pc.shared}
        devices = tuple(r.as_allocated() for name, results in p.devices
                        if name not in shared for r in results)
        out.append(Pod(p.node, requests, devices))
    return out
