"""What the Workload reconciler reads: its settings, the watch-backed stores, and one
pass's parsed view of them.

A `Pass` is made once per `reconcile` of one Workload: the NodeShapes parsed once (every
step that needs them, the request's builder, the node ledger, readiness and verification,
reads the same parse) and node ownership scanned once (`ledger.NodeLedger.node_owners`).

`OwnWrites` says when the Workload store still holds the copy fitgate's last status write
replaced (see there).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

import fitcore
from admission import clock as clock_
from admission import constants as c
from admission.kube import kinds, store


class Inventory(Protocol):
    """The fitcore inventory the process keeps current (`admission.engine.inventory`): decisions
    run off the event loop, bounded in time (past it, `undecided`)."""

    async def plan_async(self, gang_: fitcore.Gang, *, shapes: Iterable[str] | None = None,
                         node_filter: Any = None, held: Collection[str] = ()
                         ) -> fitcore.PlanResult: ...

    async def verify_async(self, gang_: fitcore.Gang, plan_: fitcore.Plan, *,
                           node_filter: Any = None, held: Collection[str] = ()
                           ) -> fitcore.VerifyResult: ...

    async def fit_async(self, gang_: fitcore.Gang, *, node_filter: Any = None,
                        held: Collection[str] = ()) -> fitcore.PlanResult: ...

    def assume(self, owner: str, gang_: fitcore.Gang,
               placements: Sequence[fitcore.Placement]) -> None: ...

    def forget(self, owner: str, nodes: Collection[str] | None = None) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    backoff_base_seconds: int = c.BACKOFF_BASE_SECONDS
    backoff_max_seconds: int = c.BACKOFF_MAX_SECONDS
    #: After Provisioned, how long to wait for the new Nodes Ready with their slices.
    node_wait_seconds: int = c.NODE_WAIT_SECONDS
    node_poll_seconds: int = c.NODE_POLL_SECONDS
    #: Re-check of a request the autoscaler has not answered (events also wake us).
    pending_poll_seconds: int = 60
    #: A request neither Provisioned nor Failed this long after its creation is deleted
    #: and the check retried (0: no deadline).
    request_timeout_seconds: float = c.PROVISIONING_TIMEOUT_SECONDS
    #: How long nodes promised to an admitted gang stay out of other gangs' decisions
    #: at most, while its pods have not all bound there (see `promised_nodes`).
    promise_seconds: int = 600
    #: Re-decide after this at the latest while a gang waits only for promised nodes'
    #: pods to bind (a pod event that ends the promise wakes it sooner: `ledger.woken`).
    promise_poll_seconds: int = 2
    #: A question to the idle engine unanswered after this is not waited for (Retry).
    decision_timeout_seconds: float = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class Stores:
    """The watch-backed stores the reconciler reads (never the API server per decision)."""

    workloads: store.Store
    admission_checks: store.Store
    resource_flavors: store.Store
    claim_templates: store.Store
    provisioning_requests: store.Store
    pod_templates: store.Store
    nodes: store.Store
    resource_slices: store.Store
    node_shapes: store.Store
    claims: store.Store | None = None
    fit_policies: store.Store | None = None  # None: no FitPolicy restricts any gang
    namespaces: store.Store | None = None
    cluster_queues: store.Store | None = None
    pods: store.Store | None = None  # to see an admitted gang's pods bind
    node_claims: store.Store | None = None  # fitgate's Karpenter NodeClaims (None: off)
    node_pools: store.Store | None = None

    @classmethod
    def of(cls, by_kind: Mapping[kinds.Kind, store.Store]) -> Stores:
        return cls(
            workloads=by_kind[kinds.WORKLOAD], admission_checks=by_kind[kinds.ADMISSION_CHECK],
            resource_flavors=by_kind[kinds.RESOURCE_FLAVOR],
            claim_templates=by_kind[kinds.RESOURCE_CLAIM_TEMPLATE],
            provisioning_requests=by_kind[kinds.PROVISIONING_REQUEST],
            pod_templates=by_kind[kinds.POD_TEMPLATE], nodes=by_kind[kinds.NODE],
            resource_slices=by_kind[kinds.RESOURCE_SLICE],
            node_shapes=by_kind[kinds.NODE_SHAPE], claims=by_kind.get(kinds.RESOURCE_CLAIM),
            fit_policies=by_kind.get(kinds.FIT_POLICY), namespaces=by_kind.get(kinds.NAMESPACE),
            cluster_queues=by_kind.get(kinds.CLUSTER_QUEUE), pods=by_kind.get(kinds.POD),
            node_claims=by_kind.get(kinds.NODE_CLAIM), node_pools=by_kind.get(kinds.NODE_POOL))


class OwnWrites:
    """The Workloads whose check entry fitgate wrote and whose new version the store has
    not shown yet.

    The stores follow the API server through watches, so for a moment after a status write
    the Workload store still holds the copy that write replaced. A pass over that copy
    decides again on an entry already decided, and redoes what comes before the write
    while the write itself fails on the resourceVersion: a Ready pass rewrites the
    placements and moves the gang's promise, perhaps to another node (new nodes are
    matched to requests again when more arrive), while the pods stay pinned where the
    first pass put them, and another gang is then placed there. So `reconcile` skips such
    a copy: the write's own watch event queues the Workload again, and at the latest it is
    looked at again after `grace_seconds`, when the copy is read anyway (a write that
    changed nothing on the server brings no event).
    """

    def __init__(self, clock: clock_.Clock, grace_seconds: float = 5.0) -> None:
        self._clock = clock
        self.grace_seconds = grace_seconds
        self._written: dict[str, tuple[str, float]] = {}  # key -> (version replaced, when)

    def wrote(self, key: str, replaced: Mapping[str, Any]) -> None:
        """A status write to the Workload `key` succeeded over the copy `replaced`."""
        version = (replaced.get("metadata") or {}).get("resourceVersion")
        if version:
            self._written[key] = (str(version), self._clock.monotonic())

    def stale(self, key: str, obj: Mapping[str, Any] | None) -> bool:
        """Whether `obj` (the store's copy, None: gone) is the copy a recent write of
        ours replaced."""
        written = self._written.get(key)
        if written is None:
            return False
        version = ((obj or {}).get("metadata") or {}).get("resourceVersion")
        if obj is not None and str(version) == written[0] \
                and self._clock.monotonic() - written[1] < self.grace_seconds:
            return True
        del self._written[key]
        return False


#: Node -> (request, workload uid, whether that workload is admitted).
Owners = dict[str, tuple[str, str, bool]]


@dataclasses.dataclass(slots=True)
class Pass:
    """One reconcile pass's view: the NodeShapes parsed once, node owners scanned once."""

    node_shapes: dict[str, fitcore.NodeShape]
    shape_problems: list[str]  # of the NodeShapes that do not parse
    owners: Owners | None = None  # filled on first use


def read_pass(stores: Stores) -> Pass:
    """Parse the NodeShapes (once for the pass; each object once while the store holds
    it: `_parsed`)."""
    out: dict[str, fitcore.NodeShape] = {}
    problems: list[str] = []
    kept = _PARSED.get(stores.node_shapes, {})
    seen: dict[store.Key, tuple[Any, fitcore.NodeShape | str]] = {}
    for obj in stores.node_shapes.list():
        key = store.key_of(obj)
        have = kept.get(key)
        if have is None or have[0] is not obj:
            have = (obj, _parsed(obj))
        seen[key] = have
        if isinstance(have[1], str):
            problems.append(have[1])
        else:
            out[have[1].name] = have[1]
    _PARSED[stores.node_shapes] = seen  # only what the store holds now
    return Pass(out, problems)


#: Per NodeShape store, each object's parse (or its problem) while the store holds that
#: object: every reconcile of every Workload reads every NodeShape, and a store replaces
#: an object when it changes, so the same object parses the same. The kept reference
#: holds the object's identity.
_PARSED: weakref.WeakKeyDictionary[
    store.Store, dict[store.Key, tuple[Any, fitcore.NodeShape | str]]] = \
    weakref.WeakKeyDictionary()


def _parsed(obj: Any) -> fitcore.NodeShape | str:
    try:
        return fitcore.node_shape(obj)
    except fitcore.InputError as exc:
        return str(exc)
