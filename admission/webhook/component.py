"""The webhook and the gate as a `fitgate serve` component (list `component` in
`admission/app/components.py`).

- The webhook server runs on every replica (`context.Server`): TLS from `cert_dir`
  (`tls.crt`, `tls.key`, reloaded when they change) on `webhook_port`; `/readyz` answers
  200 once the informers are synced.
- The gate controller and the FitPolicy and NodeShape status controllers (`Valid`,
  `admission.policy.status`, `admission.engine.shapestatus`) run on the leader
  (`controller.Controller`).

Each decides on the idle cluster (could the gang ever fit as configured?): the gate in
a worker thread on the process's one idle engine (`context.Context.idle_engine`, shared
with the check); the webhook, by default (`webhook_decisions: process`), in a child
process with its own copy (`decider.ProcessDecider`), so neither the engine's GIL time
nor its garbage collections stall the loop that answers admission requests, and a gate
decision never makes a review wait (`webhook_decisions: thread` uses the shared engine).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import structlog

from admission import context
from admission.engine import fitting, shapestatus
from admission.gate import reconciler as gate
from admission.kube import kinds, store
from admission.policy import status as policy_status
from admission.webhook import connections, decider, review, server

log = structlog.get_logger("fitgate.webhook")

#: The stores the webhook and the gate read.
KINDS = (*fitting.INVENTORY_KINDS, kinds.RESOURCE_CLAIM_TEMPLATE, kinds.WORKLOAD,
         kinds.LOCAL_QUEUE, kinds.CLUSTER_QUEUE, kinds.ADMISSION_CHECK, kinds.NAMESPACE,
         kinds.FIT_POLICY)


class WebhookServer:
    """The webhook's HTTPS site as a `context.Server`."""

    def __init__(self, hooks: review.Hooks, host: str, port: int, cert_dir: str,
                 limits: connections.Limits | None = None) -> None:
        self.settings = server.Settings(cert_file=os.path.join(cert_dir, "tls.crt"),
                                        key_file=os.path.join(cert_dir, "tls.key"),
                                        limits=limits or connections.Limits())
        self.app = server.init(hooks, self.settings)
        self.host = host
        self.port = port
        self.addresses: Sequence[Any] = ()
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        self.addresses = await self._stack.enter_async_context(
            server.serving(self.app, self.host, self.port))
        log.info("webhook.serving", addresses=[list(a) for a in self.addresses])

    async def stop(self) -> None:
        await self._stack.aclose()


def component(ctx: context.Context) -> context.Component:
    stores: dict[kinds.Kind, store.Store] = {k: ctx.informers.store(k) for k in KINDS}
    version = ctx.config.kube_version
    gate_controller = gate.GateController(
        ctx.api, stores, ctx.idle_engine(), clock=ctx.clock,
        config=gate.GateConfig(decision_timeout=ctx.config.decision_timeout))
    servers: list[context.Server] = []
    if ctx.config.cert_dir:
        deciding: fitting.Engine | decider.ProcessDecider = (
            decider.ProcessDecider(stores, kube_version=version,
                                   timeout=ctx.config.decision_timeout)
            if ctx.config.webhook_decisions == "process"
            else ctx.idle_engine())
        hooks = review.Hooks(stores, deciding, ready=lambda: bool(ctx.informers.ready),
                             config=review.Config(
                                 decision_budget_seconds=ctx.config.webhook_decision_budget))
        limits = connections.Limits(max_connections=ctx.config.webhook_max_connections,
                                    header_timeout=ctx.config.webhook_header_timeout,
                                    body_timeout=ctx.config.webhook_body_timeout)
        servers.append(WebhookServer(hooks, ctx.config.webhook_address,
                                     ctx.config.webhook_port, ctx.config.cert_dir, limits))
    else:
        log.warning("webhook.disabled", reason="no cert_dir configured; the gate still runs")
    statuses = policy_status.PolicyStatusController(ctx.api, stores[kinds.FIT_POLICY],
                                                    clock=ctx.clock)
    shape_statuses = shapestatus.ShapeStatusController(
        ctx.api, stores[kinds.NODE_SHAPE], stores[kinds.NODE], clock=ctx.clock,
        kube_version=version, karpenter=ctx.config.karpenter)
    return context.Component(controllers=[gate_controller, statuses, shape_statuses],
                             servers=servers)
