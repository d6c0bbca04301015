"""The gate controller: Workloads that wait for fitgate before Kueue may reserve quota.

The webhook adds `fitgate.io/topology-fit` to `kueue.x-k8s.io/admission-gated-by` on the
job at CREATE; Kueue copies it to the Workload and keeps the Workload out of admission
while it is there. For each such Workload the gate asks fitcore whether its gang could fit
on the existing nodes or on new nodes of the NodeShapes, within what its FitPolicy allows
(`component` gives it an engine over the idle cluster: could the gang ever fit as
configured? Busy nodes are the check's to plan for, once Kueue has reserved quota):

    fetch the Workload (store) → skip what is not gated by us → find the owning job
    → read the gang → scope it by FitPolicy → plan → sync_ungate or sync_held

- Satisfiable (fits now, or needs new nodes a shape offers), or undecided, or unreadable:
  `sync_ungate` removes only our entry from the OWNING job's annotation (the job is the
  source of truth; Kueue then removes it from the Workload), with a JSONPatch that tests
  the value it read, so a concurrent change is retried, never overwritten. The check then
  decides with the full engine (availability first: an unreadable gang is the check's to
  report).
- The Workload's ClusterQueue no longer uses fitgate's check: `sync_ungate` too (the gate
  would otherwise never be lifted).
- Unsatisfiable: `sync_held` keeps the gate, writes the verdict as JSON to the job's
  `fitgate.io/explanation` annotation (what `fitgate explain` reads) and records an Event
  on the Workload and on the job, both only when the verdict changed.

It is a controller of the reconcile runtime (`admission.runtime.workqueue`): leader-only, keys
`namespace/name` of Workloads. Re-evaluation: a Workload event yields that Workload when
it is gated by us and changed what the gate reads of it; a change of Nodes,
ResourceSlices, DeviceClasses, NodeShapes, FitPolicies, Namespaces or
ResourceClaimTemplates yields every Workload the gate holds (events that cannot change a
decision, a status write or a Node's heartbeat, are left out: `triggers`). A gang held
for capacity (every pod fits somewhere, but not all within the shapes' limits) is also
re-checked after `capacity_recheck` seconds, since running work may finish.
`reconcile(key)` returns seconds after which to look again, or None.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import structlog

import fitcore
from admission import clock as clock_
from admission.engine import fitting
from admission.gate import predicates as gating
from admission.gate import triggers
from admission.kube import client, errors, kinds, store
from admission.policy import fitpolicy as policy
from admission.runtime import events, handoff, metrics, workqueue

log = structlog.get_logger("fitgate.gate")
_MAX_REASONS = 20


@dataclasses.dataclass(frozen=True)
class GateConfig:
    job_kinds: tuple[kinds.Kind, ...] = gating.DEFAULT_JOB_KINDS
    gate: str = gating.GATE
    controller: str = gating.CONTROLLER_NAME
    #: Seconds after which a gang held for capacity is checked again.
    capacity_recheck: float = 60.0
    #: Seconds after which a write that lost a race is tried again.
    conflict_retry: float = 1.0
    instance: str = "fitgate"
    #: Seconds a decision may take; past it, or when it raises, the gate is removed and
    #: the AdmissionCheck decides (the failure stays with this Workload).
    decision_timeout: float = 30.0


def explanation(verdict: fitting.Verdict, scope: policy.Scope, workload: str,
                evaluated_at: datetime.datetime) -> dict[str, Any]:
    """The held verdict as `fitgate explain` reads it from the job."""
    result = verdict.result
    return {
        "gate": gating.GATE,
        "workload": workload,
        "verdict": result.verdict if result else "unsatisfiable",
        "category": result.category if result else None,
        "policyViolation": verdict.violation,
        "policies": list(scope.applied),
        "allowed": scope.description,
        "reasons": list(verdict.messages)[:_MAX_REASONS],
        "rejectedShapes": [{"shape": n, "reason": why}
                           for n, why in (result.rejected if result else ())][:_MAX_REASONS],
        "evaluatedAt": evaluated_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return ({k: v for k, v in a.items() if k != "evaluatedAt"}
            == {k: v for k, v in b.items() if k != "evaluatedAt"})


#: The stores whose changes may change a held gang's verdict.
INVENTORY = (kinds.NODE, kinds.RESOURCE_SLICE, kinds.DEVICE_CLASS, kinds.NODE_SHAPE,
             kinds.FIT_POLICY, kinds.NAMESPACE, kinds.RESOURCE_CLAIM_TEMPLATE)


class GateController:
    """See the module docstring."""

    name = "gate"
    leader_only = True
    watches: tuple[kinds.Kind, ...] = (kinds.WORKLOAD, *INVENTORY)

    def __init__(self, api: client.Client, stores: Mapping[kinds.Kind, store.Store],
                 engine: fitting.Engine, *, config: GateConfig | None = None,
                 clock: clock_.Clock | None = None) -> None:
        self.api = api
        self.stores = dict(stores)
        for kind in (kinds.WORKLOAD, kinds.LOCAL_QUEUE, kinds.CLUSTER_QUEUE,
                     kinds.ADMISSION_CHECK, kinds.NAMESPACE, kinds.FIT_POLICY,
                     kinds.NODE_SHAPE, kinds.RESOURCE_CLAIM_TEMPLATE, kinds.RESOURCE_CLAIM):
            self.stores.setdefault(kind, store.Store(kind))
        self.engine = engine
        self.config = config or GateConfig()
        self.clock = clock or clock_.SystemClock()
        self.queues = gating.Queues(self.stores[kinds.LOCAL_QUEUE],
                                    self.stores[kinds.CLUSTER_QUEUE],
                                    self.stores[kinds.ADMISSION_CHECK],
                                    self.config.controller)
        self.policies = policy.Policies(self.stores[kinds.FIT_POLICY])
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="fitgate-gate-engine")
        self.held: set[str] = set()  # keys of the Workloads the gate holds

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ triggers

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        """The Workloads whose verdict an event may change (see the module docstring)."""
        if kind == kinds.WORKLOAD:
            key = workqueue.key_of(event.object)
            if event.type == "DELETED":
                self.held.discard(key)
            elif gating.gated_by_us(event.object, self.config.gate) and \
                    triggers.workload_changed(event, before):  # not a status write
                yield key
            return
        if triggers.inventory_changed(kind, event, before):  # not a heartbeat (triggers)
            yield from sorted(self.held)

    # ----------------------------------------------------------------- reconcile

    async def reconcile(self, key: str) -> float | None:
        ns, name = workqueue.split(key)
        namespace = ns or ""
        wl = self.stores[kinds.WORKLOAD].get(name, namespace)
        if wl is None or not gating.gated_by_us(wl, self.config.gate):
            self.held.discard(key)
            return None
        bound = log.bind(workload=f"{namespace}/{name}")
        found = gating.owner(wl, self.config.job_kinds)
        if found is None:
            bound.warning("gated by fitgate but owned by no job kind fitgate knows; "
                          "the gate stays (remove it from the Workload's owner)")
            return None
        job_kind, job_name = found
        queue = self._queue(wl, namespace)
        if queue is not None and queue.cluster_queue is not None and not queue.ours and \
                self.stores[kinds.CLUSTER_QUEUE].get(queue.cluster_queue) is not None:
            return await self.sync_ungate(
                key, job_kind, job_name, wl, f"fitgate: ClusterQueue {queue.cluster_queue} "
                "no longer uses fitgate's AdmissionCheck; removed its gate")
        try:
            gang_ = fitting.gang_of(wl, self.stores)
        except fitcore.InputError as exc:
            bound.info("gang unreadable; leaving it to the AdmissionCheck", error=str(exc))
            return await self.sync_ungate(key, job_kind, job_name, wl,
                                          f"fitgate cannot read the gang: {exc}")
        scope = self._scope(wl, namespace)
        try:
            verdict = await asyncio.wait_for(
                handoff.run(self._executor, self._decide, gang_, scope),
                self.config.decision_timeout)
        except Exception as exc:  # contained to this Workload: the AdmissionCheck decides
            why = (f"took longer than {self.config.decision_timeout:g} s"
                   if isinstance(exc, TimeoutError) else f"failed: {type(exc).__name__}: {exc}")
            bound.warning("gate decision failed; leaving it to the AdmissionCheck", why=why)
            return await self.sync_ungate(key, job_kind, job_name, wl,
                                          f"fitgate's decision before quota {why}; removed "
                                          "its gate, the AdmissionCheck decides")
        result = verdict.result
        if result is None or result.verdict != "unsatisfiable":
            return await self.sync_ungate(key, job_kind, job_name, wl, None)
        return await self.sync_held(key, job_kind, job_name, wl, verdict, scope)

    def _decide(self, gang_: fitcore.Gang, scope: policy.Scope) -> fitting.Verdict:
        verdict = fitting.decide(self.engine, gang_, scope)
        if verdict.result is not None and verdict.result.verdict == "unsatisfiable" \
                and not verdict.messages:
            # Held for capacity: decide() refuses only configuration; say why anyway.
            return fitting.Verdict(False, verdict.violation, verdict.result.reasons,
                                  verdict.result)
        return verdict

    def _queue(self, wl: client.Obj, namespace: str) -> gating.Queue | None:
        spec = wl.get("spec") if isinstance(wl.get("spec"), Mapping) else {}
        assert isinstance(spec, Mapping)
        lq = spec.get("queueName")
        return self.queues.resolve(namespace, lq) if isinstance(lq, str) and lq else None

    def _scope(self, wl: client.Obj, namespace: str) -> policy.Scope:
        queue = self._queue(wl, namespace)
        ns = self.stores[kinds.NAMESPACE].get(namespace)
        ns_labels = {str(k): str(v) for k, v in gating.labels_of(ns).items()} if ns else {}
        policies, bad = self.policies.current()
        for err in bad:
            log.warning("FitPolicy ignored", error=str(err))
        return policy.scope(policies, self.stores[kinds.NODE_SHAPE].list(),
                            namespace=namespace, namespace_labels=ns_labels,
                            cluster_queue=queue.cluster_queue if queue else None,
                            cluster_queue_labels=queue.cluster_queue_labels if queue else {})

    # -------------------------------------------------------------------- writes

    async def sync_ungate(self, key: str, job_kind: kinds.Kind, job_name: str,
                          wl: client.Obj, why: str | None) -> float | None:
        namespace, _ = workqueue.split(key)
        self.held.discard(key)
        try:
            job = await self.api.get(job_kind, job_name, namespace)
        except errors.NotFound:
            return None
        ops = gating.remove_gate_patch(job, self.config.gate)
        if not ops:
            return None
        if gating.EXPLANATION in gating.annotations_of(job):
            ops.append({"op": "remove", "path": "/metadata/annotations/"
                                                + gating.escape_pointer(gating.EXPLANATION)})
        try:
            await self.api.patch(job_kind, job_name, ops, namespace=namespace,
                                 patch_type="json")
        except errors.NotFound:
            return None
        except errors.ApiError as exc:
            if exc.status in (409, 422):  # the annotation changed under us: read again
                return self.config.conflict_retry
            raise
        log.info("ungated", workload=key, job=job_name)
        await self._event(wl, kinds.WORKLOAD, "Normal", "GateCleared",
                          why or "fitgate: the gang can fit; removed fitgate.io/topology-fit "
                                 f"from {job_kind.kind} {job_name}")
        return None

    async def sync_held(self, key: str, job_kind: kinds.Kind, job_name: str,
                        wl: client.Obj, verdict: fitting.Verdict, scope: policy.Scope
                        ) -> float | None:
        ns, name = workqueue.split(key)
        namespace = ns or ""
        self.held.add(key)
        result = verdict.result
        recheck = (self.config.capacity_recheck
                   if result is not None and result.category == "capacity" else None)
        want = explanation(verdict, scope, name, self.clock.now())
        try:
            job = await self.api.get(job_kind, job_name, namespace)
        except errors.NotFound:
            return None
        raw = gating.annotations_of(job).get(gating.EXPLANATION)
        try:
            have = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            have = None
        if isinstance(have, Mapping) and _same(have, want):
            return recheck
        path = "/metadata/annotations"
        body = json.dumps(want, separators=(",", ":"))
        ops: list[dict[str, Any]] = (
            [{"op": "add", "path": f"{path}/{gating.escape_pointer(gating.EXPLANATION)}",
              "value": body}]
            if isinstance((job.get("metadata") or {}).get("annotations"), Mapping)
            else [{"op": "add", "path": path, "value": {gating.EXPLANATION: body}}])
        try:
            await self.api.patch(job_kind, job_name, ops, namespace=namespace,
                                 patch_type="json")
        except errors.NotFound:
            return None
        except errors.ApiError as exc:
            if exc.status in (409, 422):
                return self.config.conflict_retry
            raise
        lead = ("its FitPolicy forbids every node and shape that could host it"
                if verdict.violation else
                "no node and no NodeShape can host it" if want["category"] == "configuration"
                else "the whole gang does not fit within the NodeShapes' limits")
        note = f"fitgate holds this gang before quota: {lead}: " + "; ".join(want["reasons"])
        log.info("held", workload=key, category=want["category"],
                 violation=verdict.violation)
        metrics.job_held("gate", "policy" if verdict.violation else str(want["category"]))
        await self._event(wl, kinds.WORKLOAD, "Warning", "GateHeld", note)
        await self._event(job, job_kind, "Warning", "GateHeld", note)
        return recheck

    async def _event(self, obj: client.Obj, kind: kinds.Kind,
                     type_: Literal["Normal", "Warning"], reason: str, note: str) -> None:
        """An Event regarding the Workload or its Job, written the way the check writes
        its own (a failure to write one is logged, never fatal)."""
        await events.Recorder(self.api, self.clock, instance=self.config.instance).record(
            obj, type_, reason, note, action="Gate", kind=kind)
