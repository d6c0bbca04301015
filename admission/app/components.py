"""What `fitgate serve` runs: the list of component factories.

A factory is `def component(ctx: serve.Context) -> serve.Component`: it builds its
controllers (registered in the reconcile runtime; see `admission.runtime.workqueue` for the
interface) and servers (started on every replica once the caches are ready; see
`serve.Server`) from the context: configuration, API client, informers, inventory,
runtime, clock. Imports are inside `factories` so that a component's module may import
`admission.app.serve` for its types without an import cycle.

The lead adds each branch's factory here at merge (ctl-logic: the Workload reconciler;
webhook: the webhook server and the gate controller).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from admission.app import serve


def factories() -> list[serve.Factory]:
    from admission.certs import keeper as certs
    from admission.check import admissioncheck, workload
    from admission.webhook import component as webhook

    # certs before webhook: servers start in this order, and the webhook server needs the
    # certificate files the self-managed certificate keeper writes.
    return [admissioncheck.component, workload.component, certs.component, webhook.component]
