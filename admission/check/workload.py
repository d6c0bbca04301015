"""The Workload reconciler of fitgate's admission check.

For a Workload whose quota Kueue has reserved and whose fitgate check is Pending:

1. build the gang (`admission.engine.gangs`): pod sets, admitted counts, flavor node labels and
   tolerations, claim templates;
2. plan on the inventory:
   - fits on free capacity → Ready, with podSetUpdates that label the pods for ordered
     release and pin them where fitcore placed them (`podsetupdates`), the placements
     stored for the release controller (`admission.release.reconciler`);
   - needs capacity → a ProvisioningRequest and PodTemplates for the plan's exact shapes
     (`admission.check.provisioning`), the check Pending with what it waits for;
   - can never fit (no node and no shape hosts some pod) → Rejected;
   - does not fit within the shapes' limits now, or undecided within fitcore's work
     budget → Retry with a backoff;
3. follow the request: while it is not answered, a gang that fits freed capacity is
   admitted there and the request deleted. Provisioned → wait (bounded) for the new Nodes
   Ready and their ResourceSlices published, then verify the gang on the real inventory:
   fits → Ready with the autoscaler's consume annotations and the pins; misfit → Retry,
   an Event, the mismatch recorded on the NodeShape and the request deleted so the idle
   nodes scale down. Failed / BookingExpired / CapacityRevoked → the next ranked plan, or
   Retry. Neither Provisioned nor Failed `request_timeout_seconds` after its creation →
   Retry, the request deleted (the autoscaler did not answer in time).
4. clean up: fitgate deletes its requests (and their templates) when the Workload is
   deleted, finishes or is evicted, and when its check is retried.

The reconciler is a pipeline: `reconcile` fetches the Workload from the store, skips what
is not fitgate's, and runs named `sync_*` steps; each step decides with pure functions
(`predicates`, `podsetupdates`, `provisioning`) and writes only what changed. Only our own
entry of `status.admissionChecks` is written, with server-side apply as fitgate's field
manager and the resourceVersion fitgate decided on (a Workload that changed meanwhile,
say was evicted, makes the write fail and the key is reconciled again). Retry and Rejected
are never written while the Workload is Evicted or Finished (kueue#3543).

Restart safety: request names are deterministic per (workload, check, attempt, plan
index), the plan is an annotation on the request, and node readiness is recomputed from
the API, so a second reconciler over the same state finds what the first created.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import structlog

import fitcore
from admission import clock as clock_
from admission import constants as c
from admission import context, kueue
from admission.check import podsetupdates, predicates, provisioning
from admission.check.predicates import Verdict
from admission.engine import fitting, gangs
from admission.kube import client, errors, kinds, store
from admission.policy import fitpolicy as policy
from admission.release import reconciler as release
from admission.runtime import events, failpoint, metrics
from admission.runtime import workqueue as controller

log = structlog.get_logger(__name__)


# (Type names for the Protocol below.)
PlanResult = fitcore.PlanResult
Plan = fitcore.Plan
VerifyResult = fitcore.VerifyResult
_Decided = TypeVar("_Decided", PlanResult, VerifyResult)


class Inventory(Protocol):
    """The fitcore inventory the process keeps current (`admission.engine.inventory`): decisions
    run off the event loop, bounded in time (past it, `undecided`)."""

    async def plan_async(self, gang_: fitcore.Gang, *, shapes: Iterable[str] | None = None,
                         node_filter: Any = None, held: Collection[str] = ()
                         ) -> PlanResult: ...

    async def verify_async(self, gang_: fitcore.Gang, plan_: Plan, *, node_filter: Any = None,
                           held: Collection[str] = ()) -> VerifyResult: ...

    async def fit_async(self, gang_: fitcore.Gang, *, node_filter: Any = None,
                        held: Collection[str] = ()) -> PlanResult: ...


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
    #: Re-decide after this while a gang waits only for promised nodes' pods to bind.
    promise_poll_seconds: int = 2


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
            cluster_queues=by_kind.get(kinds.CLUSTER_QUEUE), pods=by_kind.get(kinds.POD))


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    raw = _meta(obj).get("labels") if obj is not None else None
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


@dataclasses.dataclass(frozen=True, slots=True)
class NodeReadiness:
    ready: int  # new nodes of the plan's shapes Ready with their slices published
    planned: int
    new_nodes: dict[str, list[str]]  # shape -> new node names (Ready or not)
    waiting: list[str]  # "h100: 1 of 2 ready" per shape short of its count

    @property
    def complete(self) -> bool:
        return self.ready >= self.planned


class WorkloadReconciler:
    def __init__(self, api: client.Client, stores: Stores, inventory: Inventory, *,
                 clock: clock_.Clock | None = None, settings: Settings | None = None,
                 recorder: events.Recorder | None = None,
                 idle: fitting.Engine | None = None) -> None:
        self.api = api
        # The gate's question, "could the gang ever fit as configured?" (an engine over
        # the idle cluster), asked before a gang is Rejected (see `never_fits`).
        self.idle = idle
        self._idle_lock = asyncio.Lock()
        self.stores = stores
        self.inventory = inventory
        self.clock = clock or clock_.SystemClock()
        self.settings = settings or Settings()
        self.recorder = recorder or events.Recorder(api, self.clock)
        self._finished: set[str] = set()  # uids whose placements were deleted
        # uid -> (namespace, pods placed per node, when): nodes promised to a gang this
        # reconciler admitted, until its pods have bound there (see promised_nodes).
        self._promised: dict[str, tuple[str, dict[str, int], float]] = {}
        self.policies = (policy.Policies(stores.fit_policies)
                         if stores.fit_policies is not None else None)

    # ------------------------------------------------------------------ pipeline

    # The controller runtime's interface (admission.runtime.workqueue).
    name = "workload"
    leader_only = True
    watches = (kinds.WORKLOAD, kinds.ADMISSION_CHECK, kinds.PROVISIONING_REQUEST,
               kinds.NODE, kinds.RESOURCE_SLICE)

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        """The Workloads an event concerns."""
        obj = event.object
        if kind == kinds.WORKLOAD:
            names = kueue.ours(self.stores.admission_checks.list())
            if event.type == "DELETED" or kueue.entries(obj, names) or (
                    before is not None and kueue.entries(before, names)):
                return [controller.key_of(obj)]
            return []
        if kind == kinds.ADMISSION_CHECK:
            if not kueue.ours([obj]):
                return []
            check = _meta(obj).get("name")
            return [controller.key_of(wl) for wl in self.stores.workloads.list()
                    if any(e.get("name") == check
                           for e in (wl.get("status") or {}).get("admissionChecks") or [])]
        if kind in (kinds.PROVISIONING_REQUEST, kinds.POD_TEMPLATE):
            key = workload_of_request(obj)
            return [f"{key[0]}/{key[1]}"] if key else []
        # A Node or ResourceSlice: the Workloads waiting for provisioned nodes.
        return [f"{ns}/{name}" for ns, name in waiting_for_nodes(
            self.stores.workloads, self.stores.provisioning_requests)]

    async def reconcile(self, key: str) -> float | None:
        """Bring one Workload's fitgate checks up to date; returns seconds until the key
        should be looked at again (None: when something changes)."""
        ns, name = controller.split(key)
        namespace = ns or ""
        wl = self.stores.workloads.get(name, namespace)
        if wl is None:
            await self.sync_cleanup(namespace, name, keep_uid=None)
            return None
        bound = log.bind(workload=f"{namespace}/{name}")
        names = kueue.ours(self.stores.admission_checks.list())
        mine = kueue.entries(wl, names)
        if kueue.finished(wl) or kueue.evicted(wl) or not mine:
            uid = str(_meta(wl).get("uid") or "")
            await self.sync_cleanup(namespace, name, keep_uid=None, uid=uid)
            if mine and kueue.finished(wl) and uid not in self._finished:
                # The placements outlive an eviction (the next Ready overwrites them) but
                # not the run: delete them once (the Workload's deletion would too).
                self._finished.add(uid)
                await self._delete(kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, namespace)
            return None
        await self.sync_cleanup(namespace, name, keep_uid=_meta(wl).get("uid"))
        waits: list[float] = []
        for entry in mine:
            try:
                wait = await self.sync_check(wl, entry)
            except errors.Conflict:
                bound.debug("workload changed while deciding; again", check=entry["name"])
                wait = 1.0
            if wait is not None:
                waits.append(wait)
        return min(waits) if waits else None

    async def sync_check(self, wl: client.Obj, entry: Mapping[str, Any]) -> float | None:
        check = str(entry["name"])
        attempt = provisioning.attempt_of(entry)
        requests = self.requests_of(wl, check)
        state = entry.get("state")
        keep = [r for r in requests if _attempt_label(r) == attempt]
        if state in (c.RETRY, c.REJECTED):
            keep = []  # the check is being retried or gave up: its requests are done
        for r in requests:
            if r not in keep:
                await self.delete_request(r, "check retried")
        if state != c.PENDING or not kueue.quota_reserved(wl):
            return None
        if not keep:
            return await self.sync_plan(wl, entry, attempt)
        keep.sort(key=provisioning.plan_index)
        for older in keep[:-1]:
            await self.delete_request(older, "superseded by the next plan")
        return await self.sync_request(wl, entry, attempt, keep[-1])

    # -------------------------------------------------------------------- plan

    def promised_nodes(self, except_uid: str) -> set[str]:
        """Nodes where a gang admitted by this reconciler still has pods to bind.

        Between Ready and its pods binding, an admitted gang's devices are not yet
        allocated, so the inventory shows them free; another gang decided meanwhile would
        be placed on the same devices. Until every pod placed on a node has bound there,
        that node is left out of other gangs' decisions (a whole node: coarse, never
        double-booked). A promise ends when the pods have bound, or after
        `promise_seconds` (pods that never come). Promises are kept in memory: a
        replica that takes over leadership starts without them, and trusts the
        inventory (the pods of a gang admitted just before are then its only guard)."""
        out: set[str] = set()
        now = self.clock.monotonic()
        for uid, (namespace, nodes, since) in list(self._promised.items()):
            if uid == except_uid:
                continue
            if now - since > self.settings.promise_seconds:
                del self._promised[uid]
                continue
            bound: dict[str, int] = {}
            for pod in self.stores.pods.list(namespace) if self.stores.pods else ():
                labels = _meta(pod).get("labels") or {}
                node = (pod.get("spec") or {}).get("nodeName")
                if node and uid in (labels.get(c.PLACEMENT_LABEL),
                                    labels.get(c.PLACEMENT_WORKLOAD_LABEL)):
                    bound[node] = bound.get(node, 0) + 1
            waiting = {n for n, want in nodes.items() if bound.get(n, 0) < want}
            if not waiting:
                del self._promised[uid]
            out |= waiting
        return out

    def node_owners(self) -> dict[str, tuple[str, str, bool]]:
        """New nodes fitgate's ProvisioningRequests brought: node -> (request, workload
        uid, whether that workload is admitted).

        A request owns, per shape of its plan, the planned count of that shape's nodes
        created after it, oldest nodes to the oldest requests first (creation time, then
        resourceVersion: several requests are created within a second). Every gang's
        decision reads the same owners, so no two gangs count the same new node: another
        gang's node stays out of a plan until that gang is admitted (then
        `promised_nodes` holds it until its pods bind), and a request waits for a node
        of its own instead of verifying on another's."""
        requests = sorted(
            (r for r in self.stores.provisioning_requests.list()
             if _labels(r).get(c.MANAGED_LABEL) == "fitgate"),
            key=lambda r: (str(_meta(r).get("creationTimestamp") or ""),
                           _int(_meta(r).get("resourceVersion"))))
        if not requests:
            return {}
        node_shapes, _ = self.node_shapes()
        nodes = sorted(self.stores.nodes.list(),
                       key=lambda n: (str(_meta(n).get("creationTimestamp") or ""),
                                      str(_meta(n).get("name"))))
        names = kueue.ours(self.stores.admission_checks.list())
        out: dict[str, tuple[str, str, bool]] = {}
        for r in requests:
            key = workload_of_request(r)
            wl = self.stores.workloads.get(key[1], key[0]) if key else None
            admitted = wl is not None and any(
                e.get("state") == c.READY for e in kueue.entries(wl, names))
            since = predicates.parse_time(_meta(r).get("creationTimestamp"))
            try:
                planned = provisioning.plan_from_json(
                    (_meta(r).get("annotations") or {}).get(c.PLAN_ANNOTATION) or "")
            except (ValueError, KeyError, TypeError):
                continue
            owner = (str(_meta(r).get("name")), str(_labels(r).get(c.WORKLOAD_UID_LABEL)),
                     admitted)
            for sc in planned.shapes:
                shape = node_shapes.get(sc.shape)
                if shape is None:
                    continue
                mine = [str(_meta(n)["name"]) for n in nodes
                        if str(_meta(n)["name"]) not in out
                        and _created_since(n, since)
                        and all((_meta(n).get("labels") or {}).get(k) == v
                                for k, v in shape.node_labels.items())][:sc.count]
                out.update((n, owner) for n in mine)
        return out

    def requested_nodes(self, except_uid: str) -> set[str]:
        """New nodes other gangs' requests brought, those gangs not admitted yet."""
        return {n for n, (_, uid, admitted) in self.node_owners().items()
                if uid != except_uid and not admitted}

    async def around_promises(self, wl: client.Obj,
                              decide: Callable[[Collection[str]], Awaitable[_Decided]]
                              ) -> _Decided | None:
        """`decide(held)` with the nodes held for other gangs left out; None when it did
        not fit but would have gone otherwise without the nodes promised to gangs still
        binding: then the gang waits for them to bind (moments) rather than have nodes
        bought for it, be rejected, or be retried."""
        result = await decide(self.held_for_others(wl))
        if result.verdict == "fits" or not self.promised_nodes(str(_meta(wl).get("uid"))):
            return result
        free = await decide(())
        if free.verdict == result.verdict:
            return result
        log.debug("waiting for promised nodes to bind",
                  workload=f"{_meta(wl).get('namespace')}/{_meta(wl).get('name')}")
        return None

    def node_labels(self) -> dict[str, dict[str, str]]:
        """Every node's labels, by name."""
        return {str(_meta(n).get("name")): _labels(n) for n in self.stores.nodes.list()}

    def held_for_others(self, wl: client.Obj) -> set[str]:
        """Nodes the gang may not take now because they are held for other workloads:
        promised to gangs whose pods are binding, or brought by other gangs' requests."""
        uid = str(_meta(wl).get("uid"))
        return self.promised_nodes(uid) | self.requested_nodes(uid)

    def scope_of(self, wl: client.Obj) -> policy.Scope | None:
        """What the Workload's FitPolicies let it use (None: no policy applies). The same
        scope the gate and the webhook apply before quota, here on the ClusterQueue that
        reserved the quota: fitgate never places a gang, on existing or planned nodes,
        where its policy forbids."""
        if self.policies is None:
            return None
        policies, bad = self.policies.current()
        for err in bad:
            log.warning("FitPolicy ignored", error=str(err))
        if not policies:
            return None
        namespace = str(_meta(wl).get("namespace") or "")
        ns = self.stores.namespaces.get(namespace) if self.stores.namespaces else None
        admission = (wl.get("status") or {}).get("admission") or {}
        cq_name = admission.get("clusterQueue") if isinstance(admission, Mapping) else None
        cq = (self.stores.cluster_queues.get(cq_name)
              if self.stores.cluster_queues is not None and isinstance(cq_name, str) else None)
        scope = policy.scope(policies, self.stores.node_shapes.list(), namespace=namespace,
                             namespace_labels=_labels(ns),
                             cluster_queue=cq_name if isinstance(cq_name, str) else None,
                             cluster_queue_labels=_labels(cq))
        return scope if scope.restricted else None

    def gang_of(self, wl: client.Obj) -> gangs.WorkloadGang:
        return gangs.gang_of(wl, templates=self.stores.claim_templates,
                             flavors=self.stores.resource_flavors, claims=self.stores.claims)

    async def sync_plan(self, wl: client.Obj, entry: Mapping[str, Any], attempt: int
                        ) -> float | None:
        try:
            wg = self.gang_of(wl)
        except fitcore.InputError as exc:
            return await self.sync_status(wl, entry, self.retry(
                entry, "configuration", "the workload cannot be read: "
                + "; ".join(str(e) for e in exc.errors)))
        started = time.perf_counter()
        scope = self.scope_of(wl)
        decided = await self.around_promises(wl, lambda held: self.inventory.plan_async(
            wg.gang, shapes=scope.shapes if scope else None,
            node_filter=scope.node_filter if scope else None, held=held))
        if decided is None:
            return self.settings.promise_poll_seconds
        result = decided
        if scope is not None and result.verdict == "unsatisfiable":
            result = dataclasses.replace(result, reasons=(
                f"FitPolicy {', '.join(scope.applied) or '(reserved capacity)'} allows "
                f"{scope.description}", *result.reasons))
        metrics.DECISION_SECONDS.labels(operation="plan").observe(
            time.perf_counter() - started)
        if result.verdict == "fits":
            return await self.sync_ready(wl, entry, wg, result.placements, result.domains,
                                         "fits on existing nodes: "
                                         + _where(result.placements))
        if result.verdict == "needs-capacity" and result.plan is not None:
            failpoint.reach("planned")
            return await self.sync_new_request(wl, entry, wg, attempt, 0, result.plan,
                                               list(result.alternatives),
                                               why=list(result.reasons))
        if result.verdict == "unsatisfiable" and result.category == "configuration" \
                and await self.never_fits(wg.gang, scope):
            return await self.sync_status(wl, entry, Verdict(
                c.REJECTED, predicates.message("configuration", "the gang can never fit: "
                                               + "; ".join(result.reasons)),
                "configuration"))
        if result.verdict == "undecided":
            return await self.sync_status(wl, entry, self.retry(
                entry, "configuration", "fitgate could not decide within its work budget "
                "(the gang's device requests are too many or too alike to search): "
                + "; ".join(result.reasons)))
        return await self.sync_status(wl, entry, self.retry(
            entry, "capacity", "does not fit now, and the node shapes' limits allow no plan: "
            + "; ".join(result.reasons)))

    async def never_fits(self, gang_: fitcore.Gang, scope: policy.Scope | None) -> bool:
        """Whether the gang fits no node and no shape even with nothing running: only then
        is it Rejected (which deactivates the Workload). On the real usage, a pod that no
        node can host *now* (its nodes busy, or promised to gangs still binding) also
        reads as "configuration"; on the idle cluster it is a matter of capacity, retried.
        Without an idle engine, the real usage's answer stands."""
        if self.idle is None:
            return True
        async with self._idle_lock:  # one engine, one decision at a time
            idle = await asyncio.to_thread(
                self.idle.plan, gang_, scope.shapes if scope else None,
                scope.node_filter if scope else None)
        return idle.verdict == "unsatisfiable" and idle.category == "configuration"

    def retry(self, entry: Mapping[str, Any], category: predicates.Category, text: str
              ) -> Verdict:
        retries = provisioning.attempt_of(entry) - 1
        wait = predicates.backoff(retries, self.settings.backoff_base_seconds,
                                  self.settings.backoff_max_seconds)
        return Verdict(c.RETRY, predicates.message(category, f"{text} (retry in {wait}s)"),
                       category, requeue_after=wait)

    def node_shapes(self) -> tuple[dict[str, fitcore.NodeShape], list[str]]:
        """Parsed NodeShapes, and the problems of those that do not parse."""
        out: dict[str, fitcore.NodeShape] = {}
        problems: list[str] = []
        for obj in self.stores.node_shapes.list():
            try:
                s = fitcore.node_shape(obj)
            except fitcore.InputError as exc:
                problems.append(str(exc))
                continue
            out[s.name] = s
        return out, problems

    async def sync_new_request(self, wl: client.Obj, entry: Mapping[str, Any],
                               wg: gangs.WorkloadGang, attempt: int, index: int,
                               chosen: fitcore.Plan, alternatives: list[fitcore.Plan],
                               why: Sequence[str] = (), previous: str = "") -> float | None:
        """Create the request for plan `index` (and its templates), then say Pending."""
        check = str(entry["name"])
        node_shapes, bad = self.node_shapes()
        while True:
            try:
                request, templates = provisioning.build(
                    wl, wg.gang, check, attempt, index, chosen, alternatives, node_shapes,
                    self.node_labels())
                break
            except provisioning.ShapeProblem as exc:
                if not alternatives:
                    return await self.sync_status(wl, entry, self.retry(
                        entry, "configuration", f"cannot ask for the planned nodes: {exc}"
                        + (f" ({'; '.join(bad)})" if bad else "")))
                index, chosen, alternatives = index + 1, alternatives[0], alternatives[1:]
        for t in templates:
            await self._create_template(t)
        name = request["metadata"]["name"]
        try:
            await self.api.create(kinds.PROVISIONING_REQUEST, request)
            metrics.request("created")
        except errors.AlreadyExists:
            pass  # created before a restart: the deterministic name finds it
        failpoint.reach("requested")
        lead = f"{previous}; " if previous else ""
        text = (f"{lead}asked the autoscaler for {provisioning.describe_plan(chosen)} "
                f"(ProvisioningRequest {name})")
        if why:
            text += f"; existing nodes are not enough: {why[0]}"
        await self.sync_status(wl, entry, Verdict(c.PENDING,
                                                  predicates.message("capacity", text),
                                                  "capacity"))
        return float(self.settings.pending_poll_seconds)

    async def _create_template(self, template: client.Obj) -> None:
        meta = template["metadata"]
        try:
            await self.api.create(kinds.POD_TEMPLATE, template)
        except errors.AlreadyExists:
            have = await self.api.get(kinds.POD_TEMPLATE, meta["name"], meta["namespace"])
            if have.get("template") != template["template"]:
                # Left by a crash before its request was created, for another plan.
                await self.api.delete(kinds.POD_TEMPLATE, meta["name"], meta["namespace"])
                await self.api.create(kinds.POD_TEMPLATE, template)

    # ----------------------------------------------------------------- request

    async def sync_request(self, wl: client.Obj, entry: Mapping[str, Any], attempt: int,
                           request: client.Obj) -> float | None:
        name = _meta(request)["name"]
        annotations = _meta(request).get("annotations") or {}
        state, cond = provisioning.state(request)
        try:
            planned = provisioning.plan_from_json(annotations.get(c.PLAN_ANNOTATION, ""),
                                                  self.existing_nodes(request))
            alternatives = provisioning.plans_from_json(
                annotations.get(c.ALTERNATIVES_ANNOTATION, "[]"))
        except provisioning.PlanFormatError as exc:
            log.warning("unreadable plan on our request; asking again", request=name,
                        error=str(exc))
            await self.delete_request(request, "unreadable plan")
            return 1.0
        cond_message = str((cond or {}).get("message") or (cond or {}).get("reason") or "")
        if state in ("failed", "capacity-revoked", "booking-expired"):
            metrics.request(state)
            self._count_unused(request, planned, used=set())
            what = {"failed": "failed", "capacity-revoked": "lost its capacity",
                    "booking-expired": "expired before the gang was admitted"}[state]
            said = f"ProvisioningRequest {name} {what}" + (
                f" ({cond_message})" if cond_message else "")
            if alternatives:
                try:
                    wg = self.gang_of(wl)
                except fitcore.InputError as exc:
                    return await self.sync_status(wl, entry, self.retry(
                        entry, "configuration", "the workload cannot be read: "
                        + "; ".join(str(e) for e in exc.errors)))
                wait = await self.sync_new_request(
                    wl, entry, wg, attempt, provisioning.plan_index(request) + 1,
                    alternatives[0], alternatives[1:], previous=said + "; next plan")
                await self.delete_request(request, state)
                return wait
            wait = await self.sync_status(wl, entry, self.retry(entry, "capacity", said))
            await self.delete_request(request, state)
            return wait
        if state != "provisioned":
            # Capacity may have freed up while the autoscaler works: then admit on it and
            # give the request up (nodes nobody waits for are not bought).
            admitted, wait = await self.sync_fits_meanwhile(wl, entry, request)
            if admitted:
                return wait
            left = self.deadline_left(request)
            if left is not None and left <= 0:
                return await self.sync_timed_out(wl, entry, request, state)
            text = (f"waiting for the autoscaler: {provisioning.describe_plan(planned)} "
                    f"asked by ProvisioningRequest {name}"
                    + (" (accepted)" if state == "accepted" else ""))
            await self.sync_status(wl, entry, Verdict(
                c.PENDING, predicates.message("capacity", text), "capacity"))
            poll = float(self.settings.pending_poll_seconds)
            return poll if left is None else max(1.0, min(poll, left))
        failpoint.reach("provisioned")
        return await self.sync_verify(wl, entry, request, planned, cond)

    def deadline_left(self, request: Mapping[str, Any]) -> float | None:
        """Seconds until an unanswered request is given up (None: no deadline). Counted
        from its creationTimestamp, so a restarted reconciler keeps the same deadline."""
        timeout = self.settings.request_timeout_seconds
        created = predicates.parse_time(_meta(request).get("creationTimestamp"))
        if not timeout or created is None:
            return None
        return timeout - (self.clock.now() - created).total_seconds()

    async def sync_timed_out(self, wl: client.Obj, entry: Mapping[str, Any],
                             request: client.Obj, state: str) -> float | None:
        """Retry, and the request with its templates deleted: the autoscaler did not
        answer in time (it may be down, or not serve the class). The next attempt asks
        again with a request of its own (attempt + 1)."""
        meta = _meta(request)
        created = predicates.parse_time(meta.get("creationTimestamp"))
        waited = (self.clock.now() - created).total_seconds() if created else 0.0
        metrics.request("timed-out")
        said = "accepted but not provisioned" if state == "accepted" else (
            "neither accepted nor provisioned")
        text = (f"ProvisioningRequest {meta['name']} was {said} after waiting {int(waited)}s "
                f"(deadline {_seconds(self.settings.request_timeout_seconds)}s); "
                "the autoscaler did not answer in time")
        wait = await self.sync_status(wl, entry, self.retry(entry, "capacity", text))
        await self.delete_request(request, "timed out")
        return wait

    async def sync_fits_meanwhile(self, wl: client.Obj, entry: Mapping[str, Any],
                                  request: client.Obj) -> tuple[bool, float | None]:
        """Ready on existing nodes, and the request deleted, when the gang fits them now
        (True, requeue); (False, None) when it does not, or cannot be read (the request's
        own path reports that)."""
        try:
            wg = self.gang_of(wl)
        except fitcore.InputError:
            return False, None
        # Only nodes that were there before the request: nodes the autoscaler has added
        # for it (before it says Provisioned) are the request's, verified on that path.
        existing = self.existing_nodes(request)
        started = time.perf_counter()
        scope = self.scope_of(wl)
        allowed = scope.node_filter if scope is not None else None

        def node_filter(node: Any) -> bool:
            return node.name in existing and (allowed is None or allowed(node))
        result = await self.inventory.fit_async(wg.gang, node_filter=node_filter,
                                                held=self.held_for_others(wl))
        metrics.DECISION_SECONDS.labels(operation="fit").observe(
            time.perf_counter() - started)
        if result.verdict != "fits":
            return False, None
        name = _meta(request)["name"]
        wait = await self.sync_ready(
            wl, entry, wg, result.placements, result.domains,
            f"fits on existing nodes (freed while ProvisioningRequest {name} was pending): "
            + _where(result.placements))
        await self.delete_request(request, "fits on existing nodes meanwhile")
        return True, wait

    def existing_nodes(self, request: Mapping[str, Any]) -> set[str]:
        """Nodes that existed before the request: created before it."""
        since = predicates.parse_time(_meta(request).get("creationTimestamp"))
        out = set()
        for n in self.stores.nodes.list():
            created = predicates.parse_time(_meta(n).get("creationTimestamp"))
            if since is None or (created is not None and created < since):
                out.add(str(_meta(n)["name"]))
        return out

    def readiness(self, request: Mapping[str, Any], planned: fitcore.Plan) -> NodeReadiness:
        """The plan's new nodes that are Ready with a ResourceSlice per driver their
        shape publishes."""
        node_shapes, _ = self.node_shapes()
        existing = planned.existing_nodes
        owners = self.node_owners()  # another request's new node is not this one's
        request_name = str(_meta(request).get("name"))
        slices_of: dict[str, set[str]] = {}
        for s in self.stores.resource_slices.list():
            spec = s.get("spec") or {}
            if spec.get("nodeName"):
                slices_of.setdefault(str(spec["nodeName"]), set()).add(str(spec.get("driver")))
        totals: dict[str, int] = {}
        for sc in planned.shapes:
            totals[sc.shape] = totals.get(sc.shape, 0) + sc.count
        ready = 0
        new_nodes: dict[str, list[str]] = {}
        waiting: list[str] = []
        for shape_name, count in totals.items():
            shape = node_shapes.get(shape_name)
            labels = dict(shape.node_labels) if shape else {}
            drivers = {s.driver for s in shape.slices} if shape else set()
            mine = sorted(str(_meta(n)["name"]) for n in self.stores.nodes.list()
                          if _meta(n)["name"] not in existing
                          and owners.get(str(_meta(n)["name"]), (request_name,))[0]
                          == request_name
                          and all((_meta(n).get("labels") or {}).get(k) == v
                                  for k, v in labels.items()))
            new_nodes[shape_name] = mine
            ok = [n for n in mine if _node_ready(self.stores.nodes.get(n))
                  and drivers <= slices_of.get(n, set())]
            ready += min(count, len(ok))
            if len(ok) < count:
                waiting.append(f"{shape_name}: {len(ok)} of {count} new nodes ready with "
                               "their ResourceSlices")
        return NodeReadiness(ready, planned.nodes, new_nodes, waiting)

    async def sync_verify(self, wl: client.Obj, entry: Mapping[str, Any],
                          request: client.Obj, planned: fitcore.Plan,
                          cond: Mapping[str, Any] | None) -> float | None:
        name = _meta(request)["name"]
        ready = self.readiness(request, planned)
        since = predicates.parse_time((cond or {}).get("lastTransitionTime")) or self.clock.now()
        waited = (self.clock.now() - since).total_seconds()
        if not ready.complete and waited < self.settings.node_wait_seconds:
            text = (f"ProvisioningRequest {name} is provisioned; waiting for the new nodes: "
                    + "; ".join(ready.waiting))
            await self.sync_status(wl, entry, Verdict(
                c.PENDING, predicates.message("capacity", text), "capacity"))
            return float(min(self.settings.node_poll_seconds,
                             max(1.0, self.settings.node_wait_seconds - waited)))
        try:
            wg = self.gang_of(wl)
        except fitcore.InputError as exc:
            return await self.sync_status(wl, entry, self.retry(
                entry, "configuration", "the workload cannot be read: "
                + "; ".join(str(e) for e in exc.errors)))
        started = time.perf_counter()
        scope = self.scope_of(wl)
        verified = await self.around_promises(wl, lambda held: self.inventory.verify_async(
            wg.gang, planned, node_filter=scope.node_filter if scope else None, held=held))
        if verified is None:
            return self.settings.promise_poll_seconds
        result = verified
        metrics.DECISION_SECONDS.labels(operation="verify").observe(
            time.perf_counter() - started)
        if result.verdict == "fits":
            metrics.request("verified")
            used = {p.node for p in result.placements}
            self._count_unused(request, planned, used, ready)
            node_shapes, _ = self.node_shapes()
            classes = {provisioning.provisioning_class(node_shapes[s.shape])
                       for s in planned.shapes if s.shape in node_shapes}
            cls = classes.pop() if len(classes) == 1 else str(
                (request.get("spec") or {}).get("provisioningClassName")
                or c.DEFAULT_PROVISIONING_CLASS)
            note = "" if ready.complete else (
                f" (after {int(waited)}s, " + "; ".join(ready.waiting) + ")")
            return await self.sync_ready(
                wl, entry, wg, result.placements, {},
                f"verified on the nodes of ProvisioningRequest {name}: "
                + _where(result.placements) + note,
                annotations={c.CONSUME_ANNOTATION: name, c.CLASS_ANNOTATION: cls})
        metrics.request("misfit" if result.verdict == "misfit" else "undecided")
        self._count_unused(request, planned, set(), ready)
        shown = list(result.mismatches[:3]) or list(result.reasons[:2])
        if not ready.complete:
            shown.insert(0, f"after waiting {int(waited)}s: " + "; ".join(ready.waiting))
        if result.verdict == "undecided":
            text = (f"fitgate could not decide within its work budget on the nodes of "
                    f"ProvisioningRequest {name}: " + "; ".join(shown))
            verdict = self.retry(entry, "configuration", text)
        else:
            text = (f"the new nodes of ProvisioningRequest {name} do not keep their shapes' "
                    "promise: " + ("; ".join(shown) or "the gang does not fit them")
                    + f" ({len(result.mismatches)} differences)")
            verdict = self.retry(entry, "coordination", text)
        wait = await self.sync_status(wl, entry, verdict)
        if result.verdict == "misfit":
            await self.recorder.record(wl, "Warning", "ProvisionedNodesMisfit",
                                       verdict.message, action="Verify")
            await self.sync_shape_mismatches(wl, name, planned, result, ready)
        await self.delete_request(request, "misfit")
        return wait

    def _count_unused(self, request: Mapping[str, Any], planned: fitcore.Plan, used: set[str],
                      ready: NodeReadiness | None = None) -> None:
        cond = kueue.condition(request, c.PROVISIONED)
        if cond is None or cond.get("status") != "True":
            return
        since = predicates.parse_time(cond.get("lastTransitionTime"))
        if since is None:
            return
        seconds = max(0.0, (self.clock.now() - since).total_seconds())
        ready = ready or self.readiness(request, planned)
        for shape_name, nodes in ready.new_nodes.items():
            idle = [n for n in nodes if n not in used]
            if idle and seconds:
                metrics.UNUSED_NODE_SECONDS.labels(shape=shape_name).inc(seconds * len(idle))

    async def sync_shape_mismatches(self, wl: client.Obj, request: str, planned: fitcore.Plan,
                                    result: fitcore.VerifyResult, ready: NodeReadiness) -> None:
        """Record on each planned NodeShape's status what its new nodes got wrong."""
        meta = _meta(wl)
        for shape_name in sorted({s.shape for s in planned.shapes}):
            mine = [d.message for d in result.details
                    if d.code == fitcore.reasons.SHAPE_MISMATCH and d.shape == shape_name]
            if not mine:
                continue
            metrics.VERIFICATION_MISMATCHES.labels(shape=shape_name).inc(len(mine))
            obj = self.stores.node_shapes.get(shape_name)
            if obj is None:
                continue
            have = ((obj.get("status") or {}).get("verification") or {}).get(
                "mismatchCount", 0)
            patch = {"status": {"verification": {
                "mismatchCount": (have if isinstance(have, int) else 0) + len(mine),
                "lastMismatch": {
                    "time": predicates.timestamp(self.clock.now()),
                    "workload": f"{meta.get('namespace')}/{meta.get('name')}",
                    "provisioningRequest": request,
                    "nodes": ready.new_nodes.get(shape_name, []),
                    "details": mine[:20]}}}}
            with contextlib.suppress(errors.NotFound):
                await self.api.patch(kinds.NODE_SHAPE, shape_name, patch,
                                     subresource="status")

    # ------------------------------------------------------------------- ready

    async def sync_ready(self, wl: client.Obj, entry: Mapping[str, Any],
                         wg: gangs.WorkloadGang, placements: Sequence[fitcore.Placement],
                         domains: Mapping[str, str], text: str,
                         annotations: Mapping[str, str] | None = None) -> float | None:
        updates = podsetupdates.build(wl, str(entry["name"]), wg, placements, domains,
                                      annotations)
        if updates.notes:
            log.info("pins given up to avoid collisions", notes=updates.notes,
                     workload=f"{_meta(wl).get('namespace')}/{_meta(wl).get('name')}")
        await self.sync_placements(wl, placements)
        meta = _meta(wl)
        per_node: dict[str, int] = {}
        for p in placements:
            per_node[p.node] = per_node.get(p.node, 0) + 1
        self._promised[str(meta.get("uid"))] = (str(meta.get("namespace") or ""), per_node,
                                                self.clock.monotonic())
        wait = await self.sync_status(wl, entry, Verdict(
            c.READY, predicates.message(None, text), None,
            pod_set_updates=updates.pod_set_updates))
        reserved = kueue.condition(wl, c.QUOTA_RESERVED)
        since = predicates.parse_time((reserved or {}).get("lastTransitionTime"))
        if since is not None:
            metrics.QUOTA_TO_READY.observe(max(0.0, (self.clock.now() - since).total_seconds()))
        return wait

    async def sync_placements(self, wl: client.Obj, placements: Sequence[fitcore.Placement]
                              ) -> None:
        """The gang's placements in fitcore's order, for the release controller: a
        ConfigMap named after the Workload's uid, owned by the Workload."""
        meta = _meta(wl)
        name = c.PLACEMENTS_PREFIX + str(meta.get("uid"))
        data = {c.PLACEMENTS_KEY: json.dumps(
            [{"podSet": p.pod_set, "index": p.index, "node": p.node} for p in placements],
            separators=(",", ":"))}
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": meta.get("namespace"),
                             "labels": {c.MANAGED_LABEL: "fitgate",
                                        c.WORKLOAD_UID_LABEL: str(meta.get("uid"))},
                             "annotations": {c.WORKLOAD_ANNOTATION:
                                             f"{meta.get('namespace')}/{meta.get('name')}"},
                             "ownerReferences": [{
                                 "apiVersion": kinds.WORKLOAD.api_version,
                                 "kind": "Workload", "name": meta.get("name"),
                                 "uid": meta.get("uid")}]},
                "data": data}
        try:
            await self.api.create(kinds.CONFIG_MAP, body)
        except errors.AlreadyExists:
            await self.api.patch(kinds.CONFIG_MAP, name, {"data": data},
                                 namespace=meta.get("namespace"))

    # ------------------------------------------------------------------ status

    async def sync_status(self, wl: client.Obj, entry: Mapping[str, Any], verdict: Verdict
                          ) -> float | None:
        """Apply our entry if it changes; returns the requeue of a Retry (None)."""
        if not predicates.may_write(wl, verdict.state):
            log.info("not writing while evicted or finished", state=verdict.state)
            return None
        desired = predicates.desired_entry(entry, verdict, self.clock.now())
        if not predicates.changed(entry, desired):
            return None
        meta = _meta(wl)
        await self.api.apply(kinds.WORKLOAD, {
            "apiVersion": kinds.WORKLOAD.api_version, "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "resourceVersion": meta.get("resourceVersion")},
            "status": {"admissionChecks": [desired]}},
            field_manager=c.FIELD_MANAGER, subresource="status", force=True)
        metrics.decision(verdict.state, verdict.category)
        log.info("check updated", check=entry["name"], state=verdict.state,
                 message=verdict.message,
                 workload=f"{meta.get('namespace')}/{meta.get('name')}")
        return None

    # ----------------------------------------------------------------- cleanup

    def requests_of(self, wl: client.Obj, check: str | None = None) -> list[client.Obj]:
        meta = _meta(wl)
        uid = str(meta.get("uid", ""))
        out = []
        for r in self.stores.provisioning_requests.list(meta.get("namespace")):
            labels = _meta(r).get("labels") or {}
            if labels.get(c.WORKLOAD_UID_LABEL) != uid:
                continue
            if check is not None and labels.get(c.CHECK_LABEL) != provisioning.label_value(
                    check):
                continue
            out.append(r)
        return out

    async def sync_cleanup(self, namespace: str, name: str, keep_uid: str | None,
                           uid: str | None = None) -> None:
        """Delete fitgate's requests and templates for the Workload `namespace/name`
        except those of the live Workload `keep_uid` (None: delete them all)."""
        wanted = f"{namespace}/{name}"
        for r in list(self.stores.provisioning_requests.list(namespace)):
            meta = _meta(r)
            labels = meta.get("labels") or {}
            if labels.get(c.MANAGED_LABEL) != "fitgate":
                continue
            if (meta.get("annotations") or {}).get(c.WORKLOAD_ANNOTATION) != wanted and \
                    labels.get(c.WORKLOAD_UID_LABEL) != uid:
                continue
            if keep_uid is not None and labels.get(c.WORKLOAD_UID_LABEL) == keep_uid:
                continue
            await self.delete_request(r, "workload gone, finished or evicted")
        for t in list(self.stores.pod_templates.list(namespace)):
            meta = _meta(t)
            labels = meta.get("labels") or {}
            if labels.get(c.MANAGED_LABEL) != "fitgate" or labels.get(
                    c.WORKLOAD_NAME_LABEL) != provisioning.label_value(name):
                continue
            if keep_uid is not None and labels.get(c.WORKLOAD_UID_LABEL) == keep_uid:
                continue
            await self._delete(kinds.POD_TEMPLATE, meta["name"], namespace)

    async def delete_request(self, request: Mapping[str, Any], why: str) -> None:
        meta = _meta(request)
        namespace = str(meta.get("namespace"))
        if await self._delete(kinds.PROVISIONING_REQUEST, str(meta["name"]), namespace):
            metrics.request("deleted")
            log.info("deleted ProvisioningRequest", request=meta["name"], why=why)
        for t in provisioning.template_names(request):
            await self._delete(kinds.POD_TEMPLATE, t, namespace)

    async def _delete(self, kind: kinds.Kind, name: str, namespace: str) -> bool:
        try:
            await self.api.delete(kind, name, namespace)
            return True
        except errors.NotFound:
            return False


