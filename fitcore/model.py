"""The objects the fit engine understands.

Plain frozen dataclasses, built from Kubernetes JSON by `fitcore.kube` (or by hand in
tests). They mirror resource.k8s.io/v1 closely enough that a reader who knows the API can
follow the engine, but carry only what allocation looks at: no metadata beyond names, no
opaque driver config.

Conventions:
- Names of devices are unique within a (driver, pool); `DeviceId` is that triple.
- Attribute and capacity names are kept as written in the slice: either fully qualified
  (`domain/id`) or bare (`id`, which belongs to the device's driver domain).
- Quantities are exact (`values.Quantity`), never floats.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Literal, NamedTuple, TypeAlias

from fitcore import values

AttributeValue: TypeAlias = int | bool | str | values.Version

#: Upper bound on the devices one claim may be allocated (resource.k8s.io/v1).
MAX_DEVICES_PER_CLAIM = 32


class TaintEffect(enum.StrEnum):
    NONE = "None"
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


class DeviceId(NamedTuple):
    """A device's identity. A named tuple, not a dataclass: device ids are hashed on every
    allocated-state lookup, and a tuple's hash is computed in C."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


# ---------------------------------------------------------------------------- nodes


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A term matches when all its expressions (labels) and fields match."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSelector:
    """Terms are ORed; an empty selector matches nothing."""

    terms: tuple[NodeSelectorTerm, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, values.Quantity] = dataclasses.field(default_factory=dict)
    unschedulable: bool = False


# -------------------------------------------------------------------------- devices


@dataclasses.dataclass(frozen=True, slots=True)
class ValidRange:
    min: values.Quantity
    max: values.Quantity | None = None
    step: values.Quantity | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RequestPolicy:
    """How much of a consumable capacity one allocation takes (DRAConsumableCapacity)."""

    default: values.Quantity | None = None
    valid_values: tuple[values.Quantity, ...] = ()
    valid_range: ValidRange | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: values.Quantity
    request_policy: RequestPolicy | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, values.Quantity]
    #: DRADeviceCompatibilityGroups (alpha, off by default in 1.37): a slice with a device
    #: that declares groups is ignored (`fitcore.pools`).
    compatibility_groups: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = TaintEffect.NO_SCHEDULE


@dataclasses.dataclass(frozen=True, slots=True)
class Device:
    name: str
    attributes: Mapping[str, AttributeValue] = dataclasses.field(default_factory=dict)
    capacity: Mapping[str, DeviceCapacity] = dataclasses.field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    allow_multiple_allocations: bool = False
    binding_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    # Only with ResourceSlice.perDeviceNodeSelection: exactly one of these is set.
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, values.Quantity]


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int = 0
    resource_slice_count: int = 1
    # Node selection: exactly one of node_name, node_selector, all_nodes,
    # per_device_node_selection; none of them on a slice that only holds counters.
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions, ANDed
    # DRAExtendedResource: the extended resource (`resources.requests`) this class backs
    # on nodes that do not advertise it; every class also backs
    # `deviceclass.resource.kubernetes.io/<name>`.
    extended_resource_name: str | None = None


# --------------------------------------------------------------------------- claims


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: DeviceTaint) -> bool:
        """The DRA toleration rule (an empty key or effect matches any)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclasses.dataclass(frozen=True, slots=True)
class ExactRequest:
    """One way to satisfy a request: a class, selectors and a count (or All)."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, values.Quantity] | None = None
    #: The request sets derivedAttributes (DRADerivedAttributes, alpha, off by default in
    #: 1.37): the default allocator cannot handle it, an error (`fitcore.reference`).
    derived_attributes: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A request is either `exactly` one ExactRequest or an ordered firstAvailable list."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[ExactRequest, ...] = ()

    @property
    def alternatives(self) -> tuple[ExactRequest, ...]:
        return (self.exactly,) if self.exactly is not None else self.first_available

    def result_name(self, alternative: ExactRequest) -> str:
        """Name in allocation results: `req`, or `req/sub` for a subrequest."""
        return alternative.name if self.exactly is not None else f"{self.name}/{alternative.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...] = ()  # empty: all requests of the claim
    match_attribute: str | None = None
    distinct_attribute: str | None = None

    def covers(self, request: str, subrequest: str | None) -> bool:
        """Whether a device allocated for `request` (or `request/subrequest`) is constrained."""
        if not self.requests:
            return True
        if request in self.requests:
            return True
        return subrequest is not None and f"{request}/{subrequest}" in self.requests


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    name: str
    namespace: str = "default"
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# ------------------------------------------------------------------ allocated state


