"""DRA extended resources (DRAExtendedResource: beta and on in 1.36, GA in 1.37).

A container may ask for devices the old way, `resources.requests: {example.com/gpu: 2}`.
On a node that advertises the resource in its allocatable (a device plugin), the
scheduler counts it like cpu. On a node that does not, and when a DeviceClass backs the
name (`spec.extendedResourceName`, or implicitly `deviceclass.resource.kubernetes.io/
<class>`), the scheduler's DRA plugin allocates the devices instead: it builds one claim
for the pod, with one ExactCount request per container and resource (named
`container-<i>-request-<j>`: i the container's position among init containers then
containers, j the resource's position in the container's sorted request names), and
allocates it with the pod's other claims. Init containers that are not sidecars run
before the others and reuse their devices: only what exceeds the devices of the later
long-lived containers is requested, once, as the largest such request.

So the question is per node: `for_node` returns, for a pod and a node's allocatable,
what the node must still hold (without the DRA-backed resources) and the claim to
allocate (or None), or the resource that the node can provide neither way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction

from fitcore import model, values

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
CLAIM_NAME = "extended-resources"


@dataclasses.dataclass(frozen=True, slots=True)
class Container:
    """One container's requests as the scheduler sees them (limits already defaulted)."""

    name: str
    init: bool = False
    sidecar: bool = False  # an init container with restartPolicy Always
    requests: Mapping[str, values.Quantity] = dataclasses.field(default_factory=dict)


def is_extended(name: str) -> bool:
    """An extended resource name: has a domain, not kubernetes.io's (except the implicit
    DeviceClass names), and is not a quota `requests.` name."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def class_for(name: str, classes: Mapping[str, model.DeviceClass]) -> model.DeviceClass | None:
    """The DeviceClass that backs an extended resource (the first by name when several
    declare it)."""
    if name.startswith(IMPLICIT_PREFIX):
        return classes.get(name[len(IMPLICIT_PREFIX):])
    found = sorted((c for c in classes.values() if c.extended_resource_name == name),
                   key=lambda c: c.name)
    return found[0] if found else None


def backed(containers: Sequence[Container], classes: Mapping[str, model.DeviceClass]
           ) -> frozenset[str]:
    """The extended resources of a pod that some DeviceClass backs."""
    names = {k for c in containers for k, q in c.requests.items() if q.value and is_extended(k)}
    return frozenset(n for n in names if class_for(n, classes) is not None)


def _count(q: values.Quantity) -> int | None:
    """The device count of a request: a whole number that fits int64 (upstream reads it
    with AsInt64; anything else asks for no devices)."""
    v = q.value
    n = int(v) if isinstance(v, int) or (isinstance(v, Fraction) and v.denominator == 1) \
        else None
    return n if n is not None and 0 <= n < 2**63 else None


def for_node(containers: Sequence[Container], namespace: str, pod: str,
             allocatable: Mapping[str, Fraction], classes: Mapping[str, model.DeviceClass],
             names: frozenset[str]) -> tuple[frozenset[str], model.Claim | None]:
    """(resources the DRA plugin provides on this node, the pod's extended-resource
    claim or None). `names`: `backed(...)` of the pod; `allocatable`: the node's."""
    via_dra = frozenset(n for n in names if not allocatable.get(n))
    if not via_dra:
        return via_dra, None
    ordered = [*(c for c in containers if c.init), *(c for c in containers if not c.init)]
    requests: list[model.DeviceRequest] = []
    for resource in sorted(via_dra):
        device_class = class_for(resource, classes)
        assert device_class is not None
        long_lived: list[tuple[int, int] | None] = [None] * len(ordered)  # (index, count)
        for i, c in enumerate(ordered):
            if c.init and not c.sidecar:
                continue
            n = _count(c.requests[resource]) if resource in c.requests else None
            if n:
                long_lived[i] = (i, n)
        short: tuple[int, int] | None = None  # (container index, extra count)
        for i, c in enumerate(ordered):
            if not (c.init and not c.sidecar) or resource not in c.requests:
                continue
            n = _count(c.requests[resource])
            if not n:
                continue
            reusable = sum(x[1] for x in long_lived[i:] if x is not None)
            if reusable >= n:
                continue
            if short is None or short[1] < n - reusable:
                short = (i, n - reusable)
        chosen = [x for x in long_lived if x is not None] + ([short] if short else [])
        for i, n in chosen:
            j = sorted(ordered[i].requests).index(resource)
            requests.append(model.DeviceRequest(
                f"container-{i}-request-{j}",
                exactly=model.ExactRequest(name=f"container-{i}-request-{j}",
                                           device_class=device_class.name, count=n)))
    requests.sort(key=lambda r: r.name)
    claim = model.Claim(name=f"{pod}-{CLAIM_NAME}", namespace=namespace,
                        requests=tuple(requests))
    return via_dra, claim
