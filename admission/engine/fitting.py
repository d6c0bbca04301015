"""The engine as the pre-quota path sees it: plan a gang on the cluster the stores hold.

`Engine` is the surface the webhook and the gate controller need: `plan(gang, shapes=,
node_filter=)`, the same call as `admission/engine/inventory.ClusterInventory` (the controller's
incremental inventory) offers. `StoreEngine` implements it directly over watch-backed
stores, for the gate and webhook until they are wired to the shared inventory, for tests
and for `bench/webhook.py`:

- it feeds the stores' events to a `ClusterInventory` (fitcore's incremental inventory:
  a change costs the changed object, not a re-read of every device), and decides in the
  caller's worker thread so the event loop keeps answering.

Objects that do not parse are left out of the inventory and kept in `problems` (the
service keeps serving everything else).

`gang_of(obj, stores)` reads a Job or Workload as a gang with the ResourceClaimTemplates
and ResourceClaims of its namespace, by fitcore's one reader (`fitcore.gang_of`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import fitcore
from admission.engine import inventory
from admission.kube import client, kinds, store
from admission.policy import fitpolicy as policy

NodeFilter = Callable[[fitcore.Node], bool]

#: What the engine reads, by kind.
INVENTORY_KINDS = (kinds.NODE, kinds.RESOURCE_SLICE, kinds.DEVICE_CLASS, kinds.RESOURCE_CLAIM,
                   kinds.POD, kinds.NODE_SHAPE)
#: What an idle cluster is made of: the nodes, their devices and the shapes (no usage).
IDLE_KINDS = inventory.IDLE_KINDS


def _view(kind: kinds.Kind, obj: client.Obj | None) -> Any:
    """What of an object a fit decision reads (a Node's heartbeat changes none of it)."""
    if obj is None:
        return None
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    spec = obj.get("spec")
    if kind == kinds.NODE:
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        taints = spec.get("taints") if isinstance(spec, Mapping) else None
        unschedulable = spec.get("unschedulable") if isinstance(spec, Mapping) else None
        return (meta.get("labels"), taints, unschedulable, status.get("allocatable"))
    if kind in (kinds.POD, kinds.RESOURCE_CLAIM):
        return (spec, obj.get("status"))  # where a pod runs, what a claim holds
    return (meta.get("labels"), spec)


def relevant(kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None) -> bool:
    """Whether a store event can change a fit decision."""
    if event.type != "MODIFIED" or before is None:
        return True
    return bool(_view(kind, event.object) != _view(kind, before))


class Engine(Protocol):
    def plan(self, gang_: fitcore.Gang, shapes: Collection[str] | None = None,
             node_filter: NodeFilter | None = None) -> fitcore.PlanResult:
        """Fit the gang on the nodes `node_filter` allows, or plan new nodes of the named
        shapes (None: every shape)."""


def gang_of(obj: Mapping[str, Any], stores: Mapping[kinds.Kind, store.Store]) -> fitcore.Gang:
    """The gang of a batch/v1 Job or a Kueue Workload, by fitcore's one reader, with the
    ResourceClaimTemplates and ResourceClaims of its namespace; raises fitcore.InputError
    (with every field problem) for anything else or anything malformed."""
    ns = namespace_of(obj)
    template_names, claim_names = named_claims(obj)
    return read_gang(obj, named(stores.get(kinds.RESOURCE_CLAIM_TEMPLATE), template_names, ns),
                     named(stores.get(kinds.RESOURCE_CLAIM), claim_names, ns))


def named(s: store.Store | None, names: Iterable[str], namespace: str) -> list[client.Obj]:
    """The objects of `s` in `namespace` with these names (those that exist), by name:
    what a gang's pod templates name, looked up one by one, not the namespace's whole
    list (every bound pod's ResourceClaim) on every decision."""
    if s is None:
        return []
    return [o for o in (s.get(n, namespace) for n in sorted(names)) if o is not None]


def namespace_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return namespace if isinstance(namespace, str) and namespace else "default"


def read_gang(obj: Mapping[str, Any], templates: Iterable[client.Obj],
              claims: Iterable[client.Obj]) -> fitcore.Gang:
    """`gang_of` with the ResourceClaimTemplates and ResourceClaims of the object's
    namespace given (those it does not name may be left out)."""
    return fitcore.gang_of(obj, list(templates), list(claims))


def named_claims(obj: Any) -> tuple[set[str], set[str]]:
    """The ResourceClaimTemplate and ResourceClaim names an object's pod templates name
    (`resourceClaimTemplateName`, `resourceClaimName`, wherever they are)."""
    templates: set[str] = set()
    claims: set[str] = set()
    todo = [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, Mapping):
            for k, v in item.items():
                if k == "resourceClaimTemplateName" and isinstance(v, str):
                    templates.add(v)
                elif k == "resourceClaimName" and isinstance(v, str):
                    claims.add(v)
                elif isinstance(v, (Mapping, list)):
                    todo.append(v)
        elif isinstance(item, list):
            todo.extend(v for v in item if isinstance(v, (Mapping, list)))
    return templates, claims


class StoreEngine:
    """`Engine` over stores, backed by the service's incremental inventory
    (`admission.engine.inventory.ClusterInventory`, one fitcore `Inventory`); see the module
    docstring.

    `idle`: plan on the cluster as if nothing ran on it (no allocated ResourceClaims, no
    bound Pods): the question "could this gang ever fit, as configured?", which the
    webhook and the gate ask before quota. Busy nodes are the check's business (it plans
    on the real usage once Kueue has reserved quota), and an idle cluster changes only
    when nodes, devices or shapes do, not with every pod."""

    def __init__(self, stores: Mapping[kinds.Kind, store.Store], *, idle: bool = False,
                 kube_version: str = fitcore.DEFAULT_KUBE_VERSION) -> None:
        self.idle = idle

        def store_of(kind: kinds.Kind) -> store.Store:
            have = stores.get(kind)
            return have if have is not None else store.Store(kind)

        # Events are applied before each decision, on the deciding thread (the webhook
        # and the gate decide in worker threads of their own).
        self._inventory = inventory.ClusterInventory(store_of, idle=idle, background=False,
                                                     kube_version=kube_version)

    @property
    def problems(self) -> list[str]:
        """Objects left out of the inventory, each with why."""
        self._inventory.sync()
        return [f"{what}: {why}" for what, why in sorted(self._inventory.problems().items())]

    def plan(self, gang_: fitcore.Gang, shapes: Collection[str] | None = None,
             node_filter: NodeFilter | None = None) -> fitcore.PlanResult:
        return self._inventory.plan(gang_, shapes=shapes, node_filter=node_filter)

    def close(self) -> None:
        self._inventory.close()


# ----------------------------------------------------------------------- verdicts


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the validating hook concluded about a gang."""

    refuse: bool  # the gang can never fit as configured
    violation: bool  # ... but would fit without its FitPolicy
    messages: tuple[str, ...] = ()
    result: fitcore.PlanResult | None = None


def decide(engine: Engine, gang_: fitcore.Gang, scope: policy.Scope) -> Verdict:
    """Whether a gang can never fit as configured (runs in the engine's thread)."""
    result = engine.plan(gang_, shapes=scope.shapes, node_filter=scope.node_filter)
    if result.verdict != "unsatisfiable":
        return Verdict(False, False, result=result)
    if scope.restricted:
        free = engine.plan(gang_)
        if free.verdict in ("fits", "needs-capacity"):
            return Verdict(True, True, (f"allowed to it: {scope.description}",
                                        *reasons(result)), result)
    if result.category == "configuration":
        return Verdict(True, False, reasons(result), result)
    return Verdict(False, False, result=result)


def reasons(result: fitcore.PlanResult) -> tuple[str, ...]:
    """fitcore's reasons, the specific ones first: what the closest kind of node lacks
    for a pod and its claims, and claims shared across pods (chosen by reason code, never
    by wording; reasons without details keep their order)."""
    specific = [d.message for d in result.details if d.code in SPECIFIC]
    return (*specific, *(r for r in result.reasons if r not in specific))


#: Reason codes `reasons` puts first.
SPECIFIC = fitcore.reasons.NODE_KINDS | {fitcore.reasons.SHARED_CLAIM_ONE_NODE,
                                         fitcore.reasons.SHARED_CLAIM_NODES}


if TYPE_CHECKING:  # StoreEngine implements Engine (checked by mypy)
    _: Engine = StoreEngine({})
