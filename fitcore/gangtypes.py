"""What a gang decision is asked and answers: the gang (pod sets, their claims,
tolerations, topology) and its result (placements, stats, reasons). `fitcore.gang` is the
module callers use; it re-exports these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from fitcore import (
    extended,
    model,
    podaffinity,
    values,
)
from fitcore import reasons as codes

HOSTNAME_LABEL = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: Taints a node carries for a while and then loses without anyone editing a workload: the
#: node lifecycle controller's (not ready, unreachable, under pressure, cordoned), the
#: cloud provider's until it initialises the node, the cluster-autoscaler's startup taints.
#: A node that a gang's pods do not tolerate only for these may host them later, so it
#: never makes a gang one that can never fit.
PASSING_TAINTS = frozenset({
    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
    "node.kubernetes.io/network-unavailable", "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure", "node.kubernetes.io/pid-pressure",
    UNSCHEDULABLE_TAINT, "node.cloudprovider.kubernetes.io/uninitialized"})
PASSING_TAINT_PREFIXES = ("startup-taint.cluster-autoscaler.kubernetes.io/",)


def passing(taint: model.Taint) -> bool:
    """Whether a node carries this taint only for a while (`PASSING_TAINTS`)."""
    return taint.key in PASSING_TAINTS or taint.key.startswith(PASSING_TAINT_PREFIXES)



@dataclasses.dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (core/v1 semantics; an empty key with Exists tolerates all)."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: model.Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclasses.dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's `spec.resourceClaims`.

    `shared`: named by `resourceClaimName`, one claim for every pod that names it;
    otherwise each pod gets its own claim from a ResourceClaimTemplate.
    `allocated`: for a shared claim that is already allocated, its devices, and
    `allocated_nodes` the nodes where that allocation is usable (None: any node).
    """

    name: str
    claim: model.Claim
    shared: bool = False
    allocated: tuple[model.AllocatedDevice, ...] | None = None
    allocated_nodes: frozenset[str] | None = None
    # The allocation's nodeSelector when it selects by labels (a multi-node allocation).
    allocated_selector: model.NodeSelector | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PodSet:
    """`count` identical pods; at least `min_count` of them must be placed (default all)."""

    name: str
    count: int
    min_count: int | None = None
    requests: Mapping[str, values.Quantity] = dataclasses.field(default_factory=dict)
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    affinity: model.NodeSelector | None = None
    tolerations: tuple[Toleration, ...] = ()
    claims: tuple[PodClaim, ...] = ()
    topology: str | None = None  # node label: all pods in one domain (one value of it)
    # Per container requests, for DRA extended resources (fitcore.extended).
    containers: tuple[extended.Container, ...] = ()
    # Labels and required pod (anti-)affinity / topology spread (fitcore.podaffinity).
    rules: podaffinity.Rules | None = None

    @property
    def needed(self) -> int:
        return self.count if self.min_count is None else min(self.min_count, self.count)


@dataclasses.dataclass(frozen=True, slots=True)
class Gang:
    """The pods of one workload, which are admitted all together or not at all."""

    name: str
    namespace: str = "default"
    kind: str = "Workload"
    pod_sets: tuple[PodSet, ...] = ()
    source: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """Where one pod goes, and the devices each of its claims gets there.

    The search finds devices on a class representative; `pools` maps the
    representative's pools (driver, pool) to this node's, or, for classes of a gang's
    projection (`fitcore.projection`), the representative's devices (DeviceId) to this
    node's equivalent ones; `devices` applies it when read, so that a decision does not
    pay for naming devices nobody asks about.
    """

    pod_set: str
    index: int
    node: str
    claims: tuple[tuple[str, tuple[model.DeviceResult, ...]], ...] = ()
    pools: Mapping[tuple[str, ...], tuple[str, ...]] | None = None

    @property
    def devices(self) -> tuple[tuple[str, tuple[model.DeviceResult, ...]], ...]:
        """(pod claim name, device results) per claim, in this node's pool names."""
        if not self.pools:
            return self.claims
        return tuple((name, remap(results, self.pools)) for name, results in self.claims)


def remap(results: tuple[model.DeviceResult, ...],
          pools: Mapping[tuple[str, ...], tuple[str, ...]]) -> tuple[model.DeviceResult, ...]:
    """Results on a class representative as results on another node of its class:
    `pools` maps whole devices (DeviceId -> DeviceId) or pools ((driver, pool) pairs)."""
    out = []
    for r in results:
        to = pools.get(r.id)
        if to is not None:
            out.append(model.DeviceResult(r.request, model.DeviceId(*to), r.admin_access,
                                          r.shared, r.consumed_capacity))
            continue
        to = pools.get((r.id.driver, r.id.pool))
        out.append(r if to is None else model.DeviceResult(
            r.request, model.DeviceId(to[0], to[1], r.id.device), r.admin_access, r.shared,
            r.consumed_capacity))
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    seconds: float = 0.0
    nodes: int = 0
    devices: int = 0
    steps: int = 0
    classes: int = 0
    allocations: int = 0  # calls into the per-node allocator


GangVerdict = Literal["fits", "no-fit", "undecided"]
Category = Literal["capacity", "configuration", "coordination"]


@dataclasses.dataclass(frozen=True, slots=True)
class GangResult:
    """`fits`: `placements` holds every placed pod, in the order its devices were found:
    each pod's devices assume the pods before it hold theirs, so the allocation holds
    when the pods are bound in this order (another order may lead kube-scheduler to other
    devices). `no-fit`: `reasons` says why, and
    `category` is `configuration` when some pod set fits no node at all even alone, else
    `capacity`. `undecided`: the allocator's work budget ran out somewhere."""

    verdict: GangVerdict
    placements: tuple[Placement, ...] = ()
    reasons: tuple[str, ...] = ()
    category: Category | None = None
    domains: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Per pod set: how many pods one node of some class could host (0: none anywhere).
    hostable: Mapping[str, int] = dataclasses.field(default_factory=dict)
    stats: Stats = dataclasses.field(default_factory=Stats)
    # `reasons` for programs: details[i].message == reasons[i].
    details: tuple[codes.Reason, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

