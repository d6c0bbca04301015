"""Watch-backed caches: one `Informer` per kind fills a `store.Store`; `Informers` holds them.

An informer lists its kind, puts the items in its store (`Store.replace`) and watches from
the list's resourceVersion, applying each event to the store, which tells its subscribers.
What can go wrong, and what it does:

- The watch ends (the server's watch timeout, a proxy closing it): watch again from the
  last resourceVersion seen (an event's, or a BOOKMARK's); a watch that ended at once
  with nothing in it backs off first, so a proxy that cuts watches is not hammered.
- 410 Gone (the resourceVersion is older than the server's history): list again and
  `Store.replace`, which tells subscribers exactly the differences (objects added, changed
  or deleted while the watch was away): nothing lost, nothing told twice.
- The API cannot be reached or answers 5xx/429: wait (bounded exponential backoff), then
  watch again from the last resourceVersion, or list again if the watch says Gone.
- The kind is not served (404 on list: its CRD is not installed, e.g. ProvisioningRequest
  without the autoscaler's CRDs or FitPolicy before the chart's CRDs): the informer
  reports it (`problem`, logged once) and retries at the backoff's ceiling, so installing
  the CRD later is picked up. A kind marked optional does not hold readiness back when it
  is not served; every other kind does.

`synced` is set after the first successful list and stays set through relists (the store
then holds the last known state, which readers may use while the informer catches up).

Objects are stored as `compact.compact` makes them (as controller-runtime's cache
transforms do): without `metadata.managedFields` and the other fields no reader reads,
with equal small leaves shared and short strings interned. A list's items are compacted
as they arrive (`Client.list`'s `each`), so the raw listing is never held whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Iterable

import prometheus_client
import structlog

from admission.kube import client, compact, errors, kinds, store

Sleep = Callable[[float], Awaitable[None]]
log = structlog.get_logger("fitgate.cache")

SYNCED = prometheus_client.Gauge(
    "fitgate_informer_synced", "1 once the kind's cache has listed (0: not yet, or not "
    "served)", ["kind"])
LISTS = prometheus_client.Counter(
    "fitgate_informer_lists_total", "Lists of a kind (the first and every relist)", ["kind"])
RECONNECTS = prometheus_client.Counter(
    "fitgate_informer_reconnects_total", "Watches of a kind started again after an error "
    "(not after a normal close)", ["kind"])
EVENTS = prometheus_client.Counter(
    "fitgate_informer_events_total", "Watch events applied to a kind's cache", ["kind"])

#: PodTemplates and NodeClaims fitgate creates carry this label; only they are cached.
POD_TEMPLATE_SELECTOR = "app.kubernetes.io/managed-by=fitgate"


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one informer caches."""

    kind: kinds.Kind
    label_selector: str | None = None
    optional: bool = False  # not served: reported, but readiness does not wait for it


#: The kinds `fitgate serve` caches. ProvisioningRequests, NodeShapes, FitPolicies and
#: Karpenter's kinds are optional: a cluster without the autoscaler's CRD, without
#: Karpenter, or without fitgate's own CRDs (no shapes: decisions on existing nodes only;
#: no policies), still runs the rest.
SERVE = (
    Spec(kinds.NODE), Spec(kinds.POD), Spec(kinds.RESOURCE_SLICE), Spec(kinds.RESOURCE_CLAIM),
    Spec(kinds.RESOURCE_CLAIM_TEMPLATE), Spec(kinds.DEVICE_CLASS), Spec(kinds.WORKLOAD),
    Spec(kinds.ADMISSION_CHECK), Spec(kinds.CLUSTER_QUEUE), Spec(kinds.LOCAL_QUEUE),
    Spec(kinds.RESOURCE_FLAVOR), Spec(kinds.PROVISIONING_REQUEST, optional=True),
    Spec(kinds.POD_TEMPLATE, label_selector=POD_TEMPLATE_SELECTOR),
    Spec(kinds.NODE_SHAPE, optional=True),
    Spec(kinds.FIT_POLICY, optional=True), Spec(kinds.JOB),
    # FitPolicy subjects select namespaces by label (the webhook and the gate).
    Spec(kinds.NAMESPACE),
)

