"""What a component of `fitgate serve` is given and what it hands back.

A component is a factory `def component(ctx: context.Context) -> context.Component`: from
the process's configuration, API client, informers, inventory, reconcile runtime and clock
it builds its controllers (registered in the runtime, `admission.runtime.workqueue`) and
its servers (started on every replica once the caches are ready). `admission.app.serve`
builds the `Context`; `admission.app.components` lists the factories. Living below both,
this module lets a stage's component name these types without importing the process that
runs it (no import circle between serve, components and the stages).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from admission import clock as clock_
from admission import config
from admission.engine import fitting, inventory
from admission.kube import cache, client
from admission.runtime import workqueue


class Server(Protocol):
    """Something serve starts after the informers are ready and stops at shutdown (on
    every replica), e.g. the webhook's TLS server."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclasses.dataclass
class Context:
    """What a component may use."""

    config: config.Config
    api: client.Client
    informers: cache.Informers
    inventory: inventory.ClusterInventory
    runtime: workqueue.Runtime
    clock: clock_.Clock
    _idle: fitting.StoreEngine | None = dataclasses.field(default=None, init=False,
                                                          repr=False)

    def idle_engine(self) -> fitting.StoreEngine:
        """The process's one engine over the idle cluster (nodes, devices and shapes, no
        usage): the gate and the check share it (it decides under its own lock, so the
        threads that ask take turns). The webhook's decision process keeps its own copy
        (see `admission.webhook.decider`)."""
        if self._idle is None:
            self._idle = fitting.StoreEngine(
                {k: self.informers.store(k) for k in fitting.IDLE_KINDS}, idle=True,
                kube_version=self.config.kube_version)
        return self._idle


@dataclasses.dataclass
class Component:
    controllers: Sequence[workqueue.Controller] = ()
    servers: Sequence[Server] = ()


Factory = Callable[[Context], Component]
