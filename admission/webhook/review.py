"""The webhook's decisions, independent of any HTTP framework: an AdmissionRequest in, an
AdmissionResponse out (`Hooks.review`). The aiohttp server (`server.py`) only parses,
delegates and writes JSON.

Three hooks:

- `mutate-jobs` (CREATE of the configured Kueue job kinds): when the job's LocalQueue
  feeds a ClusterQueue that uses fitgate's AdmissionCheck, add `fitgate.io/topology-fit`
  to `kueue.x-k8s.io/admission-gated-by`, keeping every other entry. Nothing else in the
  job changes.
- `validate-jobs` (CREATE of those kinds): when the gang can never fit for configuration
  reasons (no node and no NodeShape can host a pod set, or only nodes or shapes its
  FitPolicy forbids), answer with warnings, or a denial when a FitPolicy for the
  namespace or ClusterQueue says `enforcement: deny`. The message names the pod set, the
  claim, the constraint and the most any node or shape offers (fitcore's reasons).
- `mutate-pods` (CREATE of Pods): `release.gate_patch`, which adds the scheduling gate
  `fitgate.io/placement` to the pods of an admitted gang (labelled by the check's
  podSetUpdates) so the release controller binds them in fitcore's order.

The question is whether the gang could ever fit as configured: `component` gives the
hooks an engine over the idle cluster (`fitting.StoreEngine(idle=True)`), so a busy
cluster never reads as "impossible" (that is the check's to plan for, after quota).

Availability first: the AdmissionCheck is the enforcement point (`failurePolicy:
Ignore`), so the webhook's latency is bounded by design, never by the engine:

- `mutate-jobs` and `mutate-pods` read only the stores; they never wait for a decision.
- `validate-jobs` answers from a verdict cache keyed by the question (namespace, kind, the
  job's spec, the FitPolicy scope) and the version of the cluster as the engine reads it
  (bumped by every Node, ResourceSlice, DeviceClass, NodeShape, ResourceClaimTemplate,
  FitPolicy or Namespace change a decision can see; not by heartbeats or pods).
- A question not in the cache goes to one bounded worker (`decider.py`: in `fitgate
  serve` a child process with its own inventory; at most `max_pending` distinct questions
  queued or running; identical questions share one decision). The review waits for it
  at most `decision_budget_seconds` from its start; past that it is allowed **without a
  warning** (the user is told nothing false), the
  response's audit annotation `fit-check` says it was not checked and why, and the
  `fitgate_webhook_validations_total{outcome}` metric counts it (`deferred`). The decision
  finishes in the worker and lands in the cache, so the next review of that spec is
  answered from it. With the queue full the review is allowed at once, unqueued
  (`skipped`).
- A request the engine cannot read is allowed with a warning naming the field; a store
  not yet filled reads as empty; an engine error is allowed with a warning; the whole
  review is bounded by `budget_seconds` (a net, set below the webhook's timeoutSeconds).

Why the worker is a process and not a thread: `decider.py` (measured; docs/gate.md).

A large request (`offload.py`: a body of 64 KiB or more) has its question's key hashed
and its gang read in a bounded pool of threads, not on the loop, so a few large Jobs do
not hold up the pod hook, the job mutations and `/healthz` behind them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import structlog

import fitcore
from admission.engine import fitting
from admission.gate import predicates as gating
from admission.kube import client, kinds, store
from admission.policy import fitpolicy as policy
from admission.release import reconciler as release
from admission.runtime import metrics
from admission.webhook import decider, models, offload

log = structlog.get_logger("fitgate.webhook")
Hook = Literal["mutate-jobs", "validate-jobs", "mutate-pods"]
HOOKS: tuple[Hook, ...] = ("mutate-jobs", "validate-jobs", "mutate-pods")
PodGate = Callable[[Mapping[str, Any]], list[dict[str, Any]]]
_MAX_WARNINGS = 8
_MAX_WARNING_CHARS = 480
#: The key of the audit annotation saying how validate-jobs answered (the API server logs
#: it as `<webhook name>/fit-check`).
AUDIT_KEY = "fit-check"
Outcome = Literal["cached", "decided", "deferred", "skipped", "unavailable", "unreadable",
                  "failed", "timed-out"]


@dataclasses.dataclass(frozen=True)
class Config:
    job_kinds: tuple[kinds.Kind, ...] = gating.DEFAULT_JOB_KINDS
    gate: str = gating.GATE
    controller: str = gating.CONTROLLER_NAME
    #: Seconds one review may take at most, whatever it waits for (a net; keep it below
    #: the webhook's timeoutSeconds).
    budget_seconds: float = 2.0
    #: Seconds a validation waits, from its start, for a decision the cache does not hold;
    #: past it the review is allowed unchecked and the decision finishes in the worker.
    decision_budget_seconds: float = 0.010
    #: Decisions remembered (per namespace, job spec, scope and cluster state).
    cache_size: int = 4096
    #: Distinct decisions queued or running in the worker at most; past it a review is
    #: allowed unchecked and its question is not queued.
    max_pending: int = 8


class Hooks:
    """The webhook core; see the module docstring. `stores` are the watch-backed caches
    (LocalQueue, ClusterQueue, AdmissionCheck, Namespace, FitPolicy, NodeShape,
    ResourceClaimTemplate, ResourceClaim and what the engine reads)."""

    def __init__(self, stores: Mapping[kinds.Kind, store.Store],
                 engine: fitting.Engine | decider.ThreadDecider | decider.ProcessDecider, *,
                 config: Config | None = None, pod_gate: PodGate = release.gate_patch,
                 ready: Callable[[], bool] = lambda: True,
                 reader: offload.Offload | None = None) -> None:
        self.config = config or Config()
        #: Where large requests are parsed and read (server.py parses with it too).
        self.offload = reader or offload.Offload()
        self.stores = stores
        # Where decisions run: an engine of this process is run in one worker thread.
        self.decider: decider.Decider = (
            engine if isinstance(engine, (decider.ThreadDecider, decider.ProcessDecider))
            else decider.ThreadDecider(engine))
        self.pod_gate = pod_gate
        self.ready = ready
        self.queues = gating.Queues(self._store(kinds.LOCAL_QUEUE),
                                    self._store(kinds.CLUSTER_QUEUE),
                                    self._store(kinds.ADMISSION_CHECK),
                                    self.config.controller)
        self.policies = policy.Policies(self._store(kinds.FIT_POLICY))
        self._kinds = {(k.group, k.kind): k for k in self.config.job_kinds}
        self._version = 0
        # A verdict depends on the idle cluster (nodes, devices, shapes), the claims the
        # job names, and the policies: not on pods coming and going.
        for kind in (*fitting.IDLE_KINDS, kinds.RESOURCE_CLAIM_TEMPLATE,
                     kinds.FIT_POLICY, kinds.NAMESPACE):
            self._store(kind).subscribe(self._changed(kind))
        self._cache: collections.OrderedDict[tuple[Any, ...], fitting.Verdict] = \
            collections.OrderedDict()
        self._inflight: dict[tuple[Any, ...], asyncio.Future[fitting.Verdict]] = {}

    def _store(self, kind: kinds.Kind) -> store.Store:
        s = self.stores.get(kind)
        if s is None:  # a kind nobody watches reads as empty
            s = store.Store(kind)
            self.stores = {**self.stores, kind: s}
        return s

    def _changed(self, kind: kinds.Kind) -> store.Subscriber:
        def on_event(event: client.WatchEvent, before: client.Obj | None) -> None:
            if fitting.relevant(kind, event, before):
                self._version += 1
        return on_event

    def close(self) -> None:
        self.decider.close()
        self.offload.close()

    # ------------------------------------------------------------------ dispatch

    async def review(self, hook: Hook, request: models.AdmissionRequest, *, size: int = 0
                     ) -> models.AdmissionResponse:
        """Answer one request within the budget; never raises for the request's content.
        `size`: the request body's bytes (a large one is read off the loop)."""
        started = time.perf_counter()
        fn: Callable[[models.AdmissionRequest], Awaitable[models.AdmissionResponse]]
        if hook == "validate-jobs":
            fn = functools.partial(self.validate_job, size=size)
        else:
            fn = self.mutate_job if hook == "mutate-jobs" else self.mutate_pod
        bound = log.bind(hook=hook, uid=request.uid, kind=request.kind.kind,
                         namespace=request.namespace, name=request.name or None)
        try:
            async with asyncio.timeout(self.config.budget_seconds):
                response = await fn(request)
        except TimeoutError:
            bound.warning("review timed out", budget=self.config.budget_seconds)
            if hook == "validate-jobs":
                metrics.WEBHOOK_VALIDATIONS.labels("timed-out").inc()
            response = models.allow(request, audit={AUDIT_KEY: (
                f"not checked: the review took longer than {self.config.budget_seconds:g}s; "
                "the AdmissionCheck decides")})
        except Exception as exc:  # a bug must not turn into an API server error
            bound.exception("review failed")
            if hook == "validate-jobs":
                metrics.WEBHOOK_VALIDATIONS.labels("failed").inc()
            response = models.allow(request, warnings=_short([
                f"fitgate could not check this {request.kind.kind} ({type(exc).__name__}); "
                "its AdmissionCheck will decide"]))
        elapsed = time.perf_counter() - started
        metrics.WEBHOOK_REVIEW_SECONDS.labels(hook).observe(elapsed)
        bound.debug("reviewed", allowed=response.allowed, patched=bool(response.patch),
                    warnings=len(response.warnings), audit=response.audit or None,
                    ms=round(elapsed * 1e3, 3))
        return response

    def _job_kind(self, request: models.AdmissionRequest) -> kinds.Kind | None:
        return self._kinds.get((request.kind.group, request.kind.kind))

    def _queue(self, request: models.AdmissionRequest) -> gating.Queue | None:
        obj = request.object
        if (request.operation != "CREATE" or obj is None or self._job_kind(request) is None
                or not request.namespace):
            return None
        if gating.labels_of(obj).get(gating.PREBUILT_WORKLOAD_LABEL):
            return None  # Kueue does not copy the gate to a prebuilt Workload
        queue = self.queues.of(obj, request.namespace)
        return queue if queue is not None and queue.ours else None

    # ------------------------------------------------------------------ mutate-jobs

    async def mutate_job(self, request: models.AdmissionRequest) -> models.AdmissionResponse:
        queue = self._queue(request)
        if queue is None or request.object is None:
            return models.allow(request)
        return models.allow(request, patch=gating.add_gate_patch(request.object,
                                                                 self.config.gate))

    # ------------------------------------------------------------------ mutate-pods

    async def mutate_pod(self, request: models.AdmissionRequest) -> models.AdmissionResponse:
        obj = request.object
        if (request.operation != "CREATE" or obj is None or request.kind.kind != "Pod"
                or request.kind.group):
            return models.allow(request)
        return models.allow(request, patch=self.pod_gate(obj))

    # ---------------------------------------------------------------- validate-jobs

    async def validate_job(self, request: models.AdmissionRequest, *, size: int = 0
                           ) -> models.AdmissionResponse:
        deadline = time.perf_counter() + self.config.decision_budget_seconds
        queue = self._queue(request)
        obj = request.object
        if queue is None or obj is None:
            return models.allow(request)
        kind = request.kind.kind
        label = f"{kind} {request.namespace}/{request.name or gating_name(obj)}"
        body = {**obj, "kind": kind,
                "metadata": {**(obj.get("metadata") or {}), "namespace": request.namespace}}
        scope = self._scope(request.namespace, queue)
        key = await self.offload.run(size, self._key, request.namespace, body, scope)
        verdict = self._cache.get(key)
        if verdict is not None:
            self._cache.move_to_end(key)
            return self._answer(request, "cached", verdict, label, queue, scope)
        try:
            pending = self._inflight.get(key)
            if pending is None:
                pending = self._submit(key, body, scope, await self._read(size, body))
        except fitcore.InputError as exc:
            metrics.WEBHOOK_VALIDATIONS.labels("unreadable").inc()
            if kind in ("Job", "Workload"):
                return models.allow(request, warnings=_short([
                    f"fitgate cannot read {label}; its AdmissionCheck will report why: {exc}"]))
            return models.allow(request)  # judged by the gate on its Workload
        if pending is None:
            metrics.WEBHOOK_VALIDATIONS.labels("skipped").inc()
            return models.allow(request, audit={AUDIT_KEY: (
                f"not checked: the queue of decisions is full ({self.config.max_pending}); "
                "the AdmissionCheck decides")})
        try:
            verdict = await asyncio.wait_for(asyncio.shield(pending),
                                             max(0.0, deadline - time.perf_counter()))
        except decider.Unavailable as exc:  # the decision process is being replaced
            metrics.WEBHOOK_VALIDATIONS.labels("unavailable").inc()
            return models.allow(request, audit={AUDIT_KEY: (
                f"not checked: {exc}; the AdmissionCheck decides")})
        except TimeoutError:
            metrics.WEBHOOK_VALIDATIONS.labels("deferred").inc()
            return models.allow(request, audit={AUDIT_KEY: (
                "not checked within the webhook's "
                f"{self.config.decision_budget_seconds * 1e3:g} ms; decided in the background "
                "for the next review of this spec; the AdmissionCheck decides")})
        return self._answer(request, "decided", verdict, label, queue, scope)

    def _answer(self, request: models.AdmissionRequest, outcome: Outcome,
                verdict: fitting.Verdict, label: str, queue: gating.Queue,
                scope: policy.Scope) -> models.AdmissionResponse:
        """The response for a verdict: allowed, warned or denied."""
        metrics.WEBHOOK_VALIDATIONS.labels(outcome).inc()
        audit: dict[str, str] = {AUDIT_KEY: outcome}
        if not verdict.refuse:
            return models.allow(request, audit=audit)
        head = (f"{label} can never be admitted to ClusterQueue {queue.cluster_queue}: "
                + ("its FitPolicy forbids every node and shape that could host it"
                   if verdict.violation else "no node and no NodeShape can host it"))
        if scope.enforcement == "deny":
            metrics.job_held("validate-jobs", "policy" if verdict.violation else "configuration")
            return models.deny(request, "fitgate: " + "\n".join([head, *verdict.messages]),
                               code=403, reason="Forbidden", audit=audit)
        return models.allow(request, warnings=_short(["fitgate: " + head, *verdict.messages]),
                            audit=audit)

    def _scope(self, namespace: str, queue: gating.Queue) -> policy.Scope:
        policies, _bad = self.policies.current()
        ns = self._store(kinds.NAMESPACE).get(namespace)
        ns_labels = {str(k): str(v) for k, v in gating.labels_of(ns).items()} if ns else {}
        return policy.scope(policies, self._store(kinds.NODE_SHAPE).list(),
                            namespace=namespace, namespace_labels=ns_labels,
                            cluster_queue=queue.cluster_queue,
                            cluster_queue_labels=queue.cluster_queue_labels)

    def _key(self, namespace: str, obj: Mapping[str, Any], scope: policy.Scope
             ) -> tuple[Any, ...]:
        """Questions with one answer: same namespace, kind and spec, same policy scope,
        same cluster (nodes, devices, shapes, claim templates, policies)."""
        digest = hashlib.sha256(json.dumps(obj.get("spec"), sort_keys=True, default=str)
                                .encode()).hexdigest()
        return (namespace, obj.get("kind"), digest, scope.key, self._version)

    async def _read(self, size: int, obj: Mapping[str, Any]) -> fitcore.Gang:
        """The gang of a job (`fitting.gang_of`), read off the loop when the request is
        large (the claims are listed on the loop: the stores change there). Raises
        fitcore.InputError, with the fields, for the review to report."""
        ns = fitting.namespace_of(obj)
        rct = self.stores.get(kinds.RESOURCE_CLAIM_TEMPLATE)
        rc = self.stores.get(kinds.RESOURCE_CLAIM)
        return await self.offload.run(size, fitting.read_gang, obj,
                                      rct.list(ns) if rct is not None else [],
                                      rc.list(ns) if rc is not None else [])

    def _submit(self, key: tuple[Any, ...], obj: Mapping[str, Any],
                scope: policy.Scope, gang_: fitcore.Gang
                ) -> asyncio.Future[fitting.Verdict] | None:
        """The pending decision of a question not in the cache: the one already queued or
        running for it, or a new one in the worker; None when `max_pending` distinct
        decisions are already queued or running."""
        pending = self._inflight.get(key)
        if pending is not None:
            return pending
        if len(self._inflight) >= self.config.max_pending:
            return None
        pending = asyncio.wrap_future(self.decider.submit(obj, gang_, scope))
        self._inflight[key] = pending
        pending.add_done_callback(lambda f: self._settle(key, f))
        return pending

    def _settle(self, key: tuple[Any, ...], fut: asyncio.Future[fitting.Verdict]) -> None:
        self._inflight.pop(key, None)
        if fut.cancelled() or fut.exception() is not None:
            return
        self._cache[key] = fut.result()
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)


def gating_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        for k in ("name", "generateName"):
            if isinstance(meta.get(k), str) and meta[k]:
                return str(meta[k])
    return "<unnamed>"


def _short(lines: Sequence[str]) -> list[str]:
    out = [line if len(line) <= _MAX_WARNING_CHARS else line[:_MAX_WARNING_CHARS - 1] + "…"
           for line in lines[:_MAX_WARNINGS]]
    if len(lines) > _MAX_WARNINGS:
        out.append(f"… and {len(lines) - _MAX_WARNINGS} more; `fitgate explain` shows all")
    return out