@dataclasses.dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One device result of an allocated ResourceClaim, as the scheduler counts it."""

    id: DeviceId
    admin_access: bool = False
    share_id: str | None = None
    consumed_capacity: Mapping[str, values.Quantity] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class AllocatedState:
    """Devices in use cluster-wide (the scheduler's AllocatedState).

    `dedicated`: devices allocated without a share (nobody else may take them).
    `shared`: devices allocated as shares of a multi-allocatable device.
    `consumed`: capacity consumed per device by shares.
    Admin-access results do not count: they never block other users.
    """

    dedicated: frozenset[DeviceId] = frozenset()
    shared: frozenset[DeviceId] = frozenset()
    consumed: Mapping[DeviceId, Mapping[str, values.Quantity]] = dataclasses.field(
        default_factory=dict
    )

    @classmethod
    def from_results(cls, results: list[AllocatedDevice]) -> AllocatedState:
        dedicated: set[DeviceId] = set()
        shared: set[DeviceId] = set()
        consumed: dict[DeviceId, dict[str, values.Quantity]] = {}
        for result in results:
            if result.admin_access:
                continue
            if result.share_id is None:
                dedicated.add(result.id)
                continue
            shared.add(result.id)
            into = consumed.setdefault(result.id, {})
            for name, amount in result.consumed_capacity.items():
                into[name] = into[name] + amount if name in into else amount
        return cls(frozenset(dedicated), frozenset(shared), consumed)

    def is_allocated(self, device: DeviceId) -> bool:
        """Allocated in any way (counts against shared counters)."""
        return device in self.dedicated or device in self.shared or device in self.consumed

    def plus(self, results: list[AllocatedDevice]) -> AllocatedState:
        """This state with more results added (carrying a pod's allocation forward)."""
        if not results:
            return self
        extra = AllocatedState.from_results(results)
        consumed: dict[DeviceId, dict[str, values.Quantity]] = {
            device: dict(amounts) for device, amounts in self.consumed.items()
        }
        for device, amounts in extra.consumed.items():
            into = consumed.setdefault(device, {})
            for name, amount in amounts.items():
                into[name] = into[name] + amount if name in into else amount
        return AllocatedState(self.dedicated | extra.dedicated, self.shared | extra.shared,
                              consumed)


# ---------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceResult:
    """One allocated device, as it would appear in ResourceClaim.status.allocation."""

    request: str  # `req` or `req/sub`
    id: DeviceId
    admin_access: bool = False
    shared: bool = False
    consumed_capacity: Mapping[str, values.Quantity] = dataclasses.field(default_factory=dict)

    def as_allocated(self) -> AllocatedDevice:
        return AllocatedDevice(
            self.id,
            admin_access=self.admin_access,
            share_id=f"{self.request}:{self.id}" if self.shared else None,
            consumed_capacity=self.consumed_capacity,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Inventory:
    """Everything about the cluster that per-node allocation reads."""

    slices: tuple[ResourceSlice, ...] = ()
    classes: Mapping[str, DeviceClass] = dataclasses.field(default_factory=dict)
    allocated: AllocatedState = dataclasses.field(default_factory=AllocatedState)


Verdict = Literal["fits", "no-fit", "error", "undecided"]


class NodeFit(NamedTuple):
    """The answer to: can these claims be allocated on this node, now?

    `fits`: `allocations` holds one tuple of DeviceResults per claim, in claim order.
    `no-fit`: no allocation exists; `reasons` says why in words a person can act on.
    `error`: the input cannot be allocated anywhere as written (a missing DeviceClass, a
    CEL selector that fails at runtime, `All` over a pool that is being updated, more
    than 32 devices for one claim); the scheduler fails such pods too.
    `undecided`: the work budget ran out first.

    A named tuple rather than a frozen dataclass: the compiled core answers in a few
    microseconds, and building a frozen dataclass would take a sixth of that.
    """

    verdict: Verdict
    node: str
    allocations: tuple[tuple[DeviceResult, ...], ...] = ()
    reasons: tuple[str, ...] = ()
    steps: int = 0
    engine: str = ""

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"
