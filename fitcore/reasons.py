"""Machine-readable reasons: why a gang does not fit, for programs to decide on.

Every "no" fitcore gives carries, next to the sentence a person reads (`message`,
unchanged), a `Reason`: a stable `code`, the `category` a controller acts on (capacity:
would fit on nodes that do not exist yet; configuration: the workload as written fits no
node and no shape; coordination: provisioned nodes do not match their shape), and where
the problem is (`object` and `field`, `pod_set`, `node`, `shape`). Programs (fitcore.plan,
the admission controller) decide on codes, never on the wording.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Category = Literal["capacity", "configuration", "coordination"]

# -- a pod set does not fit (fitcore.gang) -----------------------------------------
#: Not enough pods fit on all selected nodes together.
TOO_FEW_PODS = "too-few-pods"
#: A required topology: no domain of the label holds the pod set.
TOPOLOGY_DOMAIN_TOO_SMALL = "topology-domain-too-small"
#: Pods sharing a ResourceClaim that must be allocated on one node: no node holds them.
SHARED_CLAIM_ONE_NODE = "shared-claim-one-node"
#: Nodes excluded because an allocated shared claim's devices cannot be used there.
SHARED_CLAIM_NODES = "shared-claim-nodes"
#: Nodes excluded by nodeSelector / required node affinity.
NODE_SELECTOR = "node-selector"
#: Nodes excluded because they lack the required topology label.
TOPOLOGY_LABEL_MISSING = "topology-label-missing"
#: Nodes excluded by a taint the pods do not tolerate.
UNTOLERATED_TAINT = "untolerated-taint"
#: Nodes that would host pods, excluded for now by a taint they carry for a while (not
#: ready, unreachable, cordoned, starting: `fitcore.gangtypes.PASSING_TAINTS`).
NODE_NOT_READY = "node-not-ready"
#: Nodes excluded by required pod (anti-)affinity or topology spread.
POD_AFFINITY = "pod-affinity"
TOPOLOGY_SPREAD = "topology-spread"
#: A kind of node holds fewer pods: not enough of a node resource (cpu, memory, pods...).
INSUFFICIENT_RESOURCE = "insufficient-resource"
#: ... too few free devices (counting).
INSUFFICIENT_DEVICES = "insufficient-devices"
#: ... the DRA allocator finds no allocation for a pod's claims.
DEVICES_UNAVAILABLE = "devices-unavailable"
#: ... a claim is broken as written (missing DeviceClass, failing selector, ...).
CLAIM_ERROR = "claim-error"
#: ... the allocator's work budget ran out.
SEARCH_BUDGET = "search-budget"
#: Devices of pools that are not node-local ran out while placing.
SHARED_POOLS_EXHAUSTED = "shared-pools-exhausted"
#: A summary line: more kinds of nodes hold fewer pods too.
MORE_NODE_KINDS = "more-node-kinds"
#: Nodes the caller's node filter (a FitPolicy) does not allow (fitcore.inventory).
NODE_POLICY = "node-policy"
#: Nodes held for other workloads, which the caller names (fitcore.inventory): promised to
#: a gang whose pods are binding there, or brought by another gang's ProvisioningRequest.
NODE_HELD = "node-held"

# -- plans (fitcore.plan) ------------------------------------------------------------
#: Some pod set fits no existing node and no shape, even alone.
NO_HOST = "no-host"
#: Every pod fits somewhere, but not the whole gang within the shapes' limits.
SHAPE_LIMITS = "shape-limits"
#: A shape is at its maxNodes.
SHAPE_AT_LIMIT = "shape-at-limit"
#: Even as many new nodes of a shape as allowed do not make the gang fit.
SHAPE_DOES_NOT_FIT = "shape-does-not-fit"
#: A shape's undecided search.
SHAPE_UNDECIDED = "shape-undecided"
#: The gang would need more new nodes of a shape than any cluster can have.
SHAPE_TOO_MANY_NODES = "shape-too-many-nodes"
#: A shape asked for by name that the inventory does not hold (fitcore.inventory).
SHAPE_UNKNOWN = "shape-unknown"

# -- verification --------------------------------------------------------------------
#: A provisioned node differs from what its shape promised.
SHAPE_MISMATCH = "shape-mismatch"
#: The gang does not fit the provisioned nodes.
MISFIT = "misfit"

CATEGORY: dict[str, Category] = {
    TOO_FEW_PODS: "capacity", TOPOLOGY_DOMAIN_TOO_SMALL: "capacity",
    SHARED_CLAIM_ONE_NODE: "capacity", SHARED_CLAIM_NODES: "configuration",
    NODE_SELECTOR: "configuration", TOPOLOGY_LABEL_MISSING: "configuration",
    UNTOLERATED_TAINT: "configuration", NODE_NOT_READY: "capacity",
    POD_AFFINITY: "configuration",
    TOPOLOGY_SPREAD: "configuration", INSUFFICIENT_RESOURCE: "capacity",
    INSUFFICIENT_DEVICES: "capacity", DEVICES_UNAVAILABLE: "capacity",
    CLAIM_ERROR: "configuration", SEARCH_BUDGET: "capacity",
    SHARED_POOLS_EXHAUSTED: "capacity", MORE_NODE_KINDS: "capacity",
    NODE_POLICY: "configuration", NODE_HELD: "coordination", SHAPE_UNKNOWN: "configuration",
    NO_HOST: "configuration", SHAPE_LIMITS: "capacity", SHAPE_AT_LIMIT: "capacity",
    SHAPE_DOES_NOT_FIT: "configuration", SHAPE_UNDECIDED: "capacity",
    SHAPE_TOO_MANY_NODES: "configuration",
    SHAPE_MISMATCH: "coordination", MISFIT: "coordination",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Reason:
    """One reason, for people (`message`) and for programs (everything else).

    `object`: the object to look at ("Workload ns/name", "NodeShape rail", "Node n1");
    `field`: the field of that object, when one is at fault (e.g.
    "spec.podSets[0].template.spec.nodeSelector"); `held`: for a reason about a kind of
    node, how many pods of the set one such node holds."""

    code: str
    message: str
    category: Category
    object: str | None = None
    field: str | None = None
    pod_set: str | None = None
    node: str | None = None
    shape: str | None = None
    resource: str | None = None
    held: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (camelCase keys; absent values left out)."""
        out: dict[str, Any] = {"code": self.code, "category": self.category}
        for key, value in (("object", self.object), ("field", self.field),
                           ("podSet", self.pod_set), ("node", self.node),
                           ("shape", self.shape), ("resource", self.resource),
                           ("held", self.held)):
            if value is not None:
                out[key] = value
        out["message"] = self.message
        return out


def reason(code: str, message: str, **where: object) -> Reason:
    """A Reason with the category its code implies."""
    return Reason(code, message, CATEGORY[code], **where)  # type: ignore[arg-type]


#: Codes of reasons about one kind of node that holds fewer pods than wanted (`held`).
NODE_KINDS = frozenset({INSUFFICIENT_RESOURCE, INSUFFICIENT_DEVICES, DEVICES_UNAVAILABLE,
                        CLAIM_ERROR, SEARCH_BUDGET})