def _attempt_label(request: Mapping[str, Any]) -> int:
    raw = (_meta(request).get("labels") or {}).get(c.ATTEMPT_LABEL, "0")
    return int(raw) if str(raw).isdigit() else 0


# Taints a new node carries until it is ready for work: the node lifecycle controller
# removes not-ready/unreachable a moment after the Ready condition turns True, the cloud
# provider removes uninitialized, and the cluster-autoscaler's startup-taint conventions
# are removed by whoever set them up. Verifying while one is on would judge the node by
# a state it is about to leave.
_STARTUP_TAINTS = frozenset({
    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
    "node.kubernetes.io/network-unavailable", "node.cloudprovider.kubernetes.io/uninitialized"})
_STARTUP_TAINT_PREFIXES = ("startup-taint.cluster-autoscaler.kubernetes.io/",
                           "ignore-taint.cluster-autoscaler.kubernetes.io/")


def _int(text: Any) -> int:
    return int(text) if isinstance(text, str) and text.isdigit() else 0


def _created_since(node: Mapping[str, Any], since: Any) -> bool:
    created = predicates.parse_time(_meta(node).get("creationTimestamp"))
    return since is None or (created is not None and created >= since)


def _node_ready(node: Mapping[str, Any] | None) -> bool:
    """Ready, and carrying none of the taints of a node still starting."""
    if node is None or not kueue.is_true(node, "Ready"):
        return False
    for taint in (node.get("spec") or {}).get("taints") or ():
        key = str((taint or {}).get("key") or "")
        if key in _STARTUP_TAINTS or key.startswith(_STARTUP_TAINT_PREFIXES):
            return False
    return True


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _where(placements: Sequence[fitcore.Placement]) -> str:
    nodes = sorted({p.node for p in placements})
    shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    return f"{len(placements)} pods on {len(nodes)} nodes ({shown})"


