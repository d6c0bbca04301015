"""Provisioning backends: who adds the nodes a plan needs.

A plan names NodeShapes; each shape says who serves it:

- a ProvisioningRequest class (`spec.provisioning.className`, the default class when
  unset): cluster-autoscaler, or a cloud's own ProvisioningRequest controller. The
  Workload reconciler asks with one ProvisioningRequest per plan (`admission.check.provisioning`
  builds it; `admission.check.workload` follows it);
- Karpenter (`spec.provisioning.karpenter: {nodePool, requirements}`): fitgate creates one
  NodeClaim per planned node, all or nothing (`admission.check.backends.karpenter` builds and
  reads them; `admission.check.karpenter` follows them).

One plan is served by one backend: a plan that mixes the two is a configuration problem
(`ShapeProblem`), as a plan that mixes ProvisioningRequest classes is. `Backend` is what
the reconciler asks of each; `backend_of` says which one a plan needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import fitcore
from admission.check import provisioning
from admission.kube import client

Name = Literal["provisioning-request", "karpenter"]
PROVISIONING_REQUEST: Name = "provisioning-request"
KARPENTER: Name = "karpenter"


def serves(shape: fitcore.NodeShape) -> Name:
    """The backend that adds nodes of `shape`."""
    return KARPENTER if shape.karpenter is not None else PROVISIONING_REQUEST


def backend_of(chosen: fitcore.Plan, node_shapes: Mapping[str, fitcore.NodeShape]) -> Name:
    """The one backend that serves every shape of `chosen`. A shape missing from
    `node_shapes` counts as a ProvisioningRequest shape (its builder reports it); a plan
    across backends raises ShapeProblem."""
    names = {serves(node_shapes[s.shape]) if s.shape in node_shapes else PROVISIONING_REQUEST
             for s in chosen.shapes}
    if len(names) > 1:
        karp = sorted({s.shape for s in chosen.shapes
                       if s.shape in node_shapes and serves(node_shapes[s.shape]) == KARPENTER})
        raise provisioning.ShapeProblem(
            "the plan mixes shapes Karpenter serves (" + ", ".join(karp) + ") with shapes "
            "served by ProvisioningRequests; one plan has one provisioner")
    return names.pop() if names else PROVISIONING_REQUEST


class Backend(Protocol):
    """What the Workload reconciler asks of a provisioning backend, per Workload check.

    `held` lists the objects the backend keeps for the check (its requests or claims);
    `attempt_of` reads the attempt one of them belongs to. `start` asks for a plan's
    nodes and says Pending; `follow` takes the current attempt's objects to a decision
    (Pending, Ready after verification, Retry, the next plan); `release` gives up
    objects (check retried, superseded); `cleanup` removes what a gone, finished or
    evicted Workload left; `admitted` runs while the check is Ready (what the backend
    still owes an admitted gang). Each returns the reconciler's requeue (seconds, or None).
    """

    name: Name

    def held(self, wl: client.Obj, check: str) -> list[client.Obj]: ...

    def attempt_of(self, obj: Mapping[str, Any]) -> int: ...

    async def start(self, wl: client.Obj, entry: Mapping[str, Any], wg: Any, attempt: int,
                    index: int, chosen: fitcore.Plan, alternatives: Sequence[fitcore.Plan],
                    why: Sequence[str] = (), previous: str = "") -> float | None: ...

    async def follow(self, wl: client.Obj, entry: Mapping[str, Any], attempt: int,
                     objs: Sequence[client.Obj]) -> float | None: ...

    async def release(self, obj: Mapping[str, Any], why: str) -> None: ...

    async def cleanup(self, namespace: str, name: str, keep_uid: str | None,
                      uid: str | None = None) -> None: ...

    async def admitted(self, wl: client.Obj, check: str) -> float | None: ...
