"""NodeShapes (fitgate.io/v1alpha1): the nodes the autoscaler can add, as fitcore sees them.

A shape is a node template: labels, allocatable, taints, and the ResourceSlices a node of
this shape publishes (without a node name), plus a price, how new nodes group into
topology domains, and a limit. A *hypothetical* node of a shape is a Node with the shape's
labels and a fresh name, whose slices get that node name and pool names made unique per
node (as cluster-autoscaler does when it simulates a node from a template), so that the
ordinary per-node allocator answers for nodes that do not exist yet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

from fitcore import gang, model, values

API_VERSION = "fitgate.io/v1alpha1"
KIND = "NodeShape"


@dataclasses.dataclass(frozen=True, slots=True)
class KarpenterProvisioning:
    """A shape Karpenter serves (`spec.provisioning.karpenter`): the NodePool whose
    NodeClaims fitgate creates for it, and the node selector requirements that pin what
    the shape promises (instance type, zone, capacity type)."""

    node_pool: str
    requirements: tuple[model.NodeSelectorRequirement, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class NodeShape:
    name: str
    node_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    allocatable: Mapping[str, values.Quantity] = dataclasses.field(default_factory=dict)
    taints: tuple[model.Taint, ...] = ()
    slices: tuple[model.ResourceSlice, ...] = ()  # node_name unset
    price: Fraction = Fraction(0)
    domain_label: str | None = None  # new nodes land in fresh domains of this label
    nodes_per_domain: int | None = None  # at most this many new nodes per fresh domain
    provisioning_class: str | None = None
    provisioning_parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Karpenter serves the shape instead of a ProvisioningRequest class (never both).
    karpenter: KarpenterProvisioning | None = None
    max_nodes: int | None = None  # nodes of this shape in the cluster, existing included
    source: str | None = None

    def node_name(self, index: int) -> str:
        return f"{self.name}-new-{index}"

    def domain_name(self, index: int) -> str:
        return f"{self.name}-new-domain-{index}"

    def matches(self, node: model.Node) -> bool:
        """Whether an existing node is of this shape (carries all its fixed labels)."""
        return all(node.labels.get(k) == v for k, v in self.node_labels.items())

    def instantiate(self, count: int, *, first: int = 0, domain: str | None = None
                    ) -> tuple[list[model.Node], list[model.ResourceSlice]]:
        """`count` hypothetical nodes of this shape (named from index `first`), all in
        topology domain `domain` when the shape has a domain label."""
        nodes, slices = [], []
        for i in range(first, first + count):
            name = self.node_name(i)
            labels = dict(self.node_labels)
            labels[gang.HOSTNAME_LABEL] = name
            if self.domain_label and domain is not None:
                labels[self.domain_label] = domain
            nodes.append(model.Node(name, labels, self.taints, dict(self.allocatable)))
            for s in self.slices:  # the constructor, not dataclasses.replace: hot in plans
                slices.append(model.ResourceSlice(
                    name=f"{name}-{s.name}", driver=s.driver, pool=f"{s.pool}-{name}",
                    generation=s.generation, resource_slice_count=s.resource_slice_count,
                    node_name=name, devices=s.devices, shared_counters=s.shared_counters))
        return nodes, slices