# Keys of the Workloads a change of another object concerns, for the controller runtime.

def workload_of_request(obj: Mapping[str, Any]) -> store.Key | None:
    """The Workload a fitgate ProvisioningRequest or PodTemplate was made for."""
    meta = _meta(obj)
    ref = (meta.get("annotations") or {}).get(c.WORKLOAD_ANNOTATION)
    if (meta.get("labels") or {}).get(c.MANAGED_LABEL) != "fitgate" or not ref:
        return None
    namespace, _, name = str(ref).partition("/")
    return (namespace, name)


def waiting_for_nodes(workloads: store.Store, requests: store.Store) -> list[store.Key]:
    """Workloads whose request is Provisioned: a Node or ResourceSlice change may be the
    one they wait for."""
    out = []
    for r in requests.list():
        if provisioning.state(r)[0] == "provisioned":
            key = workload_of_request(r)
            if key is not None and workloads.get(key[1], key[0]) is not None:
                out.append(key)
    return out


Reconcile = Callable[[str], Awaitable["float | None"]]


def component(ctx: context.Context) -> context.Component:
    """For `admission.app.components`: the Workload reconciler and the pod release controller
    (both leader only)."""
    settings = Settings(node_wait_seconds=int(ctx.config.provisioning_wait),
                        request_timeout_seconds=ctx.config.provisioning_timeout)
    stores = Stores.of({k: ctx.informers.store(k) for k in (
        kinds.WORKLOAD, kinds.ADMISSION_CHECK, kinds.RESOURCE_FLAVOR,
        kinds.RESOURCE_CLAIM_TEMPLATE, kinds.PROVISIONING_REQUEST, kinds.POD_TEMPLATE,
        kinds.NODE, kinds.RESOURCE_SLICE, kinds.NODE_SHAPE, kinds.RESOURCE_CLAIM,
        kinds.FIT_POLICY, kinds.NAMESPACE, kinds.CLUSTER_QUEUE, kinds.POD)})
    return context.Component(controllers=[
        WorkloadReconciler(ctx.api, stores, ctx.inventory, clock=ctx.clock,
                           settings=settings, idle=ctx.idle_engine()),
        release.ReleaseController(ctx.api, ctx.informers.store(kinds.POD))])
