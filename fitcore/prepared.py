"""The reference allocator's prepared problem for one node: each request's alternatives
resolved against the node's pools (`Alternative`) and the node, claims and pools they
came from (`Prepared`). `reference` builds it; `explain` reads it to say why claims do not
fit; `compiled` builds it for the compiled core. Below both, so neither imports the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fitcore import model, pools, semantics, versions


@dataclasses.dataclass(slots=True)
class Alternative:
    """One way to satisfy a request, resolved against the node."""

    request: model.DeviceRequest
    exact: model.ExactRequest
    device_class: model.DeviceClass
    result_name: str
    subrequest: str | None
    label: str  # for messages: `ResourceClaim ns/name request req/sub`
    # For allocationMode All: the devices that must all be allocated.
    all_devices: list[tuple[pools.Pool, model.Device]] | None = None

    @property
    def needed(self) -> int:
        return len(self.all_devices) if self.all_devices is not None else self.exact.count


_Pool = pools.Pool


@dataclasses.dataclass(slots=True)
class Prepared:
    node: model.Node
    inventory: model.Inventory
    claims: Sequence[model.Claim]
    pools: list[_Pool]
    selector: semantics.Selector
    # alternatives[claim][request] -> list of alternatives in preference order
    alternatives: list[list[list[Alternative]]]
    kube: versions.KubeVersion = versions.DEFAULT

    def selectable(self, alt: Alternative, claim: model.Claim, pool: _Pool,
                   s: model.ResourceSlice, device: model.Device) -> bool:
        return (pools.device_on_node(self.node, s, device)
                and semantics.device_selectable(self.selector, alt.device_class, alt.exact,
                                                alt.label, pool.driver, device))
