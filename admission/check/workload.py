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
is not fitgate's (`sync_not_ours`), and, on one pass's view (`inputs.Pass`: the NodeShapes
parsed once, node owners scanned once), runs named `sync_*` steps per check; each step
decides with pure functions (`predicates`, `podsetupdates`, `provisioning`) and ends in
`sync_status`, which writes the entry only if it changed. The steps live by job: planning
and Ready here; asking the autoscaler for nodes, following the request and verifying what
came in `capacity`; which nodes are held for which gang in `ledger`; whether new nodes
are ready in `readiness`. Only our own
entry of `status.admissionChecks` is written, with server-side apply as fitgate's field
manager and the resourceVersion fitgate decided on (a Workload that changed meanwhile,
say was evicted, makes the write fail and the key is reconciled again). Retry and Rejected
are never written while the Workload is Evicted or Finished (kueue#3543).

Restart safety: request names are deterministic per (workload, check, attempt, plan
index), the plan is an annotation on the request, and node readiness is recomputed from
the API, so a second reconciler over the same state finds what the first created.
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import structlog

import fitcore
from admission import clock as clock_
from admission import constants as c
from admission import context, kueue
from admission.check import (
    backends,
    capacity,
    containment,
    inputs,
    karpenter,
    ledger,
    podsetupdates,
    predicates,
    promises,
    provisioning,
    readiness,
    requests,
    topology,
)
from admission.check.predicates import Verdict
from admission.engine import fitting, gangs
from admission.kube import client, errors, kinds
from admission.policy import fitpolicy as policy
from admission.release import reconciler as release
from admission.runtime import events, failpoint, metrics, workqueue

log = structlog.get_logger(__name__)

#: The pass `reconcile` is in (per asyncio task: the runtime reconciles several keys at
#: once, each in its own task, so each sees its own pass).
_PASS: contextvars.ContextVar[inputs.Pass | None] = contextvars.ContextVar(
    "fitgate_check_pass", default=None)


_Decided = TypeVar("_Decided", fitcore.PlanResult, fitcore.VerifyResult)


class WorkloadReconciler:
    def __init__(self, api: client.Client, stores: inputs.Stores, inventory: inputs.Inventory, *,
                 clock: clock_.Clock | None = None, settings: inputs.Settings | None = None,
                 recorder: events.Recorder | None = None,
                 idle: fitting.Engine | None = None) -> None:
        self.api = api
        # The gate's question, "could the gang ever fit as configured?" (an engine over
        # the idle cluster), asked before a gang is Rejected (see `never_fits`).
        self.idle = idle
        self.stores, self.inventory = stores, inventory
        self.clock = clock or clock_.SystemClock()
        self.settings = settings or inputs.Settings()
        self._idle_questions = containment.Bounded(self.settings.decision_timeout_seconds)
        self.recorder = recorder or events.Recorder(api, self.clock)
        self._finished: set[str] = set()  # uids whose placements were deleted
        self.own_writes = inputs.OwnWrites(self.clock)
        self.ledger = ledger.NodeLedger(stores, self.clock, self.settings.promise_seconds,
                                        inventory)
        # Promises an earlier leader made, read back from what it persisted (promises.py).
        self._recovery = promises.Recovery(api, stores.workloads, stores.admission_checks,
                                           self.clock, self.settings.promise_seconds)
        self.policies = (policy.Policies(stores.fit_policies)
                         if stores.fit_policies is not None else None)
        # Who adds the nodes a plan needs (admission.check.backends): ProvisioningRequests,
        # and NodeClaims for shapes Karpenter serves.
        self.requests = requests.ProvisioningRequestBackend(self)
        self.karpenter = karpenter.KarpenterBackend(self)
        self.backends: tuple[backends.Backend, ...] = (self.requests, self.karpenter)
        self.watches = (*type(self).watches, *[k for k, s in (
            (kinds.NODE_CLAIM, stores.node_claims), (kinds.POD, stores.pods)) if s is not None])

    # ------------------------------------------------------------------ pipeline

    # The controller runtime's interface (admission.runtime.workqueue).
    name = "workload"
    leader_only = True
    watches: tuple[kinds.Kind, ...] = (kinds.WORKLOAD, kinds.ADMISSION_CHECK,
                                       kinds.PROVISIONING_REQUEST, kinds.NODE,
                                       kinds.RESOURCE_SLICE)

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        """The Workloads an event concerns."""
        obj = event.object
        if kind == kinds.WORKLOAD:
            names = kueue.ours(self.stores.admission_checks.list())
            if event.type == "DELETED" or kueue.entries(obj, names) or (
                    before is not None and kueue.entries(before, names)):
                return [workqueue.key_of(obj)]
            return []
        if kind == kinds.ADMISSION_CHECK:
            if not kueue.ours([obj]):
                return []
            check = _meta(obj).get("name")
            return [workqueue.key_of(wl) for wl in self.stores.workloads.list()
                    if any(e.get("name") == check
                           for e in (wl.get("status") or {}).get("admissionChecks") or [])]
        if kind == kinds.POD:  # a bound pod may end a promise others wait for
            return self.ledger.woken(obj)
        if kind in (kinds.PROVISIONING_REQUEST, kinds.POD_TEMPLATE, kinds.NODE_CLAIM):
            key = ledger.workload_of_request(obj)
            return [f"{key[0]}/{key[1]}"] if key else []
        # A Node or ResourceSlice: the Workloads waiting for provisioned nodes.
        return [f"{ns}/{name}" for ns, name in sorted(set(ledger.waiting_for_nodes(
            self.stores.workloads, self.ledger.provisioned))
            | set(self.karpenter.waiting()))]

    async def reconcile(self, key: str) -> float | None:
        """Bring one Workload's fitgate checks up to date; returns seconds until the key
        should be looked at again (None: when something changes). fetch (the store) →
        skip what is not ours to decide (`sync_not_ours`) → per check, on one pass's view
        of the NodeShapes and node owners, the entry it should have, written only if it
        changed (`sync_check`, ending in `sync_status`)."""
        ns, name = workqueue.split(key)
        namespace = ns or ""
        wl = self.stores.workloads.get(name, namespace)
        if self.own_writes.stale(key, wl):  # our last write's event is on its way
            return self.own_writes.grace_seconds
        if wl is None:
            await self.sync_cleanup(namespace, name, keep_uid=None)
            return None
        mine = kueue.entries(wl, kueue.ours(self.stores.admission_checks.list()))
        if kueue.finished(wl) or kueue.evicted(wl) or not mine:
            await self.sync_not_ours(wl, bool(mine))
            return None
        await self.sync_cleanup(namespace, name, keep_uid=_meta(wl).get("uid"))
        await self._recovery.into(self.ledger._promised)
        token = _PASS.set(inputs.read_pass(self.stores))
        try:
            return await self.sync_checks(wl, mine)
        finally:
            _PASS.reset(token)

    async def sync_not_ours(self, wl: client.Obj, had_checks: bool) -> None:
        """A finished or evicted Workload, or one without our checks: its requests and
        templates deleted; a finished one's placements too."""
        meta = _meta(wl)
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name"))
        uid = str(meta.get("uid") or "")
        if had_checks and kueue.evicted(wl):
            await topology.steer(self.api, wl)  # after a Retry on Kueue's TAS domain
        await self.sync_cleanup(namespace, name, keep_uid=None, uid=uid)
        if had_checks and kueue.finished(wl) and uid not in self._finished:
            # The placements outlive an eviction (the next Ready overwrites them) but
            # not the run: delete them once (the Workload's deletion would too).
            self._finished.add(uid)
            await capacity.delete(self, kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, namespace)

    async def sync_checks(self, wl: client.Obj, mine: Sequence[Mapping[str, Any]]
                          ) -> float | None:
        """Each of our checks on the Workload; the soonest requeue."""
        bound = log.bind(workload=f"{_meta(wl).get('namespace')}/{_meta(wl).get('name')}")
        waits: list[float] = []
        for entry in mine:
            try:
                wait = await self.sync_check(wl, entry)
            except errors.Conflict:
                bound.debug("workload changed while deciding; again", check=entry["name"])
                wait = 1.0
            except Exception as exc:  # this Workload's failure only (containment.py)
                wait = await containment.contain(self, wl, entry, exc)
            if wait is not None:
                waits.append(wait)
        return min(waits) if waits else None

    async def sync_check(self, wl: client.Obj, entry: Mapping[str, Any]) -> float | None:
        check = str(entry["name"])
        attempt = provisioning.attempt_of(entry)
        state = entry.get("state")
        active: tuple[backends.Backend, list[client.Obj]] | None = None
        for backend in self.backends:
            held = backend.held(wl, check)
            keep = [o for o in held if backend.attempt_of(o) == attempt]
            if state in (c.RETRY, c.REJECTED):
                keep = []  # the check is being retried or gave up: its objects are done
            for o in held:
                if o not in keep:
                    await backend.release(o, "check retried")
            if keep and active is None:
                active = (backend, keep)
        if state == c.READY:
            waits = [w for b in self.backends if (w := await b.admitted(wl, check)) is not None]
            return min(waits) if waits else None
        if state != c.PENDING or not kueue.quota_reserved(wl):
            return None
        if active is None:
            return await self.sync_plan(wl, entry, attempt)
        return await active[0].follow(wl, entry, attempt, active[1])

    async def sync_cleanup(self, namespace: str, name: str, keep_uid: str | None,
                           uid: str | None = None) -> None:
        """Release what every backend holds for the Workload `namespace/name` except what
        the live Workload `keep_uid` holds (None: all)."""
        for backend in self.backends:
            await backend.cleanup(namespace, name, keep_uid, uid)

    # -------------------------------------------------------------------- plan

    async def around_promises(self, wl: client.Obj, gang: fitcore.Gang,
                              decide: Callable[[Collection[str]], Awaitable[_Decided]]
                              ) -> _Decided | None:
        """`decide(held)` with the nodes held for other gangs left out (its own promise is
        over: `ledger.drop`); None when it would have gone otherwise without the nodes
        promised to gangs still binding: the gang waits for them (`ledger.woken`)."""
        self.ledger.drop(str(_meta(wl).get("uid")))
        result = await decide(self.held_for_others(wl, gang))
        if result.verdict == "fits" or not self.ledger.promised_nodes(str(_meta(wl).get("uid"))):
            return result
        free = await decide(())
        if free.verdict == result.verdict:
            return result
        metrics.PROMISE_WAITS.inc()
        self.ledger.wait(key := workqueue.key_of(wl), {p.node for p in free.placements})
        log.debug("waiting for promised nodes to bind", workload=key)
        return None

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
                             namespace_labels=ledger.labels(ns),
                             cluster_queue=cq_name if isinstance(cq_name, str) else None,
                             cluster_queue_labels=ledger.labels(cq))
        return scope if scope.restricted else None

    def gang_of(self, wl: client.Obj) -> gangs.WorkloadGang:
        """The Workload's gang; held to the domains Kueue's topology-aware scheduling
        assigned, when it did (`topology.within_assignment`)."""
        return topology.within_assignment(gangs.gang_of(
            wl, templates=self.stores.claim_templates, flavors=self.stores.resource_flavors,
            claims=self.stores.claims), wl, self.ledger.node_labels)

    async def sync_plan(self, wl: client.Obj, entry: Mapping[str, Any], attempt: int
                        ) -> float | None:
        try:
            wg = self.gang_of(wl)
        except fitcore.InputError as exc:
            return await self.sync_status(wl, entry, self.retry(
                entry, "configuration", "the workload cannot be read: "
                + "; ".join(str(e) for e in exc.errors)))
        if isinstance(wg, topology.TasGang):
            return await topology.sync_plan(self, wl, entry, wg, attempt)
        started, scope, inv = time.perf_counter(), self.scope_of(wl), self.inventory
        decided = await self.around_promises(wl, wg.gang, lambda held: inv.plan_async(
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
                                         + capacity.where(result.placements))
        if result.verdict == "needs-capacity" and result.plan is not None:
            failpoint.reach("planned")
            return await capacity.sync_new_request(self, wl, entry, wg, attempt, 0, result.plan,
                                               list(result.alternatives),
                                               why=list(result.reasons))
        if result.verdict == "unsatisfiable" and result.category == "configuration" \
                and await self.never_fits(wg.gang, scope):
            return await self.sync_status(wl, entry, Verdict(
                c.REJECTED, predicates.message("configuration", "the gang can never fit: "
                                               + "; ".join(result.reasons)),
                "configuration"))
        if result.verdict == "undecided":
            undecided = self.retry(
                entry, "configuration", "fitgate could not decide within its work budget "
                "(the gang's device requests are too many or too alike to search): "
                + "; ".join(result.reasons))
            wait = await self.sync_status(wl, entry, undecided)
            await self.recorder.record(wl, "Warning", containment.UNDECIDED, undecided.message)
            return wait
        return await self.sync_status(wl, entry, self.retry(
            entry, "capacity", "does not fit now, and the node shapes' limits allow no plan: "
            + "; ".join(result.reasons)))

    def this_pass(self) -> inputs.Pass:
        """The current pass's view (outside `reconcile`, e.g. in a test: a new one)."""
        return _PASS.get() or inputs.read_pass(self.stores)

    def node_shapes(self) -> tuple[dict[str, fitcore.NodeShape], list[str]]:
        """The NodeShapes parsed once for this pass, and the problems of those that do
        not parse."""
        p = self.this_pass()
        return p.node_shapes, p.shape_problems

    def node_owners(self) -> inputs.Owners:
        """New nodes fitgate's requests brought, scanned once for this pass
        (`ledger.NodeLedger.node_owners`)."""
        p = self.this_pass()
        if p.owners is None:
            p.owners = self.ledger.node_owners(p.node_shapes)
        return p.owners

    def held_for_others(self, wl: client.Obj, gang: fitcore.Gang | None = None) -> set[str]:
        """Nodes the gang may not take now: promised to gangs whose pods are binding (those
        the `gang` may share aside), or brought by other gangs' requests or NodeClaims."""
        return self.ledger.held_for_others(wl, self.node_owners(), gang) \
            | self.karpenter.claimed_nodes(str(_meta(wl).get("uid")))

    def readiness(self, request: Mapping[str, Any], planned: fitcore.Plan
                  ) -> readiness.NodeReadiness:
        """The plan's new nodes Ready with their slices (`readiness.of`)."""
        return readiness.of(self.stores, request, planned, self.node_shapes()[0],
                            self.node_owners())

    async def never_fits(self, gang_: fitcore.Gang, scope: policy.Scope | None) -> bool:
        """Whether the gang fits no node and no shape even with nothing running: only then
        is it Rejected (which deactivates the Workload). On the real usage, a pod that no
        node can host *now* (its nodes busy, or promised to gangs still binding) also
        reads as "configuration"; on the idle cluster it is a matter of capacity, retried.
        Without an idle engine, the real usage's answer stands."""
        if self.idle is None:
            return True
        idle = await self._idle_questions.ask(  # one at a time, bounded (containment.py)
            self.idle.plan, gang_, scope.shapes if scope else None,
            scope.node_filter if scope else None)
        return idle is not None and idle.verdict == "unsatisfiable" \
            and idle.category == "configuration"

    def retry(self, entry: Mapping[str, Any], category: predicates.Category, text: str
              ) -> Verdict:
        retries = provisioning.attempt_of(entry) - 1
        wait = predicates.backoff(retries, self.settings.backoff_base_seconds,
                                  self.settings.backoff_max_seconds)
        return Verdict(c.RETRY, predicates.message(category, f"{text} (retry in {wait}s)"),
                       category, requeue_after=wait)

    # ------------------------------------------------------------------- ready

    async def sync_ready(self, wl: client.Obj, entry: Mapping[str, Any],
                         wg: gangs.WorkloadGang, placements: Sequence[fitcore.Placement],
                         domains: Mapping[str, str], text: str,
                         annotations: Mapping[str, str] | None = None) -> float | None:
        wg, placements, domains = topology.unsplit(wg, placements, domains)
        labels = self.ledger.node_labels({p.node for p in placements})
        hostnames = {p.node: h for p in placements
                     if (h := labels.get(p.node, {}).get(c.HOSTNAME_LABEL)) and h != p.node}
        updates = podsetupdates.build(wl, str(entry["name"]), wg, placements, domains,
                                      annotations, hostnames)
        if updates.notes:
            log.info("pins given up to avoid collisions", notes=updates.notes,
                     workload=f"{_meta(wl).get('namespace')}/{_meta(wl).get('name')}")
        await self.sync_placements(wl, placements)
        self.ledger.promise(wl, placements, wg.gang)
        self._recovery.made(str(_meta(wl).get("uid")))
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
        """The gang's placements in fitcore's order, for the release controller (and a new
        leader: `promises.Recovery`): a ConfigMap named after the Workload's uid."""
        body = promises.placements_config_map(wl, placements)
        try:
            await self.api.create(kinds.CONFIG_MAP, body)
        except errors.AlreadyExists:
            await self.api.patch(kinds.CONFIG_MAP, body["metadata"]["name"],
                                 {"data": body["data"]},
                                 namespace=body["metadata"]["namespace"])

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
        self.own_writes.wrote(workqueue.key_of(wl), wl)
        metrics.decision(verdict.state, verdict.category)
        log.info("check updated", check=entry["name"], state=verdict.state,
                 message=verdict.message,
                 workload=f"{meta.get('namespace')}/{meta.get('name')}")
        return None


def component(ctx: context.Context) -> context.Component:
    """For `admission.app.components`: the Workload reconciler and the pod release controller
    (both leader only)."""
    settings = inputs.Settings(node_wait_seconds=int(ctx.config.provisioning_wait),
                               request_timeout_seconds=ctx.config.provisioning_timeout,
                               decision_timeout_seconds=ctx.config.decision_timeout)
    karpenter_kinds = (kinds.NODE_CLAIM, kinds.NODE_POOL) if ctx.config.karpenter else ()
    stores = inputs.Stores.of({k: ctx.informers.store(k) for k in (
        kinds.WORKLOAD, kinds.ADMISSION_CHECK, kinds.RESOURCE_FLAVOR,
        kinds.RESOURCE_CLAIM_TEMPLATE, kinds.PROVISIONING_REQUEST, kinds.POD_TEMPLATE,
        kinds.NODE, kinds.RESOURCE_SLICE, kinds.NODE_SHAPE, kinds.RESOURCE_CLAIM,
        kinds.FIT_POLICY, kinds.NAMESPACE, kinds.CLUSTER_QUEUE, kinds.POD, *karpenter_kinds)})
    metrics.STATE.watch(stores.workloads, stores.admission_checks,
                        stores.provisioning_requests, lambda: ctx.clock.now().timestamp())
    return context.Component(controllers=[
        WorkloadReconciler(ctx.api, stores, ctx.inventory, clock=ctx.clock,
                           settings=settings, idle=ctx.idle_engine()),
        release.ReleaseController(ctx.api, ctx.informers.store(kinds.POD),
                                  ctx.informers.store(kinds.NODE))])


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}
