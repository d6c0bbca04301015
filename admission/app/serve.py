"""`fitgate serve`: the process that runs fitgate's controllers (and the webhook) in a cluster.

Start-up, in order:
1. configuration (`config.load`) and logs (`logging.configure`);
2. the API client (`kube.client.ApiClient`: in-cluster, or a kubeconfig and context), and
   the Kubernetes version to follow (`kubeversion.resolve`: the API server's, unless
   `kube_version` overrides it; an unsupported one stops the start);
3. the informers (`kube.cache.Informers`, every kind of `cache.SERVE`), the
   `inventory.ClusterInventory` over their stores, the reconcile `workqueue.Runtime`;
4. the components (`components.factories()`): each gets the `Context` and returns a
   `Component` — controllers to register and servers to run (the webhook's TLS server);
5. the health server on `health_port`, on every replica: `/healthz` (the process is alive),
   `/readyz` (200 once every informer is synced and every server, the webhook's when it
   is enabled, listens; the body lists each kind's state, e.g. a CRD that is not
   installed, and the servers'), `/metrics` (prometheus_client's default registry);
6. wait until the informers are ready and the inventory has applied what they hold, start
   the every-replica controllers;
7. leader election on the Lease (`kube.lease.Elector`): while leading, the leader-only
   controllers run; when leadership is lost they stop, and start again if it returns.

SIGTERM or SIGINT: stop the controllers, release the Lease, stop the servers and watches,
close the client; exit 0.

Other branches plug in without editing this file: write a factory
`def component(ctx: context.Context) -> context.Component` and list it in
`admission/app/components.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import signal
import sys
import time
from collections.abc import Callable, Sequence

import prometheus_client
import structlog
from aiohttp import web

from admission import clock as clock_
from admission import config, context
from admission.app import components, kubeversion
from admission.app import logging as flog
from admission.engine import inventory
from admission.kube import cache, client, lease
from admission.runtime import collector, metrics, workqueue

log = structlog.get_logger("fitgate.serve")



INFORMERS = web.AppKey("informers", cache.Informers)
ELECTOR = web.AppKey("elector", lease.Elector)
SERVING: web.AppKey[Callable[[], bool]] = web.AppKey("serving")


def health_app(informers: cache.Informers, elector: lease.Elector | None = None,
               serving: Callable[[], bool] = lambda: True) -> web.Application:
    """/healthz, /readyz and /metrics. `serving`: whether every server listens (readiness
    waits for it too, so a Service routes admission reviews only to a replica whose
    webhook answers)."""
    app = web.Application()
    app[INFORMERS] = informers
    app[SERVING] = serving
    if elector is not None:
        app[ELECTOR] = elector
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    informers = request.app[INFORMERS]
    serving = request.app[SERVING]()
    ready = bool(informers.ready) and serving
    body: dict[str, object] = {"ready": ready, "informers": informers.status(),
                               "servers": "listening" if serving else "not started"}
    if ELECTOR in request.app:
        body["leader"] = request.app[ELECTOR].is_leader
    return web.Response(status=200 if ready else 503,
                        text=json.dumps(body, indent=1) + "\n",
                        content_type="application/json")


async def _metrics(request: web.Request) -> web.Response:
    data = prometheus_client.generate_latest(prometheus_client.REGISTRY)
    return web.Response(body=data, headers={"Content-Type":
                                            prometheus_client.CONTENT_TYPE_LATEST})


class Service:
    """The running process's parts; `run` is the whole lifecycle."""

    def __init__(self, cfg: config.Config, api: client.Client, *,
                 factories: Sequence[context.Factory] | None = None,
                 specs: Sequence[cache.Spec] | None = None,
                 clock: clock_.Clock | None = None) -> None:
        if cfg.kube_version == config.AUTO:
            raise ValueError("Service needs the Kubernetes version to follow: "
                             "kubeversion.resolve(api, cfg) first")
        self.cfg = cfg
        self.api = api
        self.clock = clock or clock_.SystemClock()
        metrics.build_info(metrics.version(), cfg.kube_version)
        if specs is None:
            specs = (*cache.SERVE, *(cache.KARPENTER if cfg.karpenter else ()))
        self.informers = cache.Informers(api, specs)
        self.inventory = inventory.ClusterInventory(self.informers.store,
                                                    timeout=cfg.decision_timeout,
                                                    kube_version=cfg.kube_version)
        self.runtime = workqueue.Runtime(self.informers.store, clock=self.clock,
                                          workers=cfg.workers)
        self.elector = lease.Elector(
            api, name=cfg.lease_name, namespace=cfg.namespace, identity=cfg.identity,
            lease_duration=cfg.lease_duration, renew_deadline=cfg.renew_deadline,
            retry_period=cfg.retry_period, clock=self.clock) if cfg.leader_election else None
        ctx = context.Context(cfg, api, self.informers, self.inventory, self.runtime, self.clock)
        self.servers: list[context.Server] = []
        for factory in (components.factories() if factories is None else factories):
            part = factory(ctx)
            for ctrl in part.controllers:
                self.runtime.register(ctrl)
            self.servers.extend(part.servers)
        self.health_port: int | None = None  # bound port, once started
        self.serving = False  # every server started (readiness)
        self._tasks: list[asyncio.Task[None]] = []
        self._survivors: collector.Survivors | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set, then shut down gracefully."""
        runner = web.AppRunner(health_app(self.informers, self.elector,
                                          serving=lambda: self.serving), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.cfg.health_address, self.cfg.health_port)
        await site.start()
        self.health_port = int(runner.addresses[0][1])
        log.info("serve.health", address=self.cfg.health_address, port=self.health_port)
        self.informers.start()
        started: list[context.Server] = []
        try:
            waiter = asyncio.create_task(self._until_ready())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
            for t in (waiter, stopper):
                t.cancel()
            await asyncio.gather(waiter, stopper, return_exceptions=True)
            if not stop.is_set():
                for s in self.servers:
                    await s.start()
                    started.append(s)
                self.serving = True
                self.runtime.start(leader_only=False)
                self._tasks.append(asyncio.create_task(self._lead(), name="leader"))
                await stop.wait()
            log.info("serve.stopping")
        finally:
            self.serving = False
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.runtime.stop()
            for s in reversed(started):
                with contextlib.suppress(Exception):
                    await s.stop()
            await self.informers.stop()
            self.inventory.close()
            if self._survivors is not None:
                self._survivors.remove()
            await runner.cleanup()
            log.info("serve.stopped")

    async def _until_ready(self) -> None:
        waited = 0
        while not await self.informers.wait_ready(10):
            waited += 10
            log.warning("serve.waiting_for_informers", seconds=waited,
                        informers={k: v for k, v in self.informers.status().items()
                                   if v != "synced"})
        log.info("serve.ready", informers=self.informers.status())
        # The engine applies the initial objects on its own thread: controllers start once
        # it has caught up, so their first decisions see the whole cluster.
        started = time.perf_counter()
        stats = await asyncio.to_thread(self.inventory.stats)  # applies what is queued
        log.info("serve.inventory_ready", seconds=round(time.perf_counter() - started, 3),
                 problems=len(self.inventory.problems()),
                 **{k: v for k, v in stats.items() if k in ("nodes", "devices", "pods")})
        # The initial list is most of what this process will ever hold and lives as long
        # as it: out of the collector's sight, so no later collection walks it again (a
        # cold decision on 1,000 realistic nodes measured 158 ms with it in sight, 85 ms
        # without). Reference counting still frees what is replaced.
        gc.freeze()
        # ... and what survives each later full collection too (`runtime.collector`).
        self._survivors = collector.freeze_survivors()

    async def _lead(self) -> None:
        """Run the leader-only controllers while this replica leads."""
        if self.elector is None:
            metrics.LEADER.set(1)
            self.runtime.start(leader_only=True)
            await asyncio.Event().wait()
            return
        elector = self.elector
        campaign = asyncio.create_task(elector.run(), name="lease")
        try:
            while True:
                await elector.leading.wait()
                log.info("serve.leading", identity=self.cfg.identity)
                metrics.LEADER.set(1)
                self.runtime.start(leader_only=True)
                await elector.lost.wait()
                log.warning("serve.not_leading", identity=self.cfg.identity)
                metrics.LEADER.set(0)
                await self.runtime.stop(leader_only=True)
        finally:
            metrics.LEADER.set(0)
            await self.runtime.stop(leader_only=True)
            campaign.cancel()  # releases the Lease
            await asyncio.gather(campaign, return_exceptions=True)


async def serve(cfg: config.Config, *, factories: Sequence[context.Factory] | None = None) -> int:
    """The `fitgate serve` process: connect, run until SIGTERM/SIGINT, shut down."""
    flog.configure(cfg.log_level, cfg.log_format)
    # Decisions run in threads and hold the GIL for long stretches of pure Python; the
    # event loop (webhook, health, Lease, watches) waits at most this long per turn.
    sys.setswitchinterval(cfg.switch_interval)
    api = await client.ApiClient.connect(cfg.kubeconfig, cfg.context,
                                         request_timeout=cfg.request_timeout)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        cfg = await kubeversion.resolve(api, cfg)
        log.info("serve.starting", identity=cfg.identity, namespace=cfg.namespace,
                 kube_version=cfg.kube_version)
        await Service(cfg, api, factories=factories).run(stop)
    finally:
        await api.close()
    return 0