#: With Karpenter support on (config `karpenter`): fitgate's own NodeClaims only, and the
#: NodePools its shapes name.
KARPENTER = (
    Spec(kinds.NODE_CLAIM, label_selector=POD_TEMPLATE_SELECTOR, optional=True),
    Spec(kinds.NODE_POOL, optional=True),
)


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff with jitter: base·2^(failures-1), at most `ceiling`."""

    base: float = 0.5
    ceiling: float = 30.0
    jitter: float = 0.2

    def delay(self, failures: int) -> float:
        d = min(self.ceiling, self.base * (2 ** max(0, failures - 1)))
        return float(d * (1 + self.jitter * random.random()))


#: A watch that ends sooner than this, having delivered nothing, counts as a failure.
QUICK_CLOSE_SECONDS = 1.0
#: Longest an informer applies events without yielding to the event loop. A watch hands
#: over every event it has buffered without suspending, and each event runs the store's
#: subscribers (indexes, the engine's queue, the controllers' keys): a burst of events
#: (a relist's differences, a gang's pods, a batch of Workloads) was one loop step of up
#: to hundreds of milliseconds, the loop's lag for everything else.
STEP_SECONDS = 0.005

_Store = store.Store  # (the name `store` is a method of Informers)


def strip(obj: client.Obj, kind: str | None = None) -> client.Obj:
    """The object as cached (`compact.compact`)."""
    return compact.compact(obj, kind)


def _retryable(exc: errors.ApiError) -> bool:
    return exc.status == 0 or exc.status == 429 or exc.status >= 500


class Informer:
    """List-then-watch of one kind into one store; see the module docstring."""

    def __init__(self, api: client.Client, spec: Spec, into: store.Store | None = None, *,
                 backoff: Backoff = Backoff(), sleep: Sleep = asyncio.sleep) -> None:
        self.api = api
        self.spec = spec
        self.store = into if into is not None else store.Store(spec.kind)
        self.synced = asyncio.Event()
        self.problem: str | None = None  # why it is not current (None: all is well)
        self.unserved = False
        self.lists = 0  # how many times it listed (1 + relists): for tests and metrics
        self.backoff = backoff
        self._sleep = sleep
        self._rv = ""
        self._log = log.bind(kind=spec.kind.kind)

    @property
    def ready(self) -> bool:
        """Synced, or optional and not served."""
        return self.synced.is_set() or (self.spec.optional and self.unserved)

    async def run(self) -> None:
        """Run until cancelled."""
        failures = 0
        while True:
            try:
                await self._list()
                failures = 0
                await self._watch_until_gone()
            except errors.ApiError as exc:
                failures += 1
                self._fail(exc)
                await self._sleep(self.backoff.ceiling if self.unserved
                                  else self.backoff.delay(failures))

    def _fail(self, exc: errors.ApiError) -> None:
        unserved = exc.status == 404
        why = (f"{self.spec.kind.plural}.{self.spec.kind.group or 'core'} is not served "
               f"by the API server (CRD not installed?)" if unserved
               else f"cannot list or watch {self.spec.kind.plural}: {exc}")
        if why != self.problem:
            (self._log.warning if unserved or not _retryable(exc) else self._log.info)(
                "informer.problem", problem=why)
        self.problem, self.unserved = why, unserved

    async def _list(self) -> None:
        kind = self.spec.kind.kind
        listing = await self.api.list(self.spec.kind, label_selector=self.spec.label_selector,
                                      each=lambda o: strip(o, kind))
        self.lists += 1
        self.store.replace(listing.items)
        LISTS.labels(self.spec.kind.kind).inc()
        SYNCED.labels(self.spec.kind.kind).set(1)
        self._rv = listing.resource_version
        if self.lists > 1:
            self._log.info("informer.relisted", objects=len(listing.items),
                           resource_version=self._rv)
        if self.problem:
            self._log.info("informer.recovered", objects=len(listing.items))
        self.problem, self.unserved = None, False
        self.synced.set()

    async def _watch_until_gone(self) -> None:
        """Watch from the last resourceVersion; reconnect on close and on outages; return
        on Gone (the caller lists again)."""
        failures = 0
        while True:
            started, seen = time.monotonic(), False
            step = time.perf_counter()
            try:
                async for ev in self.api.watch(self.spec.kind, self._rv,
                                               label_selector=self.spec.label_selector):
                    rv = (ev.object.get("metadata") or {}).get("resourceVersion")
                    if ev.type != "BOOKMARK":
                        self.store.apply(client.WatchEvent(ev.type, strip(ev.object,
                                                                       self.spec.kind.kind)))
                        EVENTS.labels(self.spec.kind.kind).inc()
                    if rv:
                        self._rv = rv
                    failures, seen = 0, True
                    self.problem = None
                    if time.perf_counter() - step > STEP_SECONDS:
                        await asyncio.sleep(0)  # let the loop run others (STEP_SECONDS)
                        step = time.perf_counter()
                if not seen and time.monotonic() - started < QUICK_CLOSE_SECONDS:
                    # Closed at once with nothing in it (a proxy cutting watches, say):
                    # back off rather than spin.
                    failures += 1
                    await self._sleep(self.backoff.delay(failures))
            except errors.Gone as exc:
                self._log.info("informer.gone", resource_version=self._rv, error=str(exc))
                return
            except errors.ApiError as exc:
                if not _retryable(exc):
                    raise
                failures += 1
                RECONNECTS.labels(self.spec.kind.kind).inc()
                self.problem = f"watch of {self.spec.kind.plural} interrupted: {exc}"
                self._log.info("informer.reconnect", error=str(exc), failures=failures)
                await self._sleep(self.backoff.delay(failures))


class Informers:
    """One informer and store per kind, started and stopped together."""

    def __init__(self, api: client.Client, specs: Iterable[Spec] = SERVE, *,
                 backoff: Backoff = Backoff(), sleep: Sleep = asyncio.sleep) -> None:
        self.informers = {s.kind.kind: Informer(api, s, backoff=backoff, sleep=sleep)
                          for s in specs}
        self._tasks: list[asyncio.Task[None]] = []

    def store(self, kind: kinds.Kind) -> _Store:
        return self.informers[kind.kind].store

    def stores(self) -> dict[str, _Store]:
        return {k: i.store for k, i in self.informers.items()}

    def start(self) -> None:
        if self._tasks:
            return
        self._tasks = [asyncio.create_task(i.run(), name=f"informer-{k}")
                       for k, i in self.informers.items()]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    @property
    def ready(self) -> bool:
        return all(i.ready for i in self.informers.values())

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until every informer is ready (see `Informer.ready`); False on timeout."""
        async def ready() -> None:
            # An optional kind turns ready by being found unserved, not by a sync event:
            # poll (cheap; only while starting).
            while not self.ready:
                await asyncio.sleep(0.05)
        try:
            await asyncio.wait_for(ready(), timeout)
        except TimeoutError:
            return False
        return True

    def status(self) -> dict[str, str]:
        """Per kind: "synced", or what is wrong (for /readyz and logs)."""
        out = {}
        for k, i in self.informers.items():
            if i.problem:
                out[k] = ("optional, " if i.spec.optional and i.unserved else "") + i.problem
            else:
                out[k] = "synced" if i.synced.is_set() else "syncing"
        return out
