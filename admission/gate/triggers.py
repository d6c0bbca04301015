"""Which store events can change the gate's decision (pure predicates).

The gate decides a Workload from what it reads of it and from the idle cluster. An event
that changes neither cannot change the decision, and reconciling for it again only costs
a plan on the idle engine and API reads. Measured in `make bench-controller` and in
scenario 11 on the real control plane, most of the gate's reconciles came from such
events:

- A Workload's status written by Kueue (conditions, requeue state) or by fitgate's own
  check (its AdmissionCheck state), and Events or resourceVersion bumps: the gate reads
  a Workload's metadata (its gate entry, owner, labels, annotations), its spec (the pod
  sets, the queue) and `status.admission` (partial admission: pods admitted per set), and
  nothing else. `workload_changed` compares those.
- A ResourceSlice republished with a new pool generation and nothing else changed, where
  its pool is one slice (`resourceSliceCount` 1 before and after): the pool is complete
  before and after, with the same devices, so the idle cluster is the same. (A pool of
  several slices passes through an incomplete state while it is republished, which can
  change what fits: those events still count.)
- Everything else `fitting.relevant` already leaves out (a Node's heartbeat).

A change that does matter still requeues: a new gate entry, a new pod set or count, a
changed owner, quota reserved with fewer pods, a slice whose devices or pool size
changed, any Node, DeviceClass, NodeShape, FitPolicy, Namespace label or
ResourceClaimTemplate change (`tests/admission/gate/test_triggers.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.engine import fitting
from admission.kube import client, kinds


def _get(obj: Mapping[str, Any] | None, field: str) -> Any:
    value = obj.get(field) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def workload_view(wl: client.Obj) -> tuple[Any, ...]:
    """What the gate reads of a Workload."""
    meta = _get(wl, "metadata")
    return (meta.get("annotations"), meta.get("labels"), meta.get("ownerReferences"),
            wl.get("spec"), _get(wl, "status").get("admission"))


def workload_changed(event: client.WatchEvent, before: client.Obj | None) -> bool:
    """Whether a Workload event can change the gate's decision on it."""
    if event.type != "MODIFIED" or before is None:
        return True
    return workload_view(event.object) != workload_view(before)


def _single_slice_pool(spec: Mapping[str, Any]) -> bool:
    pool = spec.get("pool")
    return isinstance(pool, Mapping) and pool.get("resourceSliceCount") == 1


def _without_generation(spec: Mapping[str, Any]) -> dict[str, Any]:
    pool = dict(spec.get("pool") or {})
    pool.pop("generation", None)
    return {**spec, "pool": pool}


def slice_republished(event: client.WatchEvent, before: client.Obj | None) -> bool:
    """A one-slice pool's slice published again with only a new generation."""
    if event.type != "MODIFIED" or before is None:
        return False
    spec, old = event.object.get("spec"), before.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(old, Mapping):
        return False
    if not (_single_slice_pool(spec) and _single_slice_pool(old)):
        return False
    return (_without_generation(spec) == _without_generation(old)
            and _get(event.object, "metadata").get("labels")
            == _get(before, "metadata").get("labels"))


def inventory_changed(kind: kinds.Kind, event: client.WatchEvent,
                      before: client.Obj | None) -> bool:
    """Whether an event of the idle cluster's stores can change a held gang's verdict."""
    if not fitting.relevant(kind, event, before):
        return False
    return not (kind == kinds.RESOURCE_SLICE and slice_republished(event, before))
